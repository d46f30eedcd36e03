"""Give a threads-pool worker's free heap back to the system now and then.

Each thread of a threads-pool worker allocates from a glibc arena of its own (up to eight per
core), and a page's body, parse tree and statements leave each arena holding megabytes it no
longer uses, which glibc keeps: at 100,000 hosts a worker held 172 MB of heap with 39 MB in
use, 8 to 15 MB of it free in each thread's arena (``malloc_stats``): resident memory that
nothing uses. ``malloc_trim(0)`` hands every arena's free pages
back; run every ``WORKER_HEAP_TRIM_S`` on the worker's loop (a few milliseconds each), it keeps
the worker's memory what it uses. Where the C library has no ``malloc_trim`` (musl, macOS),
nothing is done.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return None


def trim() -> bool:
    """Return the free pages of every arena to the system; False where that cannot be done."""
    malloc_trim = _malloc_trim()
    return malloc_trim is not None and malloc_trim(0) >= 0


def install(consumer, every: float) -> None:
    """Trim the heap every ``every`` seconds on ``consumer``'s loop (0: never)."""
    if _malloc_trim() is not None and every > 0:
        consumer.timer.call_repeatedly(every, trim)
