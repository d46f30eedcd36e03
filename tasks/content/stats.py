"""A spider job's ``crawler.stats`` in a worker process: Scrapy's collector API over the job's
stat rows (``tasks/frontier/stats.py``), counted exactly once however often a page is run.

Reads ``STATS_CACHE_S``, ``STATS_READ_SHARE`` and ``STATS_PAGE_MAX_NAMES``.

What a page's callback, pipelines and signal handlers change is kept for the page
(``Pending``, bound to the page's work with ``bound``: the worker thread's context, which the
callback's thread runs in too) and committed in the page's own transaction; a page whose
commit is lost (its worker killed, its callback failed) leaves no trace, and its next run
counts again. What changes outside a page (a worker process opening or closing the job's
pipelines and extensions, their signal handlers) commits on its own when that step ends
(``outside``); the job's start commits its changes with the start.

A read in a page (``get_value``, ``get_stats``) is the job's aggregate as this process last
read it, at most ``STATS_CACHE_S`` old, or 1 / ``STATS_READ_SHARE`` times what that read took
when that is longer (a read is a pass over the job's rows) — the pages other workers committed
since are not in it, those of this process are (``committed``) — with the page's own changes
on top; a read outside a page reads the database.
Scrapy's built-in stats (``item_scraped_count``, ``finish_reason``, ...) are computed from the
job's tables when asked for, never written. Values are kept as JSON: a date comes back as its
ISO text, a set as a list.
"""

from __future__ import annotations

import datetime
import decimal
import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from crawlplatform.spiders import StatsCollector
from tasks.defaults import setting
from tasks.frontier import stats as rows
from tasks.frontier.db import with_retries
from tasks.frontier.stats import MISSING, Groups, StatRow
from web.models import CrawlJob, StatKind

log = logging.getLogger(__name__)
NAME_MAX = 200  # characters of a stat's name (the rows' column)


class Pending:
    """What one page (or one start, open or close of a job's pipelines) changed in its job's
    stats, until it commits."""

    def __init__(self, job_id: int | None, page: bool = True) -> None:
        self.job_id = job_id
        self.page = page  # a page's reads may be cached; the others' read the database
        self.changes: Groups = {}
        self.cleared = False  # clear_stats: the job's rows before these count no more
        self.committing = 0.0  # when its commit began: its rows were last asked for (``rows``)

    def change(self, name: str, kind: str, value: Any) -> None:
        if kind == StatKind.CLEAR:
            self.changes.clear()
            self.cleared = True
            return
        if name not in self.changes and len(self.changes) >= setting("STATS_PAGE_MAX_NAMES"):
            raise ValueError(f"stat {name!r}: a page may change STATS_PAGE_MAX_NAMES "
                             f"({setting('STATS_PAGE_MAX_NAMES')}) stats at most")  # fmt: skip
        rows.merge(self.changes.setdefault(name, {}), kind, value)

    def rows(self) -> list[StatRow]:
        """The rows to write, in the order they count (a clear first), asked for by the commit
        that writes them."""
        self.committing = time.monotonic()
        out = [StatRow("", StatKind.CLEAR, None)] if self.cleared else []
        for name, changes in self.changes.items():
            out.extend(StatRow(name, kind, value) for kind, value in changes.items())
        return out


_pending: ContextVar[Pending | None] = ContextVar("crawler_stats_pending", default=None)


