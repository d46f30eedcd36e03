"""The Redis client, its Lua scripts, and what the broker holds: ready messages in every
priority list of a queue, and unacked ones.

Celery's Redis transport keeps one list per priority step (``crawl``, ``crawl\\x06\\x163``,
``crawl\\x06\\x166``, ``crawl\\x06\\x169`` for the steps in ``CELERY_BROKER_TRANSPORT_OPTIONS``)
and every delivered, not yet acknowledged message in the ``unacked`` hash. Counting only the
first list undercounts the backlog; this module is the one place that knows the key names.
"""

from __future__ import annotations

from functools import lru_cache

import redis
from django.conf import settings

PRIORITY_SEP = "\x06\x16"


@lru_cache(maxsize=1)
def client() -> redis.Redis:
    """A Redis client for the configured ``REDIS_URL`` (embedded socket or server)."""
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=10, socket_connect_timeout=5)


@lru_cache(maxsize=64)
def script(source: str):
    """A Lua script registered once per process (run by its SHA; reloaded if Redis lost it)."""
    return client().register_script(source)


def priority_lists(queue: str) -> list[str]:
    steps = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("priority_steps", [0])
    return [f"{queue}{PRIORITY_SEP}{step}" if step else queue for step in steps]


def depth(queue: str | None = None) -> dict[str, int]:
    """``ready`` messages over all priority lists of ``queue`` and ``unacked`` (all queues)."""
    queue = queue or settings.CRAWL_QUEUE
    pipe = client().pipeline(transaction=False)
    for name in priority_lists(queue):
        pipe.llen(name)
    pipe.hlen("unacked")
    *ready, unacked = pipe.execute()
    return {"ready": sum(ready), "unacked": unacked}
