"""The worker registry is read through its index, whatever the size of the keyspace."""

from __future__ import annotations

import time
from types import SimpleNamespace

import redis as redis_py

from tasks.defaults import setting
from tasks.worker import registry


def _fields(channel: str = "main") -> dict:
    now = time.time()
    return {"version": "1", "channel": channel, "queues": "crawl", "slots": 8, "pid": 1,
            "spiders": "", "started": now, "heartbeat": now, "last_task": 0}  # fmt: skip


def _scans(monkeypatch) -> list[str]:
    """The patterns the registry scans the keyspace for, from now on."""
    scanned: list[str] = []
    scan = redis_py.Redis.scan

    def counted(self, cursor=0, match=None, count=None, _type=None, **kwargs):
        scanned.append(match)
        return scan(self, cursor, match, count, _type, **kwargs)

    monkeypatch.setattr(redis_py.Redis, "scan", counted)
    return scanned


def test_registered_workers_are_read_without_walking_a_broad_crawls_keys(redis, monkeypatch):
    pipe = redis.pipeline(transaction=False)
    for n in range(20_000):  # a broad crawl's per-host keys
        pipe.set(f"crawl:host:1:h{n}.test:next", 1)
    pipe.execute()
    registry.write("b@host", _fields(), 60)
    registry.write("a@host", _fields("green"), 60)
    scanned = _scans(monkeypatch)
    found = registry.workers()
    assert [(w["name"], w["channel"], w["slots"]) for w in found] == [
        ("a@host", "green", 8), ("b@host", "main", 8)]  # fmt: skip
    assert scanned == []
    registry.remove("a@host")  # a warm shutdown
    assert [w["name"] for w in registry.workers()] == ["b@host"]
    assert scanned == []


def test_a_worker_whose_hash_is_gone_is_not_listed_and_leaves_the_index_with_its_lifetime(redis):
    registry.write("gone@host", _fields(), 60)
    redis.delete(registry.PREFIX + "gone@host")  # its hash gone; its name still in the index
    registry.write("live@host", _fields(), 60)
    assert [w["name"] for w in registry.workers()] == ["live@host"]
    redis.zadd(registry.INDEX, {"dead@host": time.time() - 61})  # last written 61 s ago
    registry.write("live@host", _fields(), 60)  # the next heartbeat trims it
    assert sorted(redis.zrange(registry.INDEX, 0, -1)) == [b"gone@host", b"live@host"]


def test_workers_of_a_release_before_the_index_are_found_while_none_is_indexed(redis, monkeypatch):
    monkeypatch.setattr(registry, "_scanned", (None, 0.0, []))  # no scan in this process yet
    redis.hset(registry.PREFIX + "old@host", mapping=_fields())
    scanned = _scans(monkeypatch)
    assert [w["name"] for w in registry.workers()] == ["old@host"]
    assert scanned == [registry.PREFIX + "*"]


def test_with_no_worker_indexed_the_keyspace_is_walked_once_a_heartbeat_interval(
    redis, monkeypatch
):
    """All workers gone (a deploy, a crash): the scheduler reads the registry four times a
    second, and each read would walk every key of a broad crawl."""
    monkeypatch.setattr(registry, "_scanned", (None, 0.0, []))
    clock = [1000.0]
    monkeypatch.setattr(
        registry, "time", SimpleNamespace(time=time.time, monotonic=lambda: clock[0])
    )
    scanned = _scans(monkeypatch)
    for _ in range(20):
        assert registry.workers() == []
    assert scanned == [registry.PREFIX + "*"]
    registry.write("new@host", _fields(), 60)  # a worker starts: seen at the next read
    assert [w["name"] for w in registry.workers()] == ["new@host"]
    registry.remove("new@host")
    redis.hset(registry.PREFIX + "old@host", mapping=_fields())  # an earlier release's
    clock[0] += setting("HEARTBEAT_INTERVAL_S") - 0.01
    assert registry.workers() == []  # the last scan is kept for its interval...
    clock[0] += 0.01
    assert [w["name"] for w in registry.workers()] == ["old@host"]  # ... then walked again
    assert scanned == [registry.PREFIX + "*"] * 2
