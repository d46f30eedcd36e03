"""Worker heartbeat and readiness, for cheap exec probes and for "is anyone consuming?".

Reads ``HEARTBEAT_FILE``, ``READY_FILE``, ``HEARTBEAT_INTERVAL_S`` and ``HEARTBEAT_STALE_S``.

A consumer bootstep runs on the worker's own event loop (its timer): every
``HEARTBEAT_INTERVAL_S`` it touches ``HEARTBEAT_FILE`` and writes the worker's heartbeat and
the time of its last task to Redis (``crawl:worker:HOSTNAME``, expiring, named in the
registry's index). If the loop is stuck, the file goes stale and the liveness probe fails; the
web's ``/metrics`` shows each worker's heartbeat and last-task ages, so a worker that stops
consuming while work waits is visible. ``READY_FILE`` exists from ``worker_ready`` until
shutdown. Each beat also has the item pipelines of jobs that ended closed
(``tasks/content/pipelines.py``), on a thread of its own.

The same hash is the registry of workers (``tasks/worker/registry.py``, read by ``/metrics``,
the dashboard and the scheduler): each heartbeat also writes the worker's version, its
channel, the queues it consumes, its slots (pages it works on at once: what the scheduler sizes
messages by), the spiders it has installed (a spider job is released only while a worker has
its spider), pid and start time, in the same round trip, so a registry that Redis lost comes
back with the next heartbeat. A worker that stops consuming (warm shutdown) removes itself;
one that dies leaves a hash that expires after ``4 x HEARTBEAT_STALE_S``.

Probes (no ``celery inspect ping``): ``python -m tasks.worker.heartbeat live`` and ``... ready``
(compose); ``python -m tasks.worker.heartbeat live FILE`` checks another heartbeat file (the
scheduler's). On Kubernetes the workers' HTTP probes (``tasks/worker/probes.py``) read the
same heartbeat file.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from celery import bootsteps, signals

from crawlplatform import logs
from tasks.defaults import setting
from tasks.worker import registry

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
        self.name = ""
        self.identity: dict[str, str | int | float] = {"started": time.time()}

    def start(self, consumer) -> None:
        self.name = consumer.hostname
        from tasks.content import spiders
        from tasks.frontier import channels

        queues = sorted(queue.name for queue in consumer.task_consumer.queues)
        slots = getattr(getattr(consumer, "controller", None), "concurrency", 0) or 0
        self.identity.update(version=channels.version(), channel=channels.mine(),
                             queues=",".join(queues), slots=slots, pid=os.getpid(),
                             spiders=",".join(spiders.names()))  # fmt: skip
        logs.bind_process(worker=consumer.hostname, channel=channels.mine(),
                          version=channels.version())  # fmt: skip
        self.beat()
        self.timer_ref = consumer.timer.call_repeatedly(setting("HEARTBEAT_INTERVAL_S"), self.beat)

    def beat(self) -> None:
        _touch(setting("HEARTBEAT_FILE"))
        try:
            registry.write(self.name, {**self.identity, "heartbeat": time.time(),
                                       "last_task": _last_task},
                           int(setting("HEARTBEAT_STALE_S")) * 4)  # fmt: skip
        except Exception as exc:  # the heartbeat file is what probes read; Redis may be away
            log.debug("heartbeat not written to Redis: %s", exc)
        from tasks.content import pipelines

        pipelines.close_ended_soon()  # an idle worker too closes the pipelines of ended jobs

    def stop(self, consumer) -> None:
        """The worker stops consuming (warm shutdown, or a lost broker connection before a
        restart of the consumer): it leaves the registry until its next start."""
        if self.timer_ref is not None:
            self.timer_ref.cancel()
        try:
            registry.remove(self.name)
        except Exception as exc:  # the entry expires by itself
            log.debug("worker not removed from the registry: %s", exc)


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
