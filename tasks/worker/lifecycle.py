"""A worker's life: live settings followed from its start, checkpoints when it shuts down,
and a memory ceiling.

Reads ``WORKER_MAX_RSS_MB`` and ``MEMORY_CHECK_EVERY``.

* On warm shutdown (SIGTERM: stop consuming, finish in-flight pages), ``stopping`` is set (a
  message of several URLs gives back those it has not started) and the worker writes a
  checkpoint for every job it worked on that has not finished, after its last page
  committed (in a prefork worker, each child writes those of the pages it fetched, as it
  leaves). Celery says so only in the worker's main process; ``stopping`` is a
  process-shared flag made when that process starts, so that its prefork children see it
  too (and no other worker forked from the same parent, as the ``crawl`` command's are,
  does).
* Every ``MEMORY_CHECK_EVERY`` tasks a worker compares its resident memory with
  ``WORKER_MAX_RSS_MB``; above it, it asks itself for a warm shutdown between tasks. Its
  supervisor (the ``crawl`` command, a Deployment, compose's restart policy) starts a fresh
  one; nothing in flight is lost.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import socket

import psutil
from celery import signals

from tasks.defaults import setting

log = logging.getLogger(__name__)
touched_jobs: set[int] = set()  # jobs this worker process fetched pages for
_tasks_run = 0


class Flag:
    """A flag in memory shared with the processes forked after it is made. Lock-free: it is
    set from a signal handler (which may interrupt a read in the same thread) and read
    before each URL; a process killed while reading it leaves nothing held."""

    def __init__(self) -> None:
        self._value = multiprocessing.RawValue(ctypes.c_bool, False)

    def set(self) -> None:
        self._value.value = True

    def clear(self) -> None:
        self._value.value = False

    def is_set(self) -> bool:
        return bool(self._value.value)


stopping = Flag()  # set when the worker begins its warm shutdown


@signals.worker_init.connect
def _fresh_stop_flag(**kwargs) -> None:
    """This worker's own flag, before its pool starts (its children inherit it)."""
    global stopping
    stopping = Flag()


@signals.worker_shutting_down.connect
def _stopping(**kwargs) -> None:
    stopping.set()
    if _waker is not None:
        with contextlib.suppress(OSError):  # a byte already waiting wakes it as well
            _waker[1].send(b"\0")


_waker: tuple[socket.socket, socket.socket] | None = None  # read by the loop, written on stop


@signals.worker_ready.connect
def _wake_the_loop_on_stop(sender=None, **kwargs) -> None:
    """Wake the worker's event loop as its shutdown begins. The loop notices a stop only
    between two polls, and an idle worker's poll lasts until the broker's poll times out (a
    second): a crawl's workers took 0.85-0.93 s to stop after its last page. A socket the loop
    watches, written when the stop begins, ends that poll at once."""
    global _waker
    hub = getattr(sender, "hub", None)
    if hub is None:  # a pool without an event loop (solo) stops between tasks
        return
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    hub.add_reader(reader.fileno(), _drain, reader)
    _waker = (reader, writer)


def _drain(reader: socket.socket) -> None:
    with contextlib.suppress(BlockingIOError):
        reader.recv(64)


@signals.worker_ready.connect
@signals.worker_process_init.connect
def _follow_live_settings(**kwargs) -> None:
    """Live settings (``tasks/live.py``) in force in the worker, and in each prefork child."""
    from tasks import live

    live.start()


@signals.worker_shutdown.connect
@signals.worker_process_shutdown.connect
def _close_pipelines(**kwargs) -> None:
    """The item pipelines this process holds, closed as it leaves (``close_spider``, the
    spider's ``closed``): a worker the crawl command started leaves by ``os._exit``, which
    runs no ``atexit`` hook."""
    from tasks.content import pipelines

    pipelines.close_all(look=True)


@signals.worker_shutdown.connect
@signals.worker_process_shutdown.connect
def _checkpoint_on_shutdown(**kwargs) -> None:
    """Checkpoint the jobs this process fetched pages for: a threads-pool worker's main
    process as it stops, each prefork child as it leaves (its parent ran none of them)."""
    from tasks.frontier import jobs
    from web.models import CrawlJob, JobState

    # A finished job's end wrote its last checkpoint, and nothing of it was in flight after
    # that (it finishes when no URL is leased); one more per worker would only count its
    # frontier again. A cancelled or failed job's pages in flight may have ended since.
    for job in CrawlJob.objects.filter(pk__in=touched_jobs).exclude(state=JobState.FINISHED):
        try:
            jobs.checkpoint(job, "worker_shutdown")
        except Exception:  # the database may be what is going away
            log.exception("job=%s: no checkpoint at shutdown", job.pk)


@signals.task_postrun.connect
def _memory_ceiling(**kwargs) -> None:
    global _tasks_run
    _tasks_run += 1
    if _tasks_run % setting("MEMORY_CHECK_EVERY"):
        return
    rss_mb = psutil.Process().memory_info().rss / 2**20
    limit = setting("WORKER_MAX_RSS_MB")
    if rss_mb > limit:
        log.warning("worker RSS %.0f MB above %d MB: warm shutdown for a fresh process", rss_mb,
                    limit)  # fmt: skip
        os.kill(os.getpid(), signal.SIGTERM)


def term_once() -> None:
    """Make this worker's SIGTERM handler run once. Celery's handler sends its
    ``worker_shutting_down`` signal under its dispatcher's lock; a second SIGTERM arriving
    while the first handler holds it runs the handler again on the same thread, which waits on
    that lock for good (an orphaned worker hung so after three SIGTERMs). The first one starts
    the warm shutdown; later ones would only ask for it again, so they are ignored."""
    handler = signal.getsignal(signal.SIGTERM)
    if not callable(handler) or getattr(handler, "once", False):
        return

    def once(signum: int, frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        handler(signum, frame)

    once.once = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGTERM, once)


@signals.worker_ready.connect
def _term_once(**kwargs) -> None:
    term_once()  # Celery installed its handlers before the worker was ready
