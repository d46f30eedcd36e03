"""A worker's /livez and /readyz: each check fails when its cause is there, and passes again
when it is gone; a real worker serves them, and a leaking one exits warm."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest
import requests
from django.conf import settings
from django.db import connection

from tasks import broker
from tasks.defaults import setting
from tasks.worker import probes
from tasks.worker.supervisor import WorkerPool
from tests.chaos import free_port
from tests.conftest import wait_for
from tests.test_manifests import by_kind

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def served(redis, tmp_path, monkeypatch) -> Iterator[tuple[str, list[int], os.PathLike]]:
    """Probes of a worker consuming ``crawl``, served on a free port in this process; the
    list counts the warm shutdowns they asked for."""
    beat = tmp_path / "heartbeat"
    beat.touch()
    monkeypatch.setenv("CRAWL_HEARTBEAT_FILE", str(beat))
    leaks: list[int] = []
    port = free_port()
    server = probes.serve(probes.Probes(["crawl"], on_leak=lambda: leaks.append(1)), port)
    yield f"http://127.0.0.1:{port}", leaks, beat
    server.shutdown()
    server.server_close()


def answer(url: str) -> tuple[int, dict[str, bool]]:
    response = requests.get(url, timeout=10)
    return response.status_code, response.json()["checks"]


def test_live_and_ready_pass_on_a_healthy_worker(served):
    url, leaks, _ = served
    assert answer(url + "/livez") == (200, {"loop": True, "memory_growth": True})
    assert answer(url + "/readyz") == (200, {"redis": True, "database": True, "backlog": True})
    assert requests.get(url + "/other", timeout=10).status_code == 404
    assert leaks == []


def test_liveness_fails_while_the_loop_is_stuck(served):
    url, _, beat = served
    stale = time.time() - setting("HEARTBEAT_STALE_S") - 5
    os.utime(beat, (stale, stale))  # the loop has not touched it since
    assert answer(url + "/livez") == (503, {"loop": False, "memory_growth": True})
    beat.touch()
    assert answer(url + "/livez")[0] == 200


def test_liveness_fails_on_memory_growth_and_asks_for_a_warm_shutdown(served, monkeypatch):
    url, leaks, _ = served
    monkeypatch.setenv("CRAWL_WORKER_MEMORY_GROWTH_MB_PER_MIN", "-1")  # any rate is above it
    assert answer(url + "/livez") == (503, {"loop": True, "memory_growth": False})
    assert leaks == [1]
    monkeypatch.setenv("CRAWL_WORKER_MEMORY_GROWTH_MB_PER_MIN", "100")
    assert answer(url + "/livez")[0] == 200


def test_memory_trend_is_megabytes_a_minute_over_ten_minutes_at_least_one():
    trend = probes.MemoryTrend()
    assert trend.rate(now=0, rss=100 << 20) == 0
    assert trend.rate(now=30, rss=150 << 20) == 50  # half a minute counts as one
    assert trend.rate(now=120, rss=300 << 20) == 100  # 200 MB in 2 minutes
    assert trend.rate(now=720, rss=300 << 20) == 0  # the first samples left the window


def test_readiness_fails_while_redis_is_unreachable(served, monkeypatch):
    url, _, _ = served
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{closed}/0")
    broker.client.cache_clear()
    try:
        status, checks = answer(url + "/readyz")
        assert status == 503 and checks["redis"] is False and checks["database"] is True
    finally:
        monkeypatch.undo()
        broker.client.cache_clear()
    assert answer(url + "/readyz")[0] == 200


def test_readiness_fails_while_the_database_is_unreachable(served, tmp_path):
    url, _, _ = served
    saved = dict(connection.settings_dict)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = str(tmp_path / "missing" / "db.sqlite3")
    else:
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(closed))
    try:
        status, checks = answer(url + "/readyz")
        assert status == 503 and checks == {"redis": True, "database": False, "backlog": True}
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    assert answer(url + "/readyz")[0] == 200


def test_readiness_fails_while_its_queue_is_over_the_backlog_limit(served, redis, monkeypatch):
    url, _, _ = served
    monkeypatch.setenv("CRAWL_WORKER_BACKLOG_MAX", "2")
    redis.lpush("crawl", "a", "b")
    redis.lpush("crawl\x06\x166", "c")  # every priority list counts
    assert answer(url + "/readyz") == (503, {"redis": True, "database": True, "backlog": False})
    redis.delete("crawl")
    assert answer(url + "/readyz")[0] == 200


def test_a_worker_serves_its_probes_and_exits_warm_when_its_memory_grows(worker_env, tmp_path):
    port = free_port()
    env = {**worker_env, "CRAWL_WORKER_PROBE_PORT": str(port),
           "CRAWL_HEARTBEAT_FILE": str(tmp_path / "heartbeat"),
           "CRAWL_READY_FILE": str(tmp_path / "ready"),
           "CRAWL_WORKER_MEMORY_GROWTH_MB_PER_MIN": "-1"}  # fmt: skip
    pool = WorkerPool(1, 2, env=env, log_dir=tmp_path)
    pool.start()
    worker = next(iter(pool.procs.values()))
    try:
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return requests.get(url + "/readyz", timeout=5).status_code == 200
            except requests.ConnectionError:
                return False

        wait_for(ready, 60, "the worker's /readyz")
        assert answer(url + "/livez") == (503, {"loop": True, "memory_growth": False})
        wait_for(lambda: worker.poll() is not None, 60, "the worker to exit")
        assert worker.returncode == 0  # a warm shutdown
        assert "warm shutdown" in (tmp_path / "worker1.log").read_text()
    finally:
        pool.stop(grace=15)


def test_worker_deployments_probe_the_workers_own_endpoints():
    for name in ("worker", "worker-green", "render"):
        container = by_kind("Deployment", name)["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        port = next(p for p in container["ports"] if p["name"] == "probes")
        assert str(port["containerPort"]) == env["CRAWL_WORKER_PROBE_PORT"], name
        for probe, path in (("startupProbe", "/livez"), ("livenessProbe", "/livez"),
                            ("readinessProbe", "/readyz")):  # fmt: skip
            assert container[probe]["httpGet"] == {"path": path, "port": "probes"}, name
