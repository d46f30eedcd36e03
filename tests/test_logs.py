"""Log lines say what they are about: LOG_FORMAT=json writes one JSON object a line with the
job, URL, task, spider, worker, channel and version wherever a line has them; text stays the
default, with the job and URL where the message does not say them. The processes' own lines
under LOG_FORMAT=json: tests/test_logs_json.py."""

from __future__ import annotations

import contextvars
import io
import json
import logging
import logging.config
import os
import re
import subprocess
import sys
import threading

import pytest
from django.conf import settings
from django.http import HttpResponse
from django.urls import resolve

from crawlplatform import celerylog, logrelay, logs
from tasks import tasks
from tasks.frontier import jobs
from tests.conftest import wait_for
from tests.site import Site
from web.middleware import JobLogMiddleware
from web.models import FrontierURL, JobState


def json_logger(monkeypatch, log_format: str = "json") -> tuple[logging.Logger, io.StringIO]:
    """A logger writing through the formatter and filter of ``logs.config``."""
    monkeypatch.setattr(logs, "_process", {})
    config = logs.config(log_format, "INFO")
    configurator = logging.config.DictConfigurator(config)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(configurator.configure_formatter(config["formatters"][log_format]))
    handler.addFilter(logs.ContextFilter())
    logger = logging.getLogger("tests.logs.json")
    logger.handlers[:] = [handler]
    logger.propagate = False
    return logger, out


def lines(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_huge_message_or_traceback_is_cut_and_a_nan_is_text_so_each_line_stays_json(
    monkeypatch
):
    logger, out = json_logger(monkeypatch)
    logger.warning("huge %s", "y" * 3_000_000, extra={"ratio": float("nan")})
    try:
        raise ValueError("z" * 2_000_000)
    except ValueError:
        logger.exception("failed")
    text = out.getvalue()
    assert "NaN" not in text and all(len(line) < logrelay.MAX_LINE for line in text.splitlines())
    huge, failed = (json.loads(line, parse_constant=pytest.fail) for line in text.splitlines())
    assert (len(huge["message"]), huge["message_chars"]) == (logs.FIELD_MAX_CHARS, 3_000_005)
    assert huge["ratio"] == "nan"
    assert failed["message"] == "failed" and failed["exc_info_chars"] > 2_000_000
    assert failed["exc_info"].startswith("Traceback")


def test_json_lines_carry_the_bound_job_url_and_worker(monkeypatch):
    logger, out = json_logger(monkeypatch)
    logger.info("starting")
    logs.bind_process(worker="w1@host", channel="green", version="1.1.0")
    with logs.about(crawl_job=7, spider=""):
        logger.warning("job line %d", 1)
        with logs.about(url_id=42, url="http://a.test/b"):
            logger.info("url line")
            thread = threading.Thread(target=lambda: logger.info("other thread"))
            thread.start()
            thread.join()
            copied = contextvars.copy_context()
            thread = threading.Thread(target=copied.run, args=(logger.info, "copied"))
            thread.start()
            thread.join()
        logger.info("job again", extra={"url_id": 5})
    first, job, url, other, copy, again = lines(out)
    assert first["message"] == "starting" and first["level"] == "INFO"
    assert list(first)[:7] == ["timestamp", "level", "logger", "message", "process", "pid",
                               "thread"]  # fmt: skip
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["timestamp"])
    assert not set(logs.FIELDS) & set(first)  # nothing bound yet: no empty fields either
    assert job == job | {"crawl_job": 7, "worker": "w1@host", "channel": "green",
                         "version": "1.1.0", "message": "job line 1", "level": "WARNING",
                         "logger": "tests.logs.json"}  # fmt: skip
    assert "url_id" not in job and "spider" not in job  # an empty spider: none
    assert (url["crawl_job"], url["url_id"], url["url"]) == (7, 42, "http://a.test/b")
    assert "crawl_job" not in other and other["worker"] == "w1@host"  # a thread binds its own
    assert (copy["crawl_job"], copy["url_id"]) == (7, 42)  # ... unless run in a copied context
    assert again["url_id"] == 5 and again["crawl_job"] == 7  # extra= wins over the binding


def test_a_field_the_lines_do_not_have_cannot_be_bound():
    with pytest.raises(TypeError, match="job_id"), logs.about(job_id=7):
        pass