@contextmanager
def bound(pending: Pending) -> Iterator[Pending]:
    """Within this block (and the callbacks it runs), the job's stats change ``pending``."""
    token = _pending.set(pending)
    try:
        yield pending
    finally:
        _pending.reset(token)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _as_json(name: str, value: Any) -> Any:
    if value is None or isinstance(value, str | int | bool):
        return value
    try:
        return json.loads(json.dumps(value, default=_plain, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"stat {name!r}: {exc} (stats are kept as JSON)") from None


def _number(name: str, value: Any) -> int | float:
    if not isinstance(value, int | float | decimal.Decimal):
        raise TypeError(f"stat {name!r}: inc_value takes a number, not {type(value).__name__}")
    if isinstance(value, bool):
        return int(value)
    return _as_json(name, float(value) if isinstance(value, decimal.Decimal) else value)


def _folded(groups: Groups, pages: list[Pending]) -> Groups:
    """``groups`` (a read of the job's rows), with ``pages``' changes on it: a new mapping."""
    folded = {name: dict(changes) for name, changes in groups.items()}
    for page in pages:
        if page.cleared:
            folded = {}
        for name, changes in page.changes.items():
            into = folded.setdefault(name, {})
            for kind, value in changes.items():
                rows.merge(into, kind, value)
    return folded


class JobStats(StatsCollector):
    """One job's stats, as this process's spider of it sees them (``crawler.stats``)."""

    def __init__(self, job_id: int | None) -> None:
        super().__init__()
        self.job_id = job_id
        self._read: dict[str, tuple[float, Any]] = {}  # "rows"/"builtin": (when, what)
        self._mine: list[Pending] = []  # this process's pages committed since "rows" was read
        self._rows_began = 0.0  # when the read of "rows" began
        self._folding = threading.Lock()  # the worker's threads add their pages' changes

    def committed(self, pending: Pending) -> None:
        """A page of this process committed ``pending``: its later pages' reads count it at
        once, as Scrapy's one process sees its own counts (other workers' when the rows are
        next read). A read of the rows that began after the page's commit did may hold it
        already: the page's changes are then not put on it (a count is late, never double)."""
        if not pending.changes and not pending.cleared:
            return
        with self._folding:
            kept = self._read.get("rows")
            if kept is None or time.monotonic() > kept[0]:  # the next read reads the rows anew
                self._read.pop("rows", None)
                self._mine.clear()  # (kept for one read's time at most: bounded)
                return
            self._mine.append(pending)
            if self._rows_began < pending.committing:
                self._read["rows"] = (kept[0], _folded(kept[1], [pending]))

    # Reads -----------------------------------------------------------------------------

    def get_value(self, key: str, default: Any = None, spider: Any = None) -> Any:
        pending = self._bound()
        base = self._builtin(pending).get(key, MISSING) if rows.is_builtin(key) else MISSING
        if pending is None or not pending.cleared:
            base = rows.fold(self._rows(pending).get(key), base)
        if pending is not None:
            base = rows.fold(pending.changes.get(key), base)
        return default if base is MISSING else base

    def get_stats(self, spider: Any = None) -> dict[str, Any]:
        """Every stat (a new dict: changing it changes no stat)."""
        pending = self._bound()
        found = dict(self._builtin(pending))
        layers = [] if pending is not None and pending.cleared else [self._rows(pending)]
        for groups in [*layers, pending.changes if pending is not None else {}]:
            for name, changes in groups.items():
                value = rows.fold(changes, found.get(name, MISSING))
                if value is not MISSING:
                    found[name] = value
        return dict(sorted(found.items()))

    def _known(self, key: str) -> Any:
        """Stat ``key`` as far as this process knows it without reading the job's rows: as
        they were last read, changed by this page."""
        pending = self._bound()
        kept = self._read.get("rows")
        value = MISSING
        if kept is not None and (pending is None or not pending.cleared):
            value = rows.fold(kept[1].get(key), value)
        return value if pending is None else rows.fold(pending.changes.get(key), value)

    def _rows(self, pending: Pending | None) -> Groups:
        def compute() -> Groups:
            began = time.monotonic()
            found = rows.aggregate(self.job_id)
            with self._folding:  # what began before this read may be in it: left to it
                self._rows_began = began
                self._mine = [page for page in self._mine if page.committing > began]
                return _folded(found, self._mine)

        return self._cached("rows", pending, compute)

    def _builtin(self, pending: Pending | None) -> dict[str, Any]:
        def compute() -> dict[str, Any]:
            job = CrawlJob.objects.filter(pk=self.job_id).first()
            return {} if job is None else rows.builtin(job)

        return self._cached("builtin", pending, compute)

    def _cached(self, what: str, pending: Pending | None, compute: Any) -> Any:
        """``compute()``, kept for the reads of pages (others read anew): ``STATS_CACHE_S``,
        or its cost divided by ``STATS_READ_SHARE`` if that is longer (a job of many rows)."""
        if self.job_id is None:
            return {}
        now = time.monotonic()
        kept = self._read.get(what)
        if pending is None or not pending.page or kept is None or now > kept[0]:
            found = compute()
            took = time.monotonic() - now
            ttl = max(setting("STATS_CACHE_S"), took / setting("STATS_READ_SHARE"))
            kept = (now + ttl, found)
            with self._folding:
                self._read[what] = kept
        return kept[1]

    # Changes ---------------------------------------------------------------------------

    def set_value(self, key: str, value: Any, spider: Any = None) -> None:
        self._change(key, StatKind.SET, _as_json(key, value))

    def set_stats(self, stats: dict[str, Any], spider: Any = None) -> None:
        """Scrapy's: the stats become ``stats`` (the built-in ones stay: they are computed)."""
        self.clear_stats()
        for key, value in stats.items():
            self.set_value(key, value)

    def inc_value(self, key: str, count: int = 1, start: int = 0, spider: Any = None) -> None:
        count = _number(key, count)
        known = self._known(key)
        if known is not MISSING and not rows.is_number(known):
            raise TypeError(f"stat {key!r}: inc_value on a {type(known).__name__} value")
        if start and self.get_value(key, MISSING) is MISSING:
            self._change(key, StatKind.START, _number(key, start))
        self._change(key, StatKind.INC, count)

    def max_value(self, key: str, value: Any, spider: Any = None) -> None:
        self._change(key, StatKind.MAX, _as_json(key, value))

    def min_value(self, key: str, value: Any, spider: Any = None) -> None:
        self._change(key, StatKind.MIN, _as_json(key, value))

    def clear_stats(self, spider: Any = None) -> None:
        """Scrapy's: every stat the spider set starts again (from this page's commit on, for
        every worker); the built-in ones stay, computed from the job's tables."""
        self._change("", StatKind.CLEAR, None)

    def _change(self, name: str, kind: str, value: Any) -> None:
        if not isinstance(name, str) or len(name) > NAME_MAX:
            raise ValueError(f"a stat's name is a text of {NAME_MAX} characters at most, not "
                             f"{name!r:.300}")  # fmt: skip
        pending = self._bound()
        if pending is not None:
            pending.change(name, kind, value)
            return
        alone = Pending(self.job_id, page=False)  # a thread of the spider's own: at once
        alone.change(name, kind, value)
        self.commit(alone)

    # Outside a page --------------------------------------------------------------------

    @contextmanager
    def outside(self) -> Iterator[None]:
        """A step outside a page (opening or closing the pipelines): what it changes commits
        when it ends, unless it runs within a page or a start that commits it."""
        if self._bound() is not None:
            yield
            return
        with bound(Pending(self.job_id, page=False)) as pending:
            yield
        self.commit(pending)

    def commit(self, pending: Pending) -> None:
        """Write what ``pending`` changed, on its own (a change lost to a database that stays
        away is logged)."""
        changed = pending.rows()
        if not changed or self.job_id is None:
            return
        try:
            with_retries(lambda: rows.add(self.job_id, changed))
        except Exception:
            log.exception("job=%s: %d stat changes not written", self.job_id, len(changed))
        self._read.clear()  # this process reads them at once

    def _bound(self) -> Pending | None:
        pending = _pending.get()
        return pending if pending is not None and pending.job_id == self.job_id else None
