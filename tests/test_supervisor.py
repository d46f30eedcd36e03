"""Worker supervision: dead workers are replaced, workers that cannot start are reported."""

import pytest

from tasks.worker.supervisor import WorkerPool, WorkerStartupError
from tests.conftest import wait_for


def test_workers_dying_at_start_up_are_reported_not_restarted_forever(tmp_path):
    pool = WorkerPool(1, 1, pool="no-such-pool", log_dir=tmp_path)
    pool.start()

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
