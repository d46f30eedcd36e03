"""Riding out an outage of the database or Redis: one log line when it starts, one when it
ends, and waits between tries that double up to ``OUTAGE_BACKOFF_MAX_S`` (from
``OUTAGE_BACKOFF_MIN_S``). The scheduler's loop and the crawl command use it.
"""

from __future__ import annotations

import logging
import time

from tasks.defaults import setting


class Outage:
    """The state of one loop's outage: ``failed`` at each failed try, ``recovered`` after a
    try that worked."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self.log, self.what = log, what
        self.since: float | None = None
        self.wait = setting("OUTAGE_BACKOFF_MIN_S")

    @property
    def lasted(self) -> float:
        """Seconds since the outage began (0 when there is none)."""
        return 0.0 if self.since is None else time.monotonic() - self.since

    def failed(self, exc: Exception) -> float:
        """A try failed: log it if it is the outage's first; the seconds to wait now."""
        if self.since is None:
            self.since = time.monotonic()
            self.log.warning("%s unavailable (%s); retrying", self.what, exc)
            self.wait = setting("OUTAGE_BACKOFF_MIN_S")
        wait = self.wait
        self.wait = min(self.wait * 2, setting("OUTAGE_BACKOFF_MAX_S"))
        return wait

    def recovered(self) -> None:
        """A try worked: log the end of the outage, if there was one."""
        if self.since is not None:
            self.log.warning("%s back after %.0f s", self.what, self.lasted)
            self.since = None
