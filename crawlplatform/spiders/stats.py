"""Scrapy's ``StatsCollector`` API over a dict of this process: what a crawler made outside a
job has (``manage.py parse``, a test). A job's ``crawler.stats`` is the platform's collector,
the same API over the job's stats that every worker shares and that commit with each page
(``docs/spiders.md``, Stats).

As in Scrapy 2.19, each method takes a ``spider`` argument it does not use (older code passes
it).
"""

from __future__ import annotations

import pprint
from typing import Any


class StatsCollector:
    """Scrapy's stats collector: a dict of stat names and values."""

    def __init__(self, crawler: Any = None) -> None:
        self._stats: dict[str, Any] = {}

    def get_value(self, key: str, default: Any = None, spider: Any = None) -> Any:
        return self._stats.get(key, default)

    def get_stats(self, spider: Any = None) -> dict[str, Any]:
        return self._stats

    def set_value(self, key: str, value: Any, spider: Any = None) -> None:
        self._stats[key] = value

    def set_stats(self, stats: dict[str, Any], spider: Any = None) -> None:
        self._stats = stats

    def inc_value(self, key: str, count: int = 1, start: int = 0, spider: Any = None) -> None:
        self._stats[key] = self._stats.setdefault(key, start) + count

    def max_value(self, key: str, value: Any, spider: Any = None) -> None:
        self._stats[key] = max(self._stats.setdefault(key, value), value)

    def min_value(self, key: str, value: Any, spider: Any = None) -> None:
        self._stats[key] = min(self._stats.setdefault(key, value), value)

    def clear_stats(self, spider: Any = None) -> None:
        self._stats.clear()

    def open_spider(self, spider: Any = None) -> None:
        """Called when the spider opens: nothing to do."""

    def close_spider(self, spider: Any = None, reason: str | None = None) -> None:
        """Called when the spider closes: nothing to do."""

    def __str__(self) -> str:
        return pprint.pformat(self.get_stats())
