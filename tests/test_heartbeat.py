"""The worker heartbeat is written by the worker's own loop and goes stale when it is stuck."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from django.conf import settings

from tasks.worker import registry
from tasks.worker.supervisor import WorkerPool
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def probe(kind: str, env: dict) -> int:
    return subprocess.run([sys.executable, "-m", "tasks.worker.heartbeat", kind],
                          cwd=settings.BASE_DIR, env=env).returncode  # fmt: skip


def test_heartbeat_goes_stale_when_the_loop_is_stuck_and_fresh_again(worker_env, tmp_path,
                                                                    client, redis):  # fmt: skip
    env = {**os.environ, **worker_env,
           "CRAWL_HEARTBEAT_FILE": str(tmp_path / "heartbeat"),
           "CRAWL_READY_FILE": str(tmp_path / "ready"),
           "CRAWL_HEARTBEAT_INTERVAL_S": "0.5", "CRAWL_HEARTBEAT_STALE_S": "2"}  # fmt: skip
    pool = WorkerPool(1, 2, env=env, log_dir=tmp_path)
    pool.start()
    worker = next(iter(pool.procs.values()))
    try:
        wait_for(lambda: probe("ready", env) == 0, 30, "the ready marker")
        assert probe("live", env) == 0
        wait_for(lambda: redis.zcard(registry.INDEX) == 1, 10, "the worker in the registry's index")
        assert [w["name"] for w in registry.workers()] == [
            name.decode() for name in redis.zrange(registry.INDEX, 0, -1)]  # fmt: skip
        assert (
            "crawlplatform_worker_heartbeat_age_seconds{worker="
            in client.get("/metrics").content.decode()
        )
        os.kill(worker.pid, signal.SIGSTOP)  # the event loop stops turning
        wait_for(lambda: probe("live", env) == 1, 10, "the heartbeat to go stale")
        os.kill(worker.pid, signal.SIGCONT)
        wait_for(lambda: probe("live", env) == 0, 10, "a fresh heartbeat")
    finally:
        os.kill(worker.pid, signal.SIGCONT)
        pool.stop(grace=15)
    assert probe("ready", env) == 1  # removed at shutdown
    assert redis.zcard(registry.INDEX) == 0 and registry.workers() == []  # it left the registry
