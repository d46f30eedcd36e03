"""``LOG_FORMAT=json`` as an operator's log pipeline meets it: every line every process writes
(the crawl command, its workers, the scheduler, gunicorn, Celery's programs) is one JSON
object, and each line written for a job names it (``crawl_job``), and its URL where there is
one. Real processes throughout; what they write is captured whole and parsed line by line."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from django.conf import settings

from tasks.rules.urls import canonicalize
from tests.conftest import ended, wait_for
from tests.site import Site
from web.models import CrawlJob, FrontierURL

pytestmark = pytest.mark.django_db(transaction=True)

JOB_SAID = re.compile(r"\bjob[= ](\d+)\b")  # "job=3 ..." or "job 3 started"
SITE_URL = re.compile(r"\burl=(http://127\.0\.0\.1:\d+/\S*)")  # the engine's "url=..."


def records(text: str, where: str) -> list[dict]:
    """Every line of ``text`` as a JSON object; the test fails on the first one that is not."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        assert isinstance(record, dict), f"{where} line {n} is no JSON object: {line[:300]!r}"
        found.append({**record, "_where": where})
    return found


def json_env(worker_env: dict, data: Path) -> dict:
    """The subprocesses' environment: JSON logs, their own data directory (worker logs)."""
    return {**worker_env, "LOG_FORMAT": "json", "CRAWL_DATA_DIR": str(data),
            "CRAWL_SPIDER_MODULES": "tests.logged_spider"}  # fmt: skip


def manage(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=settings.BASE_DIR, env=env,
                          capture_output=True, text=True, timeout=240)  # fmt: skip


@pytest.fixture
def started() -> Iterator[Callable[..., subprocess.Popen]]:
    """``started(env, out, *argv)``: a long-running process, its standard output and error in
    ``out``.out and .err. One still running when the test ends (it failed first) is stopped."""
    processes: list[subprocess.Popen] = []

    def start(env: dict, out: Path, *argv: str) -> subprocess.Popen:
        env = {**env, "PYTHONFAULTHANDLER": "1"}  # a SIGABRT writes every thread's stack
        process = subprocess.Popen(argv, cwd=settings.BASE_DIR, env=env, stdin=subprocess.DEVNULL,
                                   stdout=out.with_suffix(".out").open("w"),
                                   stderr=out.with_suffix(".err").open("w"))  # fmt: skip
        processes.append(process)
        return process

    yield start
    for process in processes:
        ended(process, 30)


