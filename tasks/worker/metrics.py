"""Prometheus metrics of the crawl engine, counted where the work happens.

Reads ``WORKER_METRICS_PORT``: a worker serves its metrics there (0: not served), with
``crawlplatform_worker_info`` naming its channel and version, so that a query can group its
other series by them. Each
threads-pool worker is one process, so the default registry is exact; the web process's
own metrics (frontier, broker, checkpoints) are computed at scrape time in ``web/metrics.py``.
A crawl job's id is the label ``crawl_job`` here and there: Prometheus keeps ``job`` for the
scrape job, and would rename a ``job`` label of the platform's to ``exported_job``.
"""

from __future__ import annotations

import logging

import psutil
from celery import signals
from prometheus_client import Counter, Gauge, Histogram, start_http_server

from tasks.defaults import setting
from tasks.frontier import channels

log = logging.getLogger(__name__)

PAGES = Counter(
    "crawlplatform_pages",
    "URLs finished by this worker, by job and outcome",
    ["crawl_job", "outcome"],
)
FETCH_SECONDS = Histogram(
    "crawlplatform_fetch_seconds",
    "Time to fetch one URL, redirects included",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
DISPATCH_SECONDS = Histogram(
    "crawlplatform_dispatch_seconds",
    "From a URL's release by the scheduler to its claim by a task (queue wait + delivery)",
    buckets=(0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10),
)
FETCHED_BYTES = Counter("crawlplatform_fetched_bytes", "Body bytes fetched (decoded)")
IN_FLIGHT = Gauge("crawlplatform_fetches_in_flight", "Fetches running in this worker")
RETRIES = Counter("crawlplatform_retries", "URLs sent back to wait, by reason", ["reason"])
WORKER_RSS = Gauge("crawlplatform_worker_rss_bytes", "Resident memory of this worker")
WORKER_RSS.set_function(lambda: psutil.Process().memory_info().rss)
WORKER_INFO = Gauge(
    "crawlplatform_worker_info",
    "1, labelled with this worker's release channel and version (join on instance)",
    ["channel", "version"],
)


def outcome(job_id: int, state: str, reason: str) -> None:
    """Count a URL's end (``done``, or the failure or skip reason), or its going back to wait."""
    if state == "queued":
        RETRIES.labels(reason or "retry").inc()
    else:
        PAGES.labels(str(job_id), "done" if state == "done" else reason or state).inc()


def skipped_at_discovery(job_id: int, reason: str, n: int) -> None:
    """Count links that entered the frontier already ended (robots.txt forbids them)."""
    if n:
        PAGES.labels(str(job_id), reason).inc(n)


@signals.worker_ready.connect
def _serve(**kwargs) -> None:
    port = setting("WORKER_METRICS_PORT")
    if port:
        WORKER_INFO.labels(channels.mine(), channels.version()).set(1)
        start_http_server(port)
        log.info("metrics on :%d/metrics", port)
