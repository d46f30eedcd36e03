"""Probes, health details and metrics, against the real database and Redis."""

from __future__ import annotations

import socket
import subprocess
import time
from types import SimpleNamespace

import pytest
import redis as redis_py
from django.conf import settings
from django.db import connection

from tasks import broker
from tasks.fetch import circuit, ladder, politeness
from tasks.frontier import jobs, leadership, transitions
from tasks.worker import registry
from tests.conftest import wait_for
from web import health, metrics
from web.models import FrontierURL

pytestmark = pytest.mark.django_db


def test_livez_answers_even_for_a_host_django_would_refuse(client):
    response = client.get("/livez", HTTP_HOST="10.1.2.3:8000")
    assert response.status_code == 200 and response.content == b"ok"
    assert client.get("/admin/", HTTP_HOST="10.1.2.3:8000").status_code == 400


def test_readyz_and_startupz(client, redis):
    ready = client.get("/readyz", HTTP_HOST="10.1.2.3")
    assert ready.status_code == 200, ready.json()
    assert ready.json()["checks"] == {"database": True, "redis": True, "migrations": True}
    assert client.get("/startupz").status_code == 200


def test_readyz_fails_while_redis_is_down_and_recovers(client, redis, monkeypatch, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--dir", str(tmp_path)]  # fmt: skip
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{port}/0")
    broker.client.cache_clear()
    try:
        wait_for(lambda: client.get("/readyz").status_code == 200, 10, "ready with Redis up")
        server.kill()
        server.wait()
        down = client.get("/readyz")
        assert down.status_code == 503
        failed = [name for name, ok in down.json()["checks"].items() if not ok]
        assert failed == ["redis"]
        server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        wait_for(lambda: client.get("/readyz").status_code == 200, 10, "ready again")
    finally:
        server.kill()
        server.wait()
        broker.client.cache_clear()


def test_health_details_need_staff_or_token(client, admin_client, redis, monkeypatch):
    assert client.get("/healthz/details").status_code == 403
    monkeypatch.setenv("HEALTH_TOKEN", "s3cret")
    assert client.get("/healthz/details", HTTP_AUTHORIZATION="Bearer nope").status_code == 403
    response = client.get("/healthz/details", HTTP_AUTHORIZATION="Bearer s3cret")
    body = response.json()
    assert response.status_code == 200, body
    assert [c["name"] for c in body["checks"]] == list(health.ALL)
    assert all(c["ok"] and c["reason"] and c["latency_ms"] >= 0 for c in body["checks"])
    assert admin_client.get("/healthz/details").status_code == 200


def test_backlog_above_its_threshold_fails_the_check(redis, monkeypatch):
    monkeypatch.setenv("HEALTH_BACKLOG_MAX", "2")
    redis.lpush("crawl", "a", "b", "c")
    check = health.timed("queue_backlog", health.queue_backlog)
    assert not check.ok and "3 ready" in check.reason


def test_metrics_show_frontier_broker_and_checkpoints(client, redis):
    job = jobs.create_job(["http://127.0.0.1:9/"])
    jobs.start(job)
    redis.lpush("crawl\x06\x163", "x")
    text = client.get("/metrics").content.decode()
    assert f'crawlplatform_frontier_urls{{crawl_job="{job.pk}",state="queued"}} 1.0' in text
    assert 'crawlplatform_broker_messages{state="ready"} 1.0' in text
    assert f'crawlplatform_checkpoint_age_seconds{{crawl_job="{job.pk}"}}' in text
    assert 'crawlplatform_jobs{state="running"} 1.0' in text
    assert "crawlplatform_frontier_due_urls 1.0" in text  # the seed: due, not yet released


def test_metrics_show_throttled_hosts_and_open_circuits(client, redis, monkeypatch):
    monkeypatch.setenv("CRAWL_CIRCUIT_MIN_SPAN_S", "0")
    for _ in range(3):
        slot = politeness.acquire(7, "slow.test", 0, 0)
        politeness.finish(7, "slow.test", slot, signal=politeness.OVERLOAD)
        circuit.record(7, "dead.test:8080", failed=True, reason="connection refused")
    text = client.get("/metrics").content.decode()
    line = next(ln for ln in text.splitlines() if ln.startswith("crawlplatform_host_throttle"))
    assert 'crawl_job="7",host="slow.test"' in line and 0.45 < float(line.split()[-1]) <= 0.5
    assert 'crawlplatform_host_circuit_open{crawl_job="7",host="dead.test:8080"} 1.0' in text


def test_host_gauges_read_their_indexes_not_the_keyspace_and_hosts_leave_them(
    client, redis, monkeypatch
):
    """A broad crawl keeps several keys a host: the throttle, circuit and ladder gauges (and
    the admin's ladder levels) read the few hosts in such a state from their indexes."""
    monkeypatch.setenv("CRAWL_CIRCUIT_MIN_SPAN_S", "0")
    pipe = redis.pipeline(transaction=False)
    for n in range(20_000):
        pipe.set(f"crawl:host:7:h{n}.test:next", 1)
    pipe.execute()
    walks: list[str] = []
    scan = redis_py.Redis.scan

    def counted(self, cursor=0, match=None, count=None, _type=None, **kwargs):
        if match and not match.startswith(registry.PREFIX):  # no worker: the registry's own
            walks.append(match)
        return scan(self, cursor, match, count, _type, **kwargs)

    monkeypatch.setattr(redis_py.Redis, "scan", counted)
    job = SimpleNamespace(pk=7, settings={})
    for _ in range(3):
        slot = politeness.acquire(7, "slow.test", 0, 0)
        politeness.finish(7, "slow.test", slot, signal=politeness.OVERLOAD)
        circuit.record(7, "dead.test:8080", failed=True, reason="connection refused")
        ladder.signal(job, "banned.test", banned=True)
    circuit.record(7, "flaky.test", failed=True, reason="connection refused")  # not open
    text = client.get("/metrics").content.decode()
    assert 'crawlplatform_host_throttle_delay_seconds{crawl_job="7",host="slow.test"}' in text
    assert 'crawlplatform_host_circuit_open{crawl_job="7",host="dead.test:8080"} 1.0' in text
    assert 'crawlplatform_host_ladder_level{crawl_job="7",host="banned.test"} 1.0' in text
    assert "flaky.test" not in text
    assert ladder.levels(7) == {"banned.test": 1}
    assert walks == []
    circuit.record(7, "dead.test:8080", failed=False)  # it answered: closed
    ladder.reset(7, "banned.test")
    now_s, _ = redis.time()
    redis.zadd(politeness.THROTTLED, {"crawl:host:7:gone.test:delay": now_s * 1000 - 1000})
    assert sorted(redis.zrange(politeness.THROTTLED, 0, -1)) == [
        b"crawl:host:7:gone.test:delay", b"crawl:host:7:slow.test:delay"]  # fmt: skip
    text = client.get("/metrics").content.decode()
    assert "dead.test" not in text and "banned.test" not in text and "slow.test" in text
    assert redis.zrange(politeness.THROTTLED, 0, -1) == [b"crawl:host:7:slow.test:delay"]
    assert redis.zcard(circuit.OPENED) == redis.zcard(ladder.LADDERS) == 0
    assert walks == []


def test_the_gauges_name_the_latest_hosts_first_and_an_open_circuit_until_its_cooldown_ends(
    client, redis, monkeypatch
):
    monkeypatch.setenv("CRAWL_METRICS_THROTTLE_HOSTS_MAX", "1")
    monkeypatch.setenv("CRAWL_CIRCUIT_MIN_SPAN_S", "0")
    politeness.slow_down(7, "earlier.test", 2.0)
    time.sleep(0.01)
    politeness.slow_down(7, "later.test", 2.0)
    text = client.get("/metrics").content.decode()
    assert "later.test" in text and "earlier.test" not in text
    for _ in range(3):
        circuit.record(7, "dead.test", failed=True, reason="connection refused")
    key = circuit.key(7, "dead.test")
    assert redis.zscore(circuit.OPENED, key) == int(redis.hget(key, "open_until"))
    redis.delete(circuit.OPENED)
    monkeypatch.setenv("CRAWL_CIRCUIT_COOLDOWN_S", "0")  # open no time at all: never named
    for _ in range(3):
        circuit.record(7, "gone.test", failed=True, reason="connection refused")
    assert redis.zscore(circuit.OPENED, circuit.key(7, "gone.test")) is None


def test_a_throttle_that_decays_and_a_ladder_a_page_ends_leave_their_indexes(redis, monkeypatch):
    """The scripts' own deletes: an adaptive delay decayed below 10 ms at the next answer, a
    run of refusals ended by a page let in at level 0."""
    monkeypatch.setenv("CRAWL_THROTTLE_HALF_LIFE_S", "0.1")  # the key lasts 1.2 s
    politeness.slow_down(7, "slow.test", 0.02)
    ladder.signal(SimpleNamespace(pk=7, settings={}), "banned.test", banned=True)
    assert redis.zcard(politeness.THROTTLED) == redis.zcard(ladder.LADDERS) == 1
    time.sleep(0.2)  # 20 ms halved twice
    slot = politeness.acquire(7, "slow.test", 0, 0)
    politeness.finish(7, "slow.test", slot, signal=politeness.OK)
    ladder.signal(SimpleNamespace(pk=7, settings={}), "banned.test", banned=False)
    assert redis.zcard(politeness.THROTTLED) == redis.zcard(ladder.LADDERS) == 0


def test_an_index_nobody_reads_drops_its_lapsed_names_and_expires_with_its_last(redis):
    now_s, _ = redis.time()
    redis.zadd(politeness.THROTTLED, {"crawl:host:7:gone.test:delay": now_s * 1000 - 1000})
    politeness.slow_down(7, "slow.test", 2.0)  # a write, and no read
    assert redis.zrange(politeness.THROTTLED, 0, -1) == [b"crawl:host:7:slow.test:delay"]
    ((_, until),) = redis.zrange(politeness.THROTTLED, 0, -1, withscores=True)
    assert redis.pexpiretime(politeness.THROTTLED) == until  # and the delay's key about then
    assert abs(redis.pexpiretime("crawl:host:7:slow.test:delay") - until) <= 2


def test_metrics_show_online_workers_by_channel_and_version_and_the_scheduler(client, redis):
    now = time.time()
    for name, channel, version, beat in [("a", "main", "1.0", now), ("b", "main", "1.0", now),
                                         ("c", "green", "1.1", now), ("d", "main", "0.9", 0)]:
        registry.write(name, {"channel": channel, "version": version, "heartbeat": beat}, 60)
    text = client.get("/metrics").content.decode()
    assert 'crawlplatform_workers{channel="main",version="1.0"} 2.0' in text
    assert 'crawlplatform_workers{channel="green",version="1.1"} 1.0' in text
    assert 'version="0.9"' not in text  # its heartbeat is stale: not online
    assert "crawlplatform_scheduler_leader 0.0" in text
    assert "crawlplatform_scheduler_passes_total 0.0" in text
    leadership.renew("sched-1")
    for _ in range(3):
        leadership.count_pass()
    text = client.get("/metrics").content.decode()
    assert "crawlplatform_scheduler_leader 1.0" in text
    assert "crawlplatform_scheduler_passes_total 3.0" in text


@pytest.mark.django_db
def test_due_backlog_counts_due_urls_and_hosts_of_paced_jobs():
    fast = jobs.create_job(["http://127.0.0.1:9/"])
    paced = jobs.create_job(["http://127.0.0.1:8/"], delay=1.0)
    urls = [f"http://127.0.0.1:{port}/{i}" for port in (7, 9) for i in range(5)]
    for job in (fast, paced):
        jobs.start(job)
        transitions.insert_urls(job.pk, urls, 1)
    FrontierURL.objects.filter(url__endswith="/4").update(not_before="2999-01-01T00:00:00Z")
    # fast: its seed + 8 due URLs; paced: one slot for each of its 3 hosts with due URLs
    assert metrics.due_backlog() == 9 + 3
    jobs.pause(fast)
    assert metrics.due_backlog() == 3


def test_memory_growth_check_reports_rate(monkeypatch):
    monkeypatch.setenv("HEALTH_MEMORY_GROWTH_MB_PER_MIN", "10")
    health._rss_samples.clear()
    health._rss_samples.append((time.monotonic() - 60, 0))  # a minute ago, nothing
    check = health.timed("memory_growth", health.memory_growth)
    assert not check.ok and "MB/min" in check.reason  # from 0 bytes: a huge growth
    health._rss_samples.clear()
    assert health.timed("memory_growth", health.memory_growth).ok


@pytest.mark.django_db(transaction=True)
def test_readyz_fails_while_the_database_is_unreachable_and_recovers(client, redis, tmp_path):
    saved = dict(connection.settings_dict)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]  # nothing listens there once the socket closes
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = str(tmp_path / "missing" / "db.sqlite3")
    else:
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(closed_port))
    try:
        down = client.get("/readyz")
        assert down.status_code == 503
        assert down.json()["checks"]["database"] is False
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    assert client.get("/readyz").status_code == 200


def test_the_root_leads_to_the_dashboard_and_the_api_root_lists_the_api(client):
    home = client.get("/")
    assert home.status_code == 302 and home["Location"] == "/dashboard/"
    root = client.get("/api/")
    assert root.status_code == 200
    assert set(root.json()) == {"jobs", "schema", "docs"}
    assert root.json()["jobs"].endswith("/api/jobs/")
