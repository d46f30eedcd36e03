"""End to end: real worker processes crawl a real local site through the real broker and
database; each test asserts the exact set of pages stored, each exactly once."""

from __future__ import annotations

import os
import re
import urllib.request

import psutil
import pytest

from tasks import broker
from tasks.dispatch import Message, publish
from tasks.frontier import jobs
from tasks.worker.supervisor import WorkerPool
from tests.conftest import wait_for
from tests.site import Site
from web.models import CrawlJob, FrontierURL, JobState, Page, URLState

pytestmark = pytest.mark.django_db(transaction=True)


def start_job(site: Site, **fields) -> CrawlJob:
    job = jobs.create_job([site.url("/p/0")], max_depth=1000, **fields)
    jobs.start(job)
    return job


def finished(job: CrawlJob) -> bool:
    job.refresh_from_db()
    return job.state == JobState.FINISHED


def assert_exact_result(job: CrawlJob, site: Site) -> None:
    done = set(
        FrontierURL.objects.filter(job=job, state=URLState.DONE).values_list("url", flat=True)
    )
    failed = set(
        FrontierURL.objects.filter(job=job, state=URLState.FAILED).values_list("url", flat=True)
    )
    assert done == site.expected_done()
    assert failed == site.expected_failed()
    stored = list(Page.objects.filter(job=job).values_list("url__url", flat=True))
    assert len(stored) == len(set(stored)) == len(done)
    assert set(stored) == done
    assert not FrontierURL.objects.filter(
        job=job, state__in=["queued", "scheduled", "leased"]
    ).exists()
    assert not [u for u in site.hits if "external.invalid" in u or "mailto" in u]


@pytest.mark.skipif(
    os.environ.get("DATABASE_URL", "").split(":")[0] not in ("postgres", "postgresql"),
    reason="connection pools are for PostgreSQL",
)
def test_pooled_workers_share_a_few_connections_among_many_threads(worker_env, workers, scheduler):
    worker_env["DB_POOL_MAX_SIZE"] = "2"
    pool = workers(processes=2, concurrency=8)
    most = 0

    def connections_per_worker() -> int:
        counts = [0]
        for proc in pool.procs.values():
            try:
                conns = psutil.Process(proc.pid).net_connections(kind="tcp")
            except psutil.Error:
                continue
            counts.append(sum(1 for c in conns if c.raddr and c.raddr.port == 5432))
        return max(counts)

    with Site(pages=120, delay=0.05) as slow_site:
        job = start_job(slow_site)

        def done_watching() -> bool:
            nonlocal most
            most = max(most, connections_per_worker())
            return finished(job)

        wait_for(done_watching, 120, "the crawl to finish", every=0.05)
        assert_exact_result(job, slow_site)
    assert 1 <= most <= 2  # eight threads each, sixteen fetches at once, two connections


def test_crawl_stores_every_reachable_page_exactly_once(site, workers, scheduler):
    workers(processes=2, concurrency=4)
    job = start_job(site)
    wait_for(lambda: finished(job), 90, "the crawl to finish")
    assert_exact_result(job, site)
    # Each page fetched once at the server; /error was retried up to RETRY_MAX_ATTEMPTS.
    for url in site.expected_done() | site.expected_failed() - {site.url("/error")}:
        assert site.hits[url] == 1, url
    assert site.hits[site.url("/error")] == 3
    error = FrontierURL.objects.get(job=job, url=site.url("/error"))
    assert (error.error_reason, error.http_status, error.attempts) == ("http_5xx", 500, 3)
    missing = FrontierURL.objects.get(job=job, url=site.url("/missing/0"))
    assert (missing.error_reason, missing.http_status, missing.attempts) == ("http_4xx", 404, 1)
    page = Page.objects.get(job=job, url__url=site.url("/p/7"))
    assert page.title == "Page 7" and page.status == 200 and page.content_type == "text/html"


def test_redelivered_task_for_done_url_fetches_nothing(site, workers, scheduler):
    workers(processes=1, concurrency=2)
    job = start_job(site)
    wait_for(lambda: finished(job), 90, "the crawl to finish")
    before = sum(site.hits.values())
    done = list(
        FrontierURL.objects.filter(job=job, state=URLState.DONE).values_list(
            "id", "job_id", "depth"
        )
    )
    # every URL delivered a second time, in messages of one and of several URLs
    messages = [Message([url_id], job_id, depth, "crawl") for url_id, job_id, depth in done[:5]]
    messages += [Message([r[0] for r in done[i : i + 4]], job.pk, 0, "crawl")
                 for i in range(5, len(done), 4)]  # fmt: skip
    publish(messages)
    wait_for(lambda: broker.depth() == {"ready": 0, "unacked": 0}, 30, "the redeliveries to drain")
    assert sum(site.hits.values()) == before
    assert Page.objects.filter(job=job).count() == len(done)


def test_worker_metrics_count_what_was_stored(site, worker_env, scheduler):
    port = 9100 + (os.getpid() % 800)
    pool = WorkerPool(1, 4, env={**worker_env, "CRAWL_WORKER_METRICS_PORT": str(port)})
    pool.start()
    try:
        job = start_job(site)
        wait_for(lambda: finished(job), 90, "the crawl to finish")
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        pool.stop(grace=15)

    def value(name: str, **labels: str) -> float:
        pattern = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + r"} (\S+)"
        return float(re.search(pattern, text).group(1))

    assert value("crawlplatform_pages_total", crawl_job=str(job.pk), outcome="done") == (
        Page.objects.filter(job=job).count()
    )
    assert value("crawlplatform_pages_total", crawl_job=str(job.pk), outcome="http_4xx") == len(
        [u for u in site.expected_failed() if "/missing/" in u]
    )
    assert value("crawlplatform_retries_total", reason="http_5xx") == 2
    assert "crawlplatform_fetch_seconds_bucket" in text and "crawlplatform_worker_rss_bytes" in text
