"""A rollout with real processes: scale 3 -> 1 -> 3 with SIGTERM, then replace every worker one
by one (maxSurge 1, maxUnavailable 0), mid-crawl. Every page is stored once and none is
fetched twice: warm shutdowns hand back what they had not started."""

from __future__ import annotations

import signal

import pytest

from tasks.worker.supervisor import WorkerPool
from tests.conftest import wait_for
from tests.site import Site
from tests.test_e2e import assert_exact_result, finished, start_job
from web.models import Page

pytestmark = pytest.mark.django_db(transaction=True)


def surge(pool: WorkerPool) -> str:
    """Start a worker and wait until it consumes, as a Deployment waits for readiness."""
    name = pool.spawn()
    log = pool.log_dir / f"{name}.log"
    wait_for(lambda: log.exists() and " ready." in log.read_text(errors="replace"), 60,
             f"{name} to be ready")  # fmt: skip
    return name


def terminate(pool: WorkerPool, name: str) -> int:
    proc = pool.procs[name]
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=60)
    pool.procs.pop(name)  # once gone: one that does not exit is the pool's to stop still
    pool.started.pop(name, None)
    return code


def test_scale_down_up_and_rolling_update_lose_nothing(workers, scheduler):
    with Site(pages=400, delay=0.5) as site:
        pool = workers(processes=3, concurrency=4)
        job = start_job(site)

        def stored() -> int:
            return Page.objects.filter(job=job).count()

        wait_for(lambda: stored() >= 40, 60, "the crawl to get going")
        old = list(pool.procs)
        assert [terminate(pool, name) for name in old[:2]] == [0, 0]  # HPA: 3 -> 1
        at_one = stored()
        wait_for(lambda: stored() >= at_one + 20, 60, "progress on one worker")
        surge(pool)
        surge(pool)  # back to 3
        for name in list(pool.procs):  # rolling update: a new one ready, then an old one stops
            surge(pool)
            assert terminate(pool, name) == 0
        assert not finished(job), "the site was crawled before the rollout ended: make it slower"
        wait_for(lambda: finished(job), 120, "the crawl to finish after the rollout")
    assert_exact_result(job, site)
    twice = [u for u, n in site.hits.items() if n > 1 and not u.endswith("/error")]
    assert twice == []
