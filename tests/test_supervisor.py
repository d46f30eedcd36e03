"""Worker supervision: dead workers are replaced, workers that cannot start are reported."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.worker.supervisor import WorkerPool, WorkerStartupError
from tests.conftest import wait_for


@pytest.mark.parametrize("fork", [False, True])
def test_workers_dying_at_start_up_are_reported_not_restarted_forever(tmp_path, fork):
    """Started or forked from this process (as the crawl command's are): reported alike."""
    pool = WorkerPool(1, 1, pool="no-such-pool", log_dir=tmp_path, fork=fork)
    pool.start()
    assert pool.forks == (1 if fork else 0)

    def restarted_until_it_gives_up() -> bool:
        try:
            pool.replace_dead()
        except WorkerStartupError as exc:
            assert "worker" in str(exc) and str(tmp_path) in str(exc)
            return True
        return False

    try:
        wait_for(restarted_until_it_gives_up, 60, "the pool to give up", every=0.2)
    finally:
        pool.stop(grace=5)
    assert pool.restarts == 2


@pytest.mark.django_db(transaction=True)
def test_a_dead_worker_is_replaced(worker_env):
    pool = WorkerPool(1, 1, env=worker_env)
    pool.start()
    try:
        first = next(iter(pool.procs.values()))
        wait_for(lambda: first.poll() is None, 10, "the worker to run")
        first.kill()
        first.wait()
        assert len(pool.replace_dead()) == 1
        assert len(pool.procs) == 1 and pool.restarts == 1
    finally:
        pool.stop(grace=15)


def test_workers_and_the_scheduler_start_without_the_web_side():
    """Start-up CPU is paid by every worker process: what a crawl task needs is imported, and
    neither the admin, the API nor the job-spec schemas (loaded by the URL configuration of
    the processes that serve pages)."""
    code = (
        "import sys, django; django.setup(); import crawlplatform.celery, tasks.tasks; "
        "from tasks.frontier import scheduler; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('web.', 'jsonschema')))))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "crawlplatform.settings"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parent.parent)  # fmt: skip
    loaded = set(out.stdout.split())
    assert "web.models" in loaded  # the check sees what was imported
    assert not loaded & {"web.admin", "web.api", "web.specs", "web.dashboard", "jsonschema"}
