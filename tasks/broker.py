"""The Redis client, its Lua scripts, and the broker: what a queue holds and how a message's
priority is written, on either of the two brokers ``CELERY_BROKER_URL`` may name.

Redis (the default): Celery's Redis transport keeps one list per priority step (``crawl``,
``crawl\\x06\\x163``, ``crawl\\x06\\x166``, ``crawl\\x06\\x169`` for the steps in
``CELERY_BROKER_TRANSPORT_OPTIONS``) and every delivered, not yet acknowledged message in the
``unacked`` hash. Counting only the first list undercounts the backlog; this module is the one
place that knows the key names. Priority 0 is served first.

RabbitMQ (``amqp://``): one queue per Celery queue, quorum by default (``CRAWL_AMQP_QUEUE_TYPE``).
The broker counts a queue's ready messages; the unacknowledged ones it reports only through its
management API, so ``depth`` gives ``unacked`` as ``None`` there. A higher priority is served
first: the platform's 0-9 (0 first) is written as 9-0. Classic queues order all ten levels;
quorum queues order two (5 and above ahead of the rest) from RabbitMQ 3.13 and none before.
Redis keeps politeness, robots, sessions and the scheduler's lease on either broker.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import redis
from amqp.exceptions import NotFound
from django.conf import settings
from kombu import Connection
from redis.driver_info import DriverInfo
from redis.exceptions import NoScriptError, ResponseError

log = logging.getLogger(__name__)

PRIORITY_SEP = "\x06\x16"
HIGHEST = 9  # the platform's priorities run 0 (first) to 9


@lru_cache(maxsize=1)
def client() -> redis.Redis:
    """A Redis client for the configured ``REDIS_URL`` (embedded socket or server). Its
    connections name redis-py's version as read once here: left to itself, redis-py reads
    its package metadata again for every connection it opens (1 to 5 ms of CPU each)."""
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=10, socket_connect_timeout=5,
                                driver_info=DriverInfo(lib_version=redis.__version__))  # fmt: skip


class Lua:
    """A Lua script run on the platform's Redis by its SHA-1 (``EVALSHA``), and loaded again
    if Redis lost it (a restart, ``SCRIPT FLUSH``). redis-py's ``Script`` does the same with
    checks a plain client never needs (pipelines, deprecated arguments): about 20 of the 75 µs
    of CPU a call costs, and the slot's script runs once a page."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()

    def __call__(self, keys: Sequence[str] = (), args: Sequence = ()) -> Any:
        redis_client = client()
        try:
            return redis_client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:
            redis_client.script_load(self.source)
            return redis_client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)


@lru_cache(maxsize=64)
def script(source: str) -> Lua:
    """A Lua script, made once per process (run by its SHA; reloaded if Redis lost it)."""
    return Lua(source)


# Lua for the scripts that keep an index: ``index(idx, key, until_ms, now_ms)`` names ``key``
# in ``idx`` until ``until_ms``, drops the names past theirs, and lets ``idx`` expire with its
# last name, so that an index nobody reads stays as small as the state it names.
INDEX_LUA = """
local function index(idx, key, until_ms, now_ms)
  redis.call('ZADD', idx, until_ms, key)
  redis.call('ZREMRANGEBYSCORE', idx, '-inf', now_ms)
  local last = redis.call('ZRANGE', idx, -1, -1, 'WITHSCORES')[2]
  if last then redis.call('PEXPIREAT', idx, last) end
end
"""

_LIVE = """
local t = redis.call('TIME')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(t[1]) * 1000)
return redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
"""


def indexed(index: str, limit: int = 0) -> list[bytes]:
    """The keys an index names (a sorted set of key names scored by when each stops being
    named, in milliseconds of Redis's clock: ``INDEX_LUA``), the latest first, at most
    ``limit`` (0: all). Per-host state that only some hosts have (a throttle, an open circuit,
    a ladder) is found this way, not by a walk over the keyspace, which holds several keys for
    every host of a broad crawl. The writers take a name out when they delete its key; a name
    whose key went otherwise reads as missing until its time."""
    return script(_LIVE)(keys=[index], args=[limit])