def test_an_exception_is_one_json_line_with_its_traceback(monkeypatch):
    logger, out = json_logger(monkeypatch)
    try:
        {}["missing"]
    except KeyError:
        logger.exception("lookup failed")
    (line,) = lines(out)
    assert line["level"] == "ERROR" and line["message"] == "lookup failed"
    assert line["exc_info"].startswith("Traceback") and "KeyError: 'missing'" in line["exc_info"]


def test_text_names_the_job_and_url_only_where_the_message_does_not(monkeypatch):
    logger, out = json_logger(monkeypatch, "text")
    logger.info("plain")
    with logs.about(crawl_job=3, url_id=17, url="http://a.test/x"):
        logger.info("job=3 url=http://a.test/x outcome=ok")
        logger.info("render: refused")
    plain, said, told = out.getvalue().splitlines()
    assert plain.endswith("tests.logs.json plain")
    assert said.endswith("tests.logs.json job=3 url=http://a.test/x outcome=ok")
    assert told.endswith("tests.logs.json job=3 url_id=17 render: refused")


def test_a_job_operation_logs_with_its_job(monkeypatch):
    logger, out = json_logger(monkeypatch)

    @logs.about_job
    def operation(job, note: str) -> str:
        logger.info(note)
        return note

    class Job:
        pk, spider = 12, "shop"

    assert operation(Job(), "starting") == "starting"
    (line,) = lines(out)
    assert (line["crawl_job"], line["spider"]) == (12, "shop")


def test_the_relay_passes_json_lines_and_wraps_each_run_of_other_lines_into_one():
    data = b'{"level": "INFO", "message": "a"}\n -- banner\n[queues]\n\n{"message": "b"}\n{x\n'
    first, banner, second, odd = logrelay.lines(data, "stdout", "worker1").splitlines()
    assert json.loads(first) == {"level": "INFO", "message": "a"}
    assert json.loads(second) == {"message": "b"}
    assert json.loads(banner) | {"timestamp": ""} == {
        "timestamp": "", "level": "INFO", "logger": "stdout", "message": " -- banner\n[queues]",
        "process": "worker1"}  # fmt: skip
    assert json.loads(odd)["message"] == "{x"
    assert logrelay.lines(b"\n\n", "stderr", "p") == b""  # blank lines say nothing


def test_a_long_lines_pieces_are_put_together_whatever_came_between_them(tmp_path):
    line = json.dumps({"timestamp": "2026-01-01T00:00:00.000Z", "message": "x" * 10000})
    first, *others = logrelay.pieces(line.encode())
    other = logrelay.pieces(b'{"other": 1}')[0].replace(b"\x1e", b"\x1e1", 1)  # another pid
    out = (tmp_path / "out").open("wb")
    stream = logrelay.Stream(out.fileno(), "stderr", "p")
    stream.feed(b"progress 1/2\r" + first + other + b"".join(others) + b"after\n")
    stream.close()
    out.close()
    got = (tmp_path / "out").read_bytes().splitlines()
    assert json.loads(got[0])["message"] == "progress 1/2"
    assert {json.loads(g).get("message", "")[:1] for g in got[1:3]} == {"x", ""}
    assert line.encode() in got and json.loads(got[-1])["message"] == "after"


def test_a_log_line_after_text_left_without_its_newline_is_its_own():
    """A progress bar's ``\r`` writes end with no newline: the log line written next is not
    swallowed into them."""
    line = b'{"timestamp": "2026-01-01T00:00:00.000Z", "level": "INFO", "crawl_job": 1}'
    data = b"progress 1/3\rprogress 2/3" + line + b"\nafter"
    bar, logged, after = logrelay.lines(data, "stderr", "p").splitlines()
    assert json.loads(bar)["message"] == "progress 1/3\rprogress 2/3"
    assert logged == line
    assert json.loads(after)["message"] == "after"


def test_the_relay_passes_lines_on_whole_however_they_are_read(tmp_path):
    out = (tmp_path / "out").open("wb")
    stream = logrelay.Stream(out.fileno(), "stderr", "p")
    for chunk in (b'{"a": ', b'1}\nhalf a ', b"line\n", b"no end"):
        stream.feed(chunk)
    stream.close()
    out.close()
    got = [json.loads(line) for line in (tmp_path / "out").read_bytes().splitlines()]
    assert got[0] == {"a": 1}
    assert [g["message"] for g in got[1:]] == ["half a line", "no end"]
    assert got[1]["level"] == "WARNING"