def stopped(process: subprocess.Popen, out: Path) -> list[dict]:
    """Stop ``process`` (SIGTERM) and parse all it wrote, once its relay has passed it on. One
    that does not stop within a minute fails the test with its threads' stacks."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)  # its faulthandler writes the stacks (started)
        ended(process, 30)
        time.sleep(0.5)
        stacks = out.with_suffix(".err").read_text()[-8000:]
        raise AssertionError(f"{out.name} still ran a minute after SIGTERM:\n{stacks}") from None
    time.sleep(0.5)  # the relay writes the last lines after its writer is gone
    return [r for suffix in (".out", ".err")
            for r in records(out.with_suffix(suffix).read_text(), out.name + suffix)]  # fmt: skip


def test_every_line_of_a_crawl_its_workers_a_spider_and_the_scheduler_is_json_naming_its_job(
    worker_env, tmp_path, started
):
    env = json_env(worker_env, tmp_path / "data")
    scheduler = started(env, tmp_path / "scheduler", sys.executable, "manage.py", "scheduler")
    wait_for(lambda: "leads" in (tmp_path / "scheduler.err").read_text(), 60,
             "the scheduler to lead")  # fmt: skip
    with Site(pages=12) as site:
        plain = manage(env, "crawl", site.url("/p/0"), "--name", "plain", "--workers", "2",
                       "--concurrency", "4")  # fmt: skip
        spider = manage(env, "crawl", "--spider", "logged", "-a", f"seed={site.url('/p/0')}",
                        "-a", "fails=/p/1", "--workers", "1")  # fmt: skip
    lines = stopped(scheduler, tmp_path / "scheduler")
    assert plain.returncode == 0 and spider.returncode == 0, (plain.stderr, spider.stderr)
    assert plain.stdout == spider.stdout == ""  # what the command says is log lines
    for name, done in (("plain", plain), ("spider", spider)):
        lines += records(done.stderr, f"crawl {name}")
    logs = sorted((tmp_path / "data" / "logs").glob("*/*.log"))
    assert len(logs) == 3  # two workers of the first crawl, one of the second
    for log in logs:
        lines += records(log.read_text(), str(log.relative_to(tmp_path)))
    job = CrawlJob.objects.get(name="plain")
    spider_job = CrawlJob.objects.get(spider="logged")
    urls = dict(FrontierURL.objects.values_list("pk", "url"))
    url_jobs = dict(FrontierURL.objects.values_list("pk", "job_id"))

    for line in lines:
        said = JOB_SAID.search(line["message"])
        if said:  # a line that names a job in its words carries it as a field
            assert line.get("crawl_job") == int(said.group(1)), line
        for said_url in SITE_URL.findall(line["message"]):  # a line about a URL names it
            assert line.get("url") == canonicalize(said_url), line
        if "url" in line:  # a URL's lines name it, its id and its job, consistently
            assert urls[line["url_id"]] == line["url"], line
            assert url_jobs[line["url_id"]] == line["crawl_job"], line
        if line["logger"].startswith("tasks.") and "task_id" in line:  # the engine, in a task
            assert line.get("crawl_job") in (job.pk, spider_job.pk), line
        if re.search(r"Task tasks\.fetch_urls?\[", line["message"]):  # received, succeeded
            assert line.get("crawl_job") in (job.pk, spider_job.pk) and "task_id" in line, line

    (missing,) = [r for r in lines if "outcome=http_4xx" in r["message"]
                  and r["crawl_job"] == job.pk]  # fmt: skip
    assert missing["url"] == site.url("/missing/0") and missing["logger"] == "tasks.engine"
    assert missing["task_id"] and missing["worker"].startswith("worker")
    failed = [r for r in lines if "outcome=http_5xx" in r["message"]]
    assert failed and all(r["url"] == site.url("/error") for r in failed), failed
    # the spider's own lines, from its callback thread, carry its job, spider and page
    parsed = [r for r in lines if r["logger"] == "logged"]
    assert parsed and all(r["thread"] == "spider-callbacks" for r in parsed)
    assert all((r["crawl_job"], r["spider"]) == (spider_job.pk, "logged") for r in parsed)
    assert all(canonicalize(r["message"].removeprefix("parsing ")) == r["url"] for r in parsed)
    printed = [r for r in lines if r["message"].startswith("printed on ")]
    assert printed and all(r["logger"] == "celery.redirected" for r in printed)
    assert all(canonicalize(r["message"].removeprefix("printed on ")) == r["url"]
               and r["crawl_job"] == spider_job.pk for r in printed)  # fmt: skip
    # "every error of job N": the spider's failure is there, with its traceback
    errors = [r for r in lines if r["level"] == "ERROR" and r.get("crawl_job") == spider_job.pk]
    assert any("a spider's own error" in r.get("exc_info", "") for r in errors), errors
    # the scheduler process released both jobs and saw them end
    from_scheduler = {r.get("crawl_job") for r in lines if r["_where"].startswith("scheduler")}
    assert {job.pk, spider_job.pk} <= from_scheduler
    # the command's progress and summary are lines with their figures
    (summary,) = [r for r in lines if r["_where"] == "crawl plain" and r.get("state")]
    assert (summary["crawl_job"], summary["state"]) == (job.pk, "finished")
    assert summary["done"] == job.pages.count()
    # Celery's banner is one line of the worker's log
    banners = [r for r in lines if r["logger"] == "stdout" and "[queues]" in r["message"]]
    assert len(banners) == 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gunicorn_writes_its_access_and_error_lines_as_json(worker_env, tmp_path, started):
    port = free_port()
    env = {**json_env(worker_env, tmp_path / "data"), "GUNICORN_BIND": f"127.0.0.1:{port}",
           "GUNICORN_WORKERS": "1", "SECRET_KEY": "k" * 30 + "-Xy7!q" * 6}  # fmt: skip
    gunicorn = started(env, tmp_path / "gunicorn", sys.executable, "-m", "gunicorn", "-c",
                       "crawlplatform/gunicorn_config.py", "crawlplatform.wsgi")  # fmt: skip

    def answers() -> bool:
        try:
            return requests.get(f"http://127.0.0.1:{port}/livez?from=test", timeout=2).ok
        except requests.ConnectionError:
            return False

    wait_for(answers, 60, "gunicorn to answer")
    requests.get(f"http://127.0.0.1:{port}/api/jobs/12345/urls/", timeout=10)
    lines = stopped(gunicorn, tmp_path / "gunicorn")
    access = [r for r in lines if r["logger"] == "gunicorn.access"]
    assert access and access[0] == access[0] | {
        "level": "INFO", "method": "GET", "path": "/livez", "query": "from=test", "status": 200,
        "remote": "127.0.0.1"}  # fmt: skip
    assert '"GET /livez?from=test HTTP/1.1" 200' in access[0]["message"]
    assert "duration_ms" in access[0]
    (about,) = [r for r in access if r["path"] == "/api/jobs/12345/urls/"]
    assert about["crawl_job"] == 12345  # written once the request is over: by its path
    assert any(r["logger"] == "gunicorn.error" and "Booting worker" in r["message"] for r in lines)


def celery_program(
    started: Callable[..., subprocess.Popen], worker_env: dict, tmp_path: Path, *argv: str
) -> subprocess.Popen:
    env = json_env(worker_env, tmp_path / "data")
    return started(env, tmp_path / argv[0], sys.executable, "-m", "celery", "-A", "crawlplatform",
                   *argv)  # fmt: skip


def test_a_celery_workers_banner_and_lines_are_json(worker_env, tmp_path, started):
    worker = celery_program(started, worker_env, tmp_path, "worker", "--pool", "threads",
                            "--concurrency", "1", "--loglevel", "INFO", "--without-mingle",
                            "--without-gossip")  # fmt: skip
    wait_for(lambda: " ready." in (tmp_path / "worker.err").read_text(), 90, "the worker")
    lines = stopped(worker, tmp_path / "worker")
    (banner,) = [r for r in lines if "[queues]" in r["message"]]
    assert (banner["logger"], banner["level"]) == ("stdout", "INFO")
    assert "[tasks]" in banner["message"] and "tasks.fetch_urls" in banner["message"]
    assert any(r["logger"] == "stdout" and "Warm shutdown" in r["message"] for r in lines)
    (ready,) = [r for r in lines if r["message"].endswith(" ready.")]
    assert ready["logger"] == "celery.apps.worker" and ready["worker"]


def test_beats_banner_and_lines_are_json(worker_env, tmp_path, started):
    beat = celery_program(started, worker_env, tmp_path, "beat", "--loglevel", "INFO")
    wait_for(lambda: "Sending due task" in (tmp_path / "beat.err").read_text(), 90, "beat")
    lines = stopped(beat, tmp_path / "beat")
    printed = [r for r in lines if r["logger"] == "stdout"]  # one write or two (buffered)
    assert printed[0]["message"].startswith("celery beat v") and len(printed) <= 2
    assert "Configuration ->\n" in printed[-1]["message"]
    assert "crawlplatform.beat.Scheduler" in printed[-1]["message"]
    assert any(r["logger"] == "celery.beat" for r in lines)


def test_flower_starts_with_json_lines(worker_env, tmp_path, started):
    port = free_port()
    flower = celery_program(started, worker_env, tmp_path, "flower", f"--port={port}",
                            "--address=127.0.0.1")  # fmt: skip
    wait_for(lambda: "Visit me at" in (tmp_path / "flower.err").read_text(), 90, "flower")
    lines = stopped(flower, tmp_path / "flower")
    assert any(r["logger"] == "flower.command" and f":{port}" in r["message"] for r in lines)


# A program whose SIGTERM handler logs, then exits (as Flower's does), logging on and on.
LOGS_ON_SIGTERM = """
import logging, os, signal, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")
import django
django.setup()
log = logging.getLogger("banner")
def stop(signum, frame):
    log.info("%s detected, shutting down", signum)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    log.info("a banner line\\n%s", "x" * 200)
