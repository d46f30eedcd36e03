"""Log lines say what they are about: LOG_FORMAT=json writes one JSON object a line with the
job, URL, worker, channel and version wherever a line has them; text stays the default."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import os
import subprocess
import sys
import threading

import pytest

from crawlplatform import logs
from tasks.frontier import jobs
from tests.conftest import wait_for
from tests.site import Site
from web.models import FrontierURL, JobState


def json_logger(monkeypatch) -> tuple[logging.Logger, io.StringIO]:
    """A logger writing through the json formatter and filter of ``logs.config``."""
    monkeypatch.setattr(logs, "_process", {})
    config = logs.config("json", "INFO")
    configurator = logging.config.DictConfigurator(config)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(configurator.configure_formatter(config["formatters"]["json"]))
    handler.addFilter(logs.ContextFilter())
    logger = logging.getLogger("tests.logs.json")
    logger.handlers[:] = [handler]
    logger.propagate = False
    return logger, out


def lines(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_json_lines_carry_the_bound_job_url_and_worker(monkeypatch):
    logger, out = json_logger(monkeypatch)
    logger.info("starting")
    logs.bind_process(worker="w1@host", channel="green", version="1.1.0")
    with logs.about(job_id=7):
        logger.warning("job line %d", 1)
        with logs.about(url_id=42):
            logger.info("url line")
            thread = threading.Thread(target=lambda: logger.info("other thread"))
            thread.start()
            thread.join()
        logger.info("job again", extra={"url_id": 5})
    first, job, url, other, again = lines(out)
    assert first["message"] == "starting" and first["level"] == "INFO"
    assert not set(logs.FIELDS) & set(first)  # nothing bound yet: no empty fields either
    assert job == job | {"job_id": 7, "worker": "w1@host", "channel": "green",
                         "version": "1.1.0", "message": "job line 1", "level": "WARNING",
                         "logger": "tests.logs.json"}  # fmt: skip
    assert "url_id" not in job
    assert (url["job_id"], url["url_id"]) == (7, 42)
    assert "job_id" not in other and other["worker"] == "w1@host"  # a thread binds its own
    assert again["url_id"] == 5 and again["job_id"] == 7  # extra= wins over the binding


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
    records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    (outcome,) = [r for r in records if "outcome=http_4xx" in r["message"]]
    assert outcome["job_id"] == job.pk and outcome["url_id"] == missing.pk
    assert outcome["worker"].startswith("worker1@")
    assert (outcome["channel"], outcome["version"]) == ("main", "4.5.6")
    assert all(r["worker"] == outcome["worker"] for r in records if "job_id" in r)