def test_a_tasks_lines_name_the_job_and_url_its_arguments_name():
    assert celerylog.task_fields(tasks.fetch_url, (42, 7), {}) == {"url_id": 42, "crawl_job": 7}
    assert celerylog.task_fields(tasks.fetch_urls, ([1, 2], 7), {}) == {"crawl_job": 7}
    assert celerylog.task_fields(tasks.notify_job, (), {"job_id": 3, "state": "finished",
                                                        "run": 1}) == {"crawl_job": 3}  # fmt: skip
    assert celerylog.task_fields(tasks.maintain, (), {}) == {}
    assert celerylog.task_fields(tasks.fetch_url, ("x",), {}) == {}  # not ids: nothing said


@pytest.mark.django_db
def test_a_request_about_a_job_logs_with_the_job(monkeypatch, rf):
    logger, out = json_logger(monkeypatch)

    def view(request, **kwargs):
        logger.info("in the view")
        return HttpResponse(status=400)

    def handle(request):
        request.resolver_match = resolve(request.path)
        middleware.process_view(request, view, (), request.resolver_match.kwargs)
        return view(request)

    middleware = JobLogMiddleware(handle)
    for path in ("/api/jobs/5/stats/", "/api/jobs/6/pages/", "/dashboard/jobs/7/", "/api/jobs/"):
        response = middleware(rf.get(path))
        logger.warning("Bad Request: %s", path)  # as Django logs it, after the middleware
        response.close()
    logger.info("after")
    assert [line.get("crawl_job") for line in lines(out)] == [5, 5, 6, 6, 7, 7, None, None, None]


@pytest.mark.parametrize("broken", [{"DATABASE_URL": "mysql://u@127.0.0.1/x"},
                                    {"LOG_LEVEL": "LOUD"}], ids=["database", "level"])
def test_settings_that_cannot_be_read_are_one_json_line_under_json(broken):
    env = {**os.environ, "LOG_FORMAT": "json", **broken}
    done = subprocess.run([sys.executable, "manage.py", "scheduler"], env=env, timeout=60,
                          capture_output=True, text=True, cwd=settings.BASE_DIR)
    assert done.returncode != 0
    (line,) = [json.loads(line) for line in done.stderr.splitlines()]
    assert line["level"] == "CRITICAL" and line["exc_info"].startswith("Traceback")


def test_text_is_the_default_format_and_others_are_refused():
    env = {k: v for k, v in os.environ.items() if k != "LOG_FORMAT"}
    code = ("import django; django.setup(); from django.conf import settings; "
            "print(settings.LOGGING['handlers']['console']['formatter'])")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.strip() == "text"
    with pytest.raises(ValueError, match="LOG_FORMAT='xml'"):
        logs.config("xml", "INFO")


def test_a_workers_json_lines_name_the_job_url_worker_channel_and_version(
    worker_env, workers, scheduler, tmp_path
):
    worker_env |= {"LOG_FORMAT": "json", "CRAWL_VERSION": "4.5.6"}
    workers(1, 2)
    with Site(pages=3) as site:
        job = jobs.create_job([site.url("/p/0")], max_depth=5)
        jobs.start(job)

        def finished() -> bool:
            job.refresh_from_db()
            return job.state == JobState.FINISHED

        wait_for(finished, 60, "the crawl to finish", every=0.2)
    missing = FrontierURL.objects.get(job=job, url=site.url("/missing/0"))
    text = (tmp_path / "logs" / "worker1.log").read_text()
    records = [json.loads(line) for line in text.splitlines()]
    (outcome,) = [r for r in records if "outcome=http_4xx" in r["message"]]
    assert outcome["crawl_job"] == job.pk and outcome["url_id"] == missing.pk
    assert outcome["url"] == missing.url and outcome["task_id"]
    assert outcome["worker"].startswith("worker1@")
    assert (outcome["channel"], outcome["version"]) == ("main", "4.5.6")
    assert all(r["worker"] == outcome["worker"] for r in records if "crawl_job" in r)


def test_what_a_command_says_is_a_line_at_info_and_a_warning_at_warning(caplog):
    from django.core.management.base import OutputWrapper

    from web.management.base import Say

    say = Say(OutputWrapper(io.StringIO()), logging.getLogger("tests.say"))
    say.logged = True  # as under LOG_FORMAT=json
    with caplog.at_level(logging.INFO, logger="tests.say"):
        say("job 3 started", crawl_job=3)
        say("warning: --render auto: no page is rendered: no Chromium")
    assert [(r.levelname, r.message) for r in caplog.records] == [
        ("INFO", "job 3 started"),
        ("WARNING", "warning: --render auto: no page is rendered: no Chromium")]
