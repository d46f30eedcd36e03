"""Crashes and shutdowns mid-crawl, with real worker processes: nothing lost, nothing stored
twice.

* SIGKILL with the lease sweep switched off: only acks-late redelivery can bring the killed
  worker's pages back (its messages return after the visibility timeout and the claim takes
  the expired lease). Without acks-late the messages are gone and the crawl never finishes.
* SIGKILL and the broker loses the in-flight messages too: only the lease sweep can bring
  those URLs back. Without it they stay leased forever.
* SIGTERM: a warm shutdown finishes in-flight pages and exits 0; new workers complete the
  crawl and no page is fetched twice. On prefork workers too, a message's URLs not started
  go back to the frontier at once rather than at the end of the message's time budget.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.db.models import QuerySet

from tasks.frontier import requeue
from tasks.worker.supervisor import WorkerPool
from tests.conftest import wait_for
from tests.site import Site
from tests.test_e2e import assert_exact_result, finished, start_job
from web.models import FrontierURL, Page, URLState

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def slow_site():
    with Site(pages=200, delay=0.15) as s:
        yield s


def pages_done(job) -> int:
    return Page.objects.filter(job=job).count()


def leased(job) -> int:
    return FrontierURL.objects.filter(job=job, state=URLState.LEASED).count()


def refetched(site: Site) -> list[str]:
    return [u for u, n in site.hits.items() if n > 1 and not u.endswith("/error")]


def stop_warm(pool: WorkerPool, job) -> QuerySet:
    """SIGTERM every worker of ``pool`` mid-crawl: they exit 0 holding no lease. Returns the
    URLs that were in flight, each ended or back in the frontier (a message's URLs not
    started are given back, and the scheduler, still running, may release them again)."""
    in_flight = set(
        FrontierURL.objects.filter(job=job, state=URLState.LEASED).values_list("id", flat=True)
    )
    codes = pool.stop(grace=30)
    assert set(codes.values()) == {0}
    assert leased(job) == 0  # every page in flight at SIGTERM was finished, not dropped
    rows = FrontierURL.objects.filter(id__in=in_flight)
    states = set(rows.values_list("state", flat=True))
    assert states <= {URLState.DONE, URLState.FAILED, URLState.QUEUED, URLState.SCHEDULED}
    return rows


def finishes_exactly(job, site: Site) -> None:
    wait_for(lambda: finished(job), 120, "the crawl to finish after the restart")
    assert_exact_result(job, site)
    assert refetched(site) == []


def test_sigkill_mid_crawl_completes_through_redelivery(slow_site, workers, scheduler, monkeypatch):
    # No lease sweep: the killed worker's leased URLs come back only by acks-late redelivery.
    # Reconcile stays on: it re-publishes SCHEDULED URLs only, whose message the victim may
    # have popped from Redis in the instant before kombu recorded it as unacked.
    monkeypatch.setattr(requeue, "reclaim_expired", lambda: 0)
    pool = workers(processes=2, concurrency=4)
    job = start_job(slow_site)
    wait_for(lambda: pages_done(job) >= 40 and leased(job) >= 2, 60, "pages in flight")
    victim = next(iter(pool.procs))
    os.killpg(pool.procs[victim].pid, signal.SIGKILL)
    pool.procs[victim].wait()
    pool.procs.pop(victim)
    pool.spawn()  # the replacement, as a Deployment would start one
    wait_for(lambda: finished(job), 120, "the crawl to finish after the kill")
    assert_exact_result(job, slow_site)
    # Only the killed worker's in-flight pages can have been fetched twice.
    assert len(refetched(slow_site)) <= 4
    assert max(slow_site.hits[u] for u in slow_site.expected_done()) <= 2


def test_sigkill_with_lost_messages_completes_through_lease_sweep(
    slow_site, workers, scheduler, redis
):
    pool = workers(processes=1, concurrency=4)  # one worker: every lease is the victim's
    job = start_job(slow_site)
    wait_for(lambda: pages_done(job) >= 40 and leased(job) >= 2, 60, "pages in flight")
    in_flight = set(
        FrontierURL.objects.filter(job=job, state=URLState.LEASED).values_list("id", flat=True)
    )
    victim = next(iter(pool.procs))
    os.killpg(pool.procs[victim].pid, signal.SIGKILL)
    pool.procs.pop(victim).wait()
    pool.started.pop(victim, None)
    redis.delete("unacked", "unacked_index")  # the broker lost every in-flight message
    pool.spawn()
    wait_for(lambda: finished(job), 120, "the crawl to finish after the sweep")
    assert_exact_result(job, slow_site)
    attempts = FrontierURL.objects.filter(id__in=in_flight).values_list("attempts", flat=True)
    assert max(attempts) >= 2  # the victim's leases expired and were granted again


def test_sigterm_finishes_in_flight_pages_and_exits_zero(slow_site, workers, scheduler):
    pool = workers(processes=2, concurrency=4)
    job = start_job(slow_site)
    wait_for(lambda: pages_done(job) >= 40 and leased(job) >= 2, 60, "pages in flight")
    stop_warm(pool, job)
    assert not finished(job)
    assert job.checkpoints.filter(reason="worker_shutdown").exists()
    workers(processes=2, concurrency=4)
    finishes_exactly(job, slow_site)


def test_the_workers_of_a_finished_job_write_no_checkpoint_of_their_own_as_they_stop(
    workers, scheduler
):
    # The job's end wrote its last checkpoint, and nothing was in flight after it: the workers
    # that fetched its pages add none as they stop (a running job's get one: the test above).
    pool = workers(processes=2, concurrency=4)
    with Site(pages=30) as site:
        job = start_job(site)
        wait_for(lambda: finished(job), 60, "the crawl to finish")
    assert set(pool.stop(grace=30).values()) == {0}
    assert list(job.checkpoints.values_list("reason", flat=True)) == ["finish"]


def test_sigterm_on_prefork_workers_gives_back_what_their_messages_did_not_start(
    slow_site, workers, worker_env, scheduler, monkeypatch
):
    monkeypatch.setenv("CRAWL_DISPATCH_BATCH_S", "3")  # messages of up to 16 pages of 0.15 s
    worker_env.update(  # only the shutdown may cut a message short (the limits still nest)
        CRAWL_BATCH_BUDGET_S="30",
        CRAWL_TASK_SOFT_TIME_LIMIT_S="40",
        CRAWL_TASK_TIME_LIMIT_S="45",
        CRAWL_VISIBILITY_TIMEOUT_S="60",
    )
    pool = workers(processes=1, concurrency=2, pool="prefork")
    job = start_job(slow_site)
    # two messages in flight holding six URLs or more: seconds of work not started yet
    wait_for(lambda: pages_done(job) >= 20 and leased(job) >= 6, 60, "messages of several URLs")
    in_flight = stop_warm(pool, job)
    given_back = in_flight.filter(state__in=[URLState.QUEUED, URLState.SCHEDULED], attempts=0)
    assert given_back.exists()  # not started: back in the frontier, the attempt refunded
    assert job.checkpoints.filter(reason="worker_shutdown").exists()  # by the pool's children
    workers(processes=1, concurrency=4)
    finishes_exactly(job, slow_site)


def test_worker_above_its_memory_ceiling_restarts_itself_warm(worker_env, scheduler):
    env = {**worker_env, "CRAWL_WORKER_MAX_RSS_MB": "1", "CRAWL_MEMORY_CHECK_EVERY": "5"}
    pool = WorkerPool(1, 2, env=env)
    pool.start()
    with Site(pages=40) as site:  # a restart every five pages: a small site will do
        try:
            first = next(iter(pool.procs.values()))
            job = start_job(site)
            assert first.wait(timeout=60) == 0  # a warm shutdown, between tasks
            replaced = 0
            while not finished(job) and replaced < 200:
                replaced += len(pool.replace_dead())
                time.sleep(0.2)
            wait_for(lambda: finished(job), 120, "the crawl to finish across restarts")
        finally:
            pool.stop(grace=15)
        assert pool.restarts >= 1
        assert_exact_result(job, site)