def is_amqp() -> bool:
    """Is the broker RabbitMQ (an ``amqp://`` or ``amqps://`` URL)?"""
    return settings.CELERY_BROKER_URL.split("://", 1)[0] in ("amqp", "amqps", "pyamqp")


def message_priority(priority: int) -> int:
    """The broker's priority for the platform's ``priority`` (0 first, 9 last)."""
    return HIGHEST - priority if is_amqp() else priority


def priority_lists(queue: str) -> list[str]:
    steps = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("priority_steps", [0])
    return [f"{queue}{PRIORITY_SEP}{step}" if step else queue for step in steps]


def depth(queue: str | None = None) -> dict[str, int | None]:
    """``ready`` messages of ``queue`` (every priority list) and ``unacked`` (all queues;
    ``None`` on RabbitMQ, which does not say over AMQP)."""
    queue = queue or settings.CRAWL_QUEUE
    if is_amqp():
        return {"ready": _amqp_ready(queue), "unacked": None}
    pipe = client().pipeline(transaction=False)
    for name in priority_lists(queue):
        pipe.llen(name)
    pipe.hlen("unacked")
    *ready, unacked = pipe.execute()
    return {"ready": sum(ready), "unacked": unacked}


def take(queue: str) -> list[bytes]:
    """Remove every ready message of ``queue`` from the broker; their task bodies (JSON).
    A worker takes a message or this does, never both."""
    return _amqp_take(queue) if is_amqp() else _redis_take(queue)


def peek(queue: str) -> list[bytes] | None:
    """The task bodies of ``queue``'s ready messages, left in place; None on RabbitMQ, whose
    queues cannot be read without taking the messages."""
    if is_amqp():
        return None
    pipe = client().pipeline(transaction=False)
    for name in priority_lists(queue):
        pipe.lrange(name, 0, -1)
    return _task_bodies(raw for found in pipe.execute() for raw in found)


def _redis_take(queue: str) -> list[bytes]:
    """Each priority list is renamed first (atomic), then read and deleted."""
    found = []
    for name in priority_lists(queue):
        taken = f"{name}:moving:{os.getpid()}"
        if not client().exists(name):
            continue
        try:
            client().rename(name, taken)
        except ResponseError:  # emptied by workers between the two calls
            continue
        found += _task_bodies(client().lrange(taken, 0, -1))
        client().delete(taken)
    return found


def _task_bodies(raws) -> list[bytes]:
    """The task bodies (JSON) of kombu's Redis envelopes."""
    found = []
    for raw in raws:
        try:
            envelope = json.loads(raw)
            body = envelope["body"]
            if envelope.get("properties", {}).get("body_encoding") == "base64":
                body = base64.b64decode(body)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("a message that is not a Celery task left out: %s", exc)
            continue
        found.append(body if isinstance(body, bytes) else body.encode())
    return found


@contextmanager
def _amqp_channel():
    """A channel on a connection of its own, closed after use. Not pooled: a pooled connection
    outlives a broker restart in a state kombu does not reconnect, and this runs seconds
    apart (the reconcile, a metrics scrape, a rollback)."""
    with Connection(settings.CELERY_BROKER_URL, connect_timeout=10) as conn:
        yield conn.channel()


def _amqp_ready(queue: str) -> int:
    with _amqp_channel() as channel:
        try:
            return channel.queue_declare(queue=queue, passive=True).message_count
        except NotFound:  # no worker or publisher declared it yet
            return 0


def _amqp_take(queue: str) -> list[bytes]:
    """``basic_get`` until the queue is empty, then acknowledge all of it: a crash while
    reading leaves the messages to the broker, which delivers them again. (A crash after the
    acknowledgement leaves their URLs scheduled without a message: the reconcile's case.)"""
    found, last = [], None
    with _amqp_channel() as channel:
        try:
            while (message := channel.basic_get(queue=queue, no_ack=False)) is not None:
                found.append(message.body)
                last = message.delivery_tag
        except NotFound:
            pass
        if last is not None:
            channel.basic_ack(last, multiple=True)
    return [b if isinstance(b, bytes) else b.encode() for b in found]
