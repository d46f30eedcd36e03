"""A worker's own probe endpoints, beside its metrics port: ``/livez`` and ``/readyz``.

Reads ``WORKER_PROBE_PORT`` (0: not served), ``HEARTBEAT_FILE``, ``HEARTBEAT_STALE_S``,
``WORKER_MEMORY_GROWTH_MB_PER_MIN`` and ``WORKER_BACKLOG_MAX``.

``/livez`` fails when the worker's event loop is stuck (its heartbeat file is older than
``HEARTBEAT_STALE_S``) or its resident memory grows faster than
``WORKER_MEMORY_GROWTH_MB_PER_MIN`` (over the samples of the last ten minutes, one taken at
each probe); on memory growth the worker also asks itself for a warm shutdown, as above
``WORKER_MAX_RSS_MB``, so that the restart loses nothing. ``/readyz`` fails when the worker
cannot write to Redis or reach the database, or when the ready and in-flight messages of the
queues it consumes are more than ``WORKER_BACKLOG_MAX``. Each answers 200 or 503 with
``{"status": "pass"|"fail", "checks": {name: true|false}}``: which check failed, never the
error's text (it is logged).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
from celery import signals
from django.db import connection

from tasks import broker
from tasks.defaults import setting
from tasks.worker import heartbeat

log = logging.getLogger(__name__)
WINDOW_S = 600  # memory growth is measured over this much history, seconds


class MemoryTrend:
    """The growth rate of this process's resident memory, in MB a minute, from the samples
    of the last ``WINDOW_S`` (a minute at least, so that one early jump is not a trend)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []  # (monotonic time, rss bytes)
        self._lock = threading.Lock()

    def rate(self, now: float | None = None, rss: int | None = None) -> float:
        now = time.monotonic() if now is None else now
        rss = psutil.Process().memory_info().rss if rss is None else rss
        with self._lock:
            self.samples.append((now, rss))
            while now - self.samples[0][0] > WINDOW_S:
                self.samples.pop(0)
            first_t, first_rss = self.samples[0]
        return (rss - first_rss) / 2**20 / max((now - first_t) / 60, 1.0)


def warm_shutdown() -> None:
    """Ask this worker for a warm shutdown (SIGTERM to itself): in-flight pages finish."""
    os.kill(os.getpid(), signal.SIGTERM)


class Probes:
    """The checks of one worker: ``queues`` are the queues it consumes; ``on_leak`` is what
    a failed memory check does besides failing (a warm shutdown)."""

    def __init__(self, queues: list[str], on_leak: Callable[[], None] = warm_shutdown) -> None:
        self.queues = queues
        self.memory = MemoryTrend()
        self.on_leak = on_leak
        self.key = f"crawl:probe:{socket.gethostname()}:{os.getpid()}"

    def loop(self) -> bool:
        return heartbeat.probe("live") == 0

    def memory_growth(self) -> bool:
        rate, limit = self.memory.rate(), setting("WORKER_MEMORY_GROWTH_MB_PER_MIN")
        if rate <= limit:
            return True
        log.warning("worker memory grows %.1f MB/min (limit %g): warm shutdown", rate, limit)
        self.on_leak()
        return False

    def redis_writable(self) -> bool:
        client, value = broker.client(), str(time.time())
        client.set(self.key, value, ex=60)
        return client.get(self.key) == value.encode()

    def database(self) -> bool:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                return cursor.fetchone() == (1,)
        finally:
            connection.close()  # each probe runs in its own thread: keep no connection

    def backlog(self) -> bool:
        total = 0
        for queue in self.queues:
            depth = broker.depth(queue)
            total += depth["ready"] + (depth["unacked"] or 0)
        return total <= setting("WORKER_BACKLOG_MAX")

    def run(self, path: str) -> dict[str, bool] | None:
        """The results of ``path``'s checks (None: no such probe)."""
        checks = {
            "/livez": {"loop": self.loop, "memory_growth": self.memory_growth},
            "/readyz": {"redis": self.redis_writable, "database": self.database,
                        "backlog": self.backlog},
        }.get(path)  # fmt: skip
        return None if checks is None else {name: _passes(name, c) for name, c in checks.items()}


def _passes(name: str, check: Callable[[], bool]) -> bool:
    try:
        return bool(check())
    except Exception as exc:  # a probe reports a failure; it never raises
        log.warning("probe %s failed: %s: %s", name, type(exc).__name__, str(exc)[:300])
        return False


def serve(probes: Probes, port: int) -> ThreadingHTTPServer:
    """Answer ``/livez`` and ``/readyz`` on ``port`` (all interfaces: the kubelet calls the
    pod's IP) from a daemon thread; returns the server (``shutdown()`` stops it)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            results = probes.run(self.path.split("?", 1)[0])
            if results is None:
                self.send_error(404)
                return
            ok = all(results.values())
            body = json.dumps({"status": "pass" if ok else "fail", "checks": results}).encode()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("", port), Handler)  # noqa: S104 (probes come by pod IP)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="probes", daemon=True).start()
    return server


@signals.worker_ready.connect
def _serve(sender=None, **kwargs) -> None:
    port = setting("WORKER_PROBE_PORT")
    if port:
        queues = sorted(q.name for q in sender.task_consumer.queues)
        serve(Probes(queues), port)
        log.info("probes on :%d/livez and /readyz", port)