"""


def test_a_signal_handler_that_logs_during_a_blocked_log_write_still_exits(worker_env, tmp_path):
    # Its standard error is a pipe nobody reads yet (a relay that lags): the program blocks in
    # a write of a log line, holding the stream's buffer, and SIGTERM's handler logs there.
    program = tmp_path / "logs_on_sigterm.py"
    program.write_text(LOGS_ON_SIGTERM)
    env = {**json_env(worker_env, tmp_path), "PYTHONPATH": str(settings.BASE_DIR)}
    env.pop("PYTHONUNBUFFERED", None)  # standard error buffered, as a service runs by default
    process = subprocess.Popen([sys.executable, str(program)], cwd=settings.BASE_DIR, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    wchan = Path(f"/proc/{process.pid}/wchan")
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(process.stderr.read()))
    try:
        wait_for(lambda: "pipe_write" in wchan.read_text(), 60, "the program to block writing")
        process.send_signal(signal.SIGTERM)
        reader.start()  # until the program and its relay are gone
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        if reader.is_alive():  # not started if the program never blocked
            reader.join(timeout=60)
    err = read[0].decode()
    assert "reentrant call" not in err
    said = [r["message"] for r in records(err, "stderr") if r["logger"] == "banner"]
    assert f"{int(signal.SIGTERM)} detected, shutting down" in said[-2:]  # before the line
    # it interrupted, which is written after it


CRASHES = """
import os, threading, warnings
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")
import django
django.setup()
warnings.warn("a warning of the code")
thread = threading.Thread(target=lambda: 1 / 0, name="doomed")
thread.start()
thread.join()
if os.fork() == 0:
    os.write(2, b"a C library's complaint\\nover two lines\\n")
    raise LookupError("in the forked child")
