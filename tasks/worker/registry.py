"""The registry of workers: each worker's heartbeat (``tasks/worker/heartbeat.py``) writes a
hash ``crawl:worker:HOSTNAME`` to Redis with its version, channel, queues, slots, the spiders
it has installed, pid, start time, heartbeat and last task; ``/metrics``, the dashboard, the
channel command and the scheduler (which sizes messages by the workers' slots and releases a
spider job only while a worker has its spider) read it here.

Reads ``HEARTBEAT_STALE_S``.
"""

from __future__ import annotations

from tasks.broker import client
from tasks.defaults import setting

PREFIX = "crawl:worker:"


def online(worker: dict, now: float) -> bool:
    """Whether a registered worker counts as online: its heartbeat is fresh, as the liveness
    probe judges it."""
    return now - float(worker["heartbeat"]) < setting("HEARTBEAT_STALE_S")


def workers() -> list[dict[str, str | int | float]]:
    """Workers in the registry, by name: ``name``, ``version``, ``channel``, ``queues``,
    ``slots``, ``spiders`` (comma-separated names), ``pid``, ``started``, ``heartbeat`` and
    ``last_task`` (Unix times; 0: no task yet)."""
    redis = client()
    keys = sorted(redis.scan_iter(match=PREFIX + "*", count=500))
    pipe = redis.pipeline(transaction=False)
    for key in keys:
        pipe.hgetall(key)
    found = []
    for key, fields in zip(keys, pipe.execute() if keys else [], strict=True):
        if not fields:  # expired between the scan and the read
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
