"""The registry of workers: each worker's heartbeat (``tasks/worker/heartbeat.py``) writes a
hash ``crawl:worker:HOSTNAME`` to Redis with its version, channel, queues, slots, the spiders
it has installed, pid, start time, heartbeat and last task; ``/metrics``, the dashboard, the
channel command and the scheduler (which sizes messages by the workers' slots and releases a
spider job only while a worker has its spider) read it here.

A sorted set, ``crawl:workers``, names the registered workers (scored by their last heartbeat),
so that reading the registry costs two round trips whatever the size of the keyspace: a scan
for ``crawl:worker:*`` walks every key, and a broad crawl keeps several keys for each of its
hosts. Only while the set names no registered worker (none started, or only workers of a
version from before the set) is the keyspace scanned for their hashes, at most once a
heartbeat interval in a process: those workers write no more often, and a platform whose
workers are all gone (a deploy, a crash) is read as often as ever at the cost of two round
trips, not of a walk over every key.

Reads ``HEARTBEAT_STALE_S`` and ``HEARTBEAT_INTERVAL_S``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from tasks.broker import client
from tasks.defaults import setting

PREFIX = "crawl:worker:"
INDEX = "crawl:workers"
_scanned: tuple = (None, 0.0, [])  # the last scan: its client, when (monotonic), the workers


def write(name: str, fields: Mapping[str, str | int | float], ttl: int) -> None:
    """Register worker ``name`` (or refresh it): its hash, which expires ``ttl`` seconds after
    its last write, and its place in the index, whose names not written for as long go."""
    now = time.time()
    pipe = client().pipeline(transaction=False)
    pipe.hset(PREFIX + name, mapping=dict(fields))
    pipe.expire(PREFIX + name, ttl)
    pipe.zadd(INDEX, {name: now})
    pipe.zremrangebyscore(INDEX, "-inf", now - ttl)
    pipe.expire(INDEX, ttl)
    pipe.execute()


def remove(name: str) -> None:
    """Take worker ``name`` out of the registry (it stops consuming)."""
    pipe = client().pipeline(transaction=False)
    pipe.delete(PREFIX + name)
    pipe.zrem(INDEX, name)
    pipe.execute()


def online(worker: dict, now: float) -> bool:
    """Whether a registered worker counts as online: its heartbeat is fresh, as the liveness
    probe judges it."""
    return now - float(worker["heartbeat"]) < setting("HEARTBEAT_STALE_S")


def workers() -> list[dict[str, str | int | float]]:
    """Workers in the registry, by name: ``name``, ``version``, ``channel``, ``queues``,
    ``slots``, ``spiders`` (comma-separated names), ``pid``, ``started``, ``heartbeat`` and
    ``last_task`` (Unix times; 0: no task yet)."""
    global _scanned
    redis = client()
    found = _read([PREFIX.encode() + name for name in redis.zrange(INDEX, 0, -1)])
    if found:
        return found
    now = time.monotonic()
    last, when, unindexed = _scanned
    if last is not redis or now - when >= setting("HEARTBEAT_INTERVAL_S"):
        unindexed = _read(redis.scan_iter(match=PREFIX + "*", count=500))
        _scanned = (redis, now, unindexed)
    return list(unindexed)


def _read(keys: Iterable[bytes]) -> list[dict[str, str | int | float]]:
    keys = sorted(keys)
    if not keys:
        return []
    pipe = client().pipeline(transaction=False)
    for key in keys:
        pipe.hgetall(key)
    found = []
    for key, fields in zip(keys, pipe.execute(), strict=True):
        if not fields:  # expired, or removed, since it was listed
            continue
        text = {k.decode(): v.decode() for k, v in fields.items()}
        found.append({
            "name": key.decode()[len(PREFIX) :],
            "version": text.get("version", ""),
            "channel": text.get("channel", ""),
            "queues": text.get("queues", ""),
            "spiders": text.get("spiders", ""),
            "slots": int(text.get("slots") or 0),
            "pid": int(text.get("pid") or 0),
            **{f: float(text.get(f) or 0) for f in ("started", "heartbeat", "last_task")},
        })  # fmt: skip
    return found
