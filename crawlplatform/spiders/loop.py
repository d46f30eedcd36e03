"""The one event loop a process runs its spiders' async code on, as Scrapy's asyncio reactor
runs all of it on one: a connection, a client session or a pool an ``async def`` pipeline's
``open_spider`` makes serves its ``process_item`` and the spider's async callbacks after it.

The loop runs in a thread of its own, started on first use in each process (a forked child
starts its own); a worker's threads hand it their coroutines and wait for the results, so
that the coroutines of several threads run on it side by side. A coroutine that the loop's
own thread asks for (an async signal receiver sent from an async callback) cannot wait on
the loop it runs on: it runs on a loop of its own, in a thread of its own. A process about
to fork (the crawl command, which runs the spider's ``start()`` on its loop, forking its
workers) stops the loop's thread for the fork's time (``paused``): the loop and what it holds
wait, and a fork copies no thread.

A coroutine is waited for ``timeout`` seconds at most (the callback's time, say): past it, it
is cancelled and ``TimeoutError`` raised; and since a coroutine that blocks (a ``time.sleep``
in an ``async def``) holds the loop for every other, the process's later coroutines go to a
new loop, the old one left to finish what it holds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def _forget() -> None:
    global _loop, _thread, _lock
    _loop, _thread = None, None  # its thread is not in a forked child
    _lock = threading.Lock()  # nor whoever held this


os.register_at_fork(after_in_child=_forget)


def _running() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
        if _thread is None or not _thread.is_alive():  # never served, or stopped (``paused``)
            _thread = _serve(_loop)
        return _loop


def _serve(loop: asyncio.AbstractEventLoop) -> threading.Thread:
    thread = threading.Thread(target=loop.run_forever, name="spider-asyncio", daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def paused(wait: float = 1.0) -> Iterator[None]:
    """The process's loop stopped, its thread ended, while the block runs, then served again:
    a fork made in the block copies no thread of it (``threading.active_count()`` tells).
    A loop busy past ``wait`` seconds (a coroutine that blocks, or one that waits for this
    block) is left running, its stop called off. Other threads' coroutines wait for the
    block's end."""
    global _thread
    with _lock:
        loop, thread = _loop, _thread
        if loop is not None and thread is not None and thread is not threading.current_thread():
            decided = threading.Lock()  # the stop runs, or is called off: whichever comes first

            def stop() -> None:
                if decided.acquire(blocking=False):
                    loop.stop()

            loop.call_soon_threadsafe(stop)
            thread.join(wait)
            if not decided.acquire(blocking=False):  # it stopped, or is stopping now
                thread.join(wait)  # not past it: what the loop's last pass runs may want _lock
                if not thread.is_alive():
                    _thread = None  # else it ends soon: _running() serves the loop again
        try:
            yield
        finally:
            if loop is not None and thread is not None and _thread is None and _loop is loop:
                _thread = _serve(loop)


def run(awaitable: Awaitable[T], timeout: float | None = None) -> T:
    """``awaitable``'s result, awaited on the process's loop for ``timeout`` seconds at most
    (``TimeoutError`` past it); what it raises is raised here."""

    async def wait() -> T:
        return await awaitable

    loop = _running()
    if threading.current_thread() is _thread:
        return _apart(wait())
    future = asyncio.run_coroutine_threadsafe(wait(), loop)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        _leave(loop)
        raise TimeoutError(f"a coroutine ran past {timeout:g} s") from None


def _leave(loop: asyncio.AbstractEventLoop) -> None:
    """Later coroutines go to a new loop: ``loop`` may be held by one that blocks."""
    global _loop, _thread
    with _lock:
        if _loop is loop:
            _loop, _thread = None, None


def _apart(coroutine: Any) -> Any:
    """A coroutine asked for on the loop's own thread, run to its end on a loop of its own."""
    done: dict[str, Any] = {}

    def main() -> None:
        try:
            done["result"] = asyncio.run(coroutine)
        except BaseException as exc:  # noqa: BLE001 (raised again in the asking thread)
            done["raised"] = exc

    thread = threading.Thread(target=main, name="spider-asyncio-nested", daemon=True)
    thread.start()
    thread.join()
    if "raised" in done:
        raise done["raised"]
    return done["result"]