os.wait()
raise KeyError("in the main thread")
"""


def crashes(env: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    """``CRASHES`` run as a program of its own."""
    program = tmp_path / "crashes.py"
    program.write_text(CRASHES)
    return subprocess.run([sys.executable, str(program)], cwd=settings.BASE_DIR,
                          env={**env, "PYTHONPATH": str(settings.BASE_DIR)}, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_warnings_uncaught_exceptions_and_raw_writes_are_one_json_object_each(
    worker_env, tmp_path
):
    done = crashes(json_env(worker_env, tmp_path), tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    lines = records(done.stderr, "stderr")
    by_message = {r["message"].splitlines()[0]: r for r in lines}
    warned = next(r for m, r in by_message.items() if "UserWarning: a warning of the code" in m)
    assert warned["logger"] == "py.warnings" and warned["level"] == "WARNING"
    thread = by_message["uncaught ZeroDivisionError in thread doomed: division by zero"]
    assert thread["thread"] == "doomed" and "1 / 0" in thread["exc_info"]
    child = by_message["uncaught LookupError: in the forked child"]
    main = by_message["uncaught KeyError: 'in the main thread'"]
    assert child["pid"] != main["pid"] and main["level"] == "CRITICAL"
    assert 'raise KeyError("in the main thread")' in main["exc_info"]
    raw = by_message["a C library's complaint"]
    assert (raw["logger"], raw["message"]) == ("stderr", "a C library's complaint\nover two lines")
    assert len(lines) == 5


FORKED_LONG_LINES = """
import logging, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")
import django
django.setup()
children = []
for n in range(4):  # a prefork pool's children: one pipe to the relay between them
    pid = os.fork()
    if pid == 0:
        for i in range(25):
            logging.getLogger("long").warning("%d.%d %s", n, i, chr(97 + n) * (2500 * (i + 1)))
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
"""


def test_long_lines_of_processes_sharing_the_relays_pipe_stay_whole(worker_env, tmp_path):
    program = tmp_path / "forked.py"
    program.write_text(FORKED_LONG_LINES)
    done = subprocess.run([sys.executable, str(program)], cwd=settings.BASE_DIR,
                          env={**json_env(worker_env, tmp_path), "PYTHONPATH":
                               str(settings.BASE_DIR)}, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = records(done.stderr, "stderr")
    assert len(lines) == 100 and {r["logger"] for r in lines} == {"long"}
    for line in lines:
        n, i = map(int, line["message"].split(" ", 1)[0].split("."))
        assert line["message"].split(" ", 1)[1] == chr(97 + n) * (2500 * (i + 1))


def test_text_logs_stay_as_they_were_for_a_person(worker_env, tmp_path):
    env = {k: v for k, v in json_env(worker_env, tmp_path).items() if k != "LOG_FORMAT"}
    done = crashes(env, tmp_path)
    assert "Traceback (most recent call last)" in done.stderr and "{" not in done.stderr
    assert "a C library's complaint\nover two lines\n" in done.stderr
