"""Worker heartbeat and readiness, for cheap exec probes and for "is anyone consuming?".

Reads ``HEARTBEAT_FILE``, ``READY_FILE``, ``HEARTBEAT_INTERVAL_S`` and ``HEARTBEAT_STALE_S``.

A consumer bootstep runs on the worker's own event loop (its timer): every
``HEARTBEAT_INTERVAL_S`` it touches ``HEARTBEAT_FILE`` and writes the worker's heartbeat and
the time of its last task to Redis (``crawl:worker:HOSTNAME``, expiring). If the loop is stuck,
the file goes stale and the liveness probe fails; the web's ``/metrics`` shows each worker's
heartbeat and last-task ages, so a worker that stops consuming while work waits is visible.
``READY_FILE`` exists from ``worker_ready`` until shutdown.

Probes (no ``celery inspect ping``): ``python -m tasks.worker.heartbeat live`` and ``... ready``;
``python -m tasks.worker.heartbeat live FILE`` checks another heartbeat file (the scheduler's).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from celery import bootsteps, signals

from tasks.defaults import setting

log = logging.getLogger(__name__)
_last_task = 0.0


def _touch(path: str) -> None:
    Path(path).touch()


class Heartbeat(bootsteps.StartStopStep):
    """Consumer step: the heartbeat is written by the loop that consumes messages."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent, **kwargs) -> None:
        super().__init__(parent, **kwargs)
        self.timer_ref = None
        self.name_ = None

    def start(self, consumer) -> None:
        self.name_ = consumer.hostname
        self.beat()
        self.timer_ref = consumer.timer.call_repeatedly(setting("HEARTBEAT_INTERVAL_S"), self.beat)

    def beat(self) -> None:
        _touch(setting("HEARTBEAT_FILE"))
        try:
            from tasks.broker import client

            stale = int(setting("HEARTBEAT_STALE_S"))
            client().hset(
                f"crawl:worker:{self.name_}",
                mapping={"heartbeat": time.time(), "last_task": _last_task},
            )
            client().expire(f"crawl:worker:{self.name_}", stale * 4)
        except Exception as exc:  # the heartbeat file is what probes read; Redis may be away
            log.debug("heartbeat not written to Redis: %s", exc)

    def stop(self, consumer) -> None:
        if self.timer_ref is not None:
            self.timer_ref.cancel()


@signals.task_postrun.connect
def _task_done(**kwargs) -> None:
    global _last_task
    _last_task = time.time()


@signals.worker_ready.connect
def _ready(**kwargs) -> None:
    _touch(setting("READY_FILE"))


@signals.worker_shutdown.connect
def _not_ready(**kwargs) -> None:
    Path(setting("READY_FILE")).unlink(missing_ok=True)


def probe(kind: str, path: str | None = None) -> int:
    """Exit status for an exec probe: 0 healthy, 1 not. ``path``: another heartbeat file."""
    if kind == "ready":
        return 0 if Path(setting("READY_FILE")).exists() else 1
    try:
        age = time.time() - os.stat(path or setting("HEARTBEAT_FILE")).st_mtime
    except FileNotFoundError:
        return 1
    return 0 if age < setting("HEARTBEAT_STALE_S") else 1


if __name__ == "__main__":
    sys.exit(probe(*(sys.argv[1:3] or ["live"])))
