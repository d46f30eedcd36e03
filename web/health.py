"""The platform's health checks, each with a status, its latency and a reason.

Reads ``HEALTH_BACKLOG_MAX``, ``HEALTH_MEMORY_GROWTH_MB_PER_MIN``, ``HEALTH_DNS_NAME``,
``HEALTH_POOL_URL`` and ``HEALTH_CANARY_URL`` from the environment (defaults beside each
check). Each check can fail: the process when its open files near their limit, DNS when a
configured name does not resolve (through the crawler's resolver, ``RESOLVE`` included), the
HTTP pool when it cannot connect to its URL, the canary when its URL answers an error or a
block page.

``/livez`` needs none of them; ``/readyz`` and ``/startupz`` use the database, Redis and
migration checks; ``/healthz/details`` runs all nine.
"""

from __future__ import annotations

import os
import resource
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import psutil
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from tasks import broker
from tasks.defaults import setting
from tasks.fetch import bans, fetching, transport
from tasks.rules import guard

_started = time.monotonic()
_rss_samples: list[tuple[float, int]] = []  # (monotonic, rss) of this process, last 10 min
_migrated = False  # once the schema is current it stays current for this process


@dataclass
class Check:
    name: str
    ok: bool
    latency_ms: float
    reason: str


def timed(name: str, probe: Callable[[], str]) -> Check:
    """Run ``probe`` (returns a reason, raises on failure) and time it."""
    started = time.monotonic()
    try:
        reason, ok = probe(), True
    except Exception as exc:  # a check reports its failure; it never raises
        reason, ok = f"{type(exc).__name__}: {exc}"[:300], False
    return Check(name, ok, round((time.monotonic() - started) * 1000, 2), reason)


def _fail(reason: str) -> str:
    raise RuntimeError(reason)


def process() -> str:
    """Fails when the process holds 90% of the file descriptors it may open (a leak of
    sockets or files: the next connection would fail)."""
    fds, (soft, _) = psutil.Process().num_fds(), resource.getrlimit(resource.RLIMIT_NOFILE)
    text = f"pid {os.getpid()}, up {time.monotonic() - _started:.0f} s, {fds} of {soft} files"
    return text if soft == resource.RLIM_INFINITY or fds < 0.9 * soft else _fail(text)


def redis_writable() -> str:
    client = broker.client()
    key, value = f"crawl:health:{socket.gethostname()}", str(time.time())
    client.set(key, value, ex=60)
    return "set and read back" if client.get(key) == value.encode() else _fail("read back differs")


def database_writable() -> str:
    from web.models import HealthProbe

    HealthProbe.objects.update_or_create(name=socket.gethostname(), defaults={"at": timezone.now()})
    return f"{connection.vendor} written"


def migrations_applied() -> str:
    global _migrated
    if not _migrated:
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if plan:
            return _fail(f"{len(plan)} migrations not applied")
        _migrated = True
    return "schema current"


def queue_backlog() -> str:
    depth = broker.depth()
    limit = int(os.environ.get("HEALTH_BACKLOG_MAX", "100000"))
    unacked = depth["unacked"]  # None on RabbitMQ (not counted over AMQP)
    total = depth["ready"] + (unacked or 0)
    flight = "in flight not counted" if unacked is None else f"{unacked} in flight"
    text = f"{depth['ready']} ready, {flight} (limit {limit})"
    return text if total <= limit else _fail(text)


def memory_growth() -> str:
    now, rss = time.monotonic(), psutil.Process().memory_info().rss
    _rss_samples.append((now, rss))
    while _rss_samples and now - _rss_samples[0][0] > 600:
        _rss_samples.pop(0)
    first_t, first_rss = _rss_samples[0]
    minutes = max((now - first_t) / 60, 1.0)
    rate = (rss - first_rss) / 2**20 / minutes
    limit = float(os.environ.get("HEALTH_MEMORY_GROWTH_MB_PER_MIN", "50"))
    text = f"rss {rss / 2**20:.0f} MB, {rate:+.1f} MB/min (limit {limit:g})"
    return text if rate <= limit else _fail(text)


def dns() -> str:
    """Every name of ``HEALTH_DNS_NAME`` (comma-separated) resolves as the crawler resolves."""
    names = [n.strip() for n in os.environ.get("HEALTH_DNS_NAME", "localhost").split(",")]
    resolved, failed = [], []
    for name in filter(None, names):
        try:
            resolved.append(f"{name} -> {transport.resolve(name, 80)[0][4][0]}")
        except OSError as exc:
            failed.append(f"{name}: {exc}")
    return ", ".join(resolved) if not failed else _fail("; ".join(failed))


def http_pool() -> str:
    """The crawler's connection pool connects to ``HEALTH_POOL_URL`` (default: the canary's
    URL) and gets an answer, whatever its status."""
    url = os.environ.get("HEALTH_POOL_URL") or os.environ.get("HEALTH_CANARY_URL", "")
    if not url:
        return "not configured (HEALTH_POOL_URL or HEALTH_CANARY_URL)"
    session = transport.session(guard.allowed())
    with transport.deadline(10):
        answer = session.head(url, timeout=5, allow_redirects=False)
    adapter = session.get_adapter(url)
    return f"{answer.status_code} from {url}; {len(adapter.poolmanager.pools)} host pools open"


def metrics_up() -> str:
    from web.metrics import render

    size = len(render())
    return f"{size} bytes" if size else _fail("empty")


def canary() -> str:
    """``HEALTH_CANARY_URL`` answers 2xx with a page that is not a challenge or a block
    page, to the crawler's user agent: a site that blocks the crawler fails it."""
    url = os.environ.get("HEALTH_CANARY_URL", "")
    if not url:
        return "not configured (HEALTH_CANARY_URL)"
    limits = fetching.FetchLimits(5, 5, 10, 1 << 20, 5)
    resp = fetching.fetch(url, user_agent=setting("USER_AGENT"), limits=limits,
                          allow=guard.allowed())  # fmt: skip
    text = f"{resp.status} in {resp.elapsed * 1000:.0f} ms"
    if not 200 <= resp.status < 300:
        return _fail(text)
    blocked = bans.challenge(None, resp.status, resp.final_url, resp.body)
    return _fail(f"{text}, blocked: {blocked}") if blocked else text


ALL = {
    "process": process,
    "redis_writable": redis_writable,
    "database_writable": database_writable,
    "queue_backlog": queue_backlog,
    "memory_growth": memory_growth,
    "dns": dns,
    "http_pool": http_pool,
    "metrics": metrics_up,
    "canary": canary,
}
READY = {"database": database_writable, "redis": redis_writable, "migrations": migrations_applied}


def run(checks: dict[str, Callable[[], str]]) -> tuple[bool, list[dict]]:
    results = [timed(name, probe) for name, probe in checks.items()]
    return all(c.ok for c in results), [asdict(c) for c in results]
