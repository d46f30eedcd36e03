"""Keep a threads-pool worker's event loop turning while tasks work; let it sleep otherwise.

With the threads pool, a task finishing in a pool thread does not wake the worker's event loop
in time to take the next message (celery/celery#6941): crawls stalled in steps. A short
repeating timer on the loop keeps it turning while a task is working (measured: about 10% more
pages/s on a CPU-bound crawl). With no task working the timer stops, so an idle worker costs
nothing but its broker poll, and a task that only waits for its host's politeness slot
(:func:`wait`) does not count as working: a polite crawl does not spin the loop either.

Pool threads ask the loop, thread-safely through the hub's waker, to start the timer; the timer
stops itself on the loop when nothing works. Outside a threads-pool worker (prefork, solo,
tests) :func:`wait` is a plain sleep.
"""

from __future__ import annotations

import threading
import time

from celery import signals


class _Ticker:
    def __init__(self, consumer, interval: float) -> None:
        self.consumer = consumer
        self.interval = interval
        self.lock = threading.Lock()
        self.working = 0
        self.entry = None

    def busy(self, **kwargs) -> None:
        with self.lock:
            self.working += 1
            first = self.working == 1
        if first:
            self.consumer.hub.call_soon(self._start)

    def idle(self, **kwargs) -> None:
        with self.lock:
            self.working -= 1

    def _start(self) -> None:
        if self.entry is None:
            self.entry = self.consumer.timer.call_repeatedly(self.interval, self._tick)

    def _tick(self) -> None:
        with self.lock:
            idle = self.working <= 0
        if idle and self.entry is not None:
            self.entry.cancel()
            self.entry = None


_ticker: _Ticker | None = None


def install(consumer, interval: float) -> None:
    """Tick ``consumer``'s loop every ``interval`` seconds while tasks work (worker_ready)."""
    global _ticker
    _ticker = _Ticker(consumer, interval)
    signals.task_prerun.connect(_ticker.busy, weak=False)
    signals.task_postrun.connect(_ticker.idle, weak=False)


def wait(seconds: float) -> None:
    """Sleep in a task without keeping the worker's loop turning meanwhile."""
    ticker = _ticker
    if ticker is None:
        time.sleep(seconds)
        return
    ticker.idle()
    try:
        time.sleep(seconds)
    finally:
        ticker.busy()
