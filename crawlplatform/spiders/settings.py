"""What a ported pipeline's or extension's ``from_crawler(crawler)`` and a spider's
``self.settings`` read, as Scrapy's: a ``Crawler`` with ``settings``, ``spider``, ``stats`` and
``signals``, and read-only ``Settings`` with Scrapy's getters. The settings are the job's (its
own and the spider's ``custom_settings``, by the names they were given); a name the job has not
is its default, as in Scrapy. A job's crawler has the job's stats and the signals its worker
process sends (given by the platform); one made alone has stats in a dict and signals no one
sends. A worker has no engine to give: a component that asks for it fails its job at start
with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from crawlplatform.spiders.scrapydefaults import DEFAULTS
from crawlplatform.spiders.signalmanager import SignalManager
from crawlplatform.spiders.stats import StatsCollector


class Settings(Mapping):
    """Read-only settings with Scrapy's getters."""

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values = dict(values or {})

    def __getitem__(self, name: str) -> Any:
        return self.get(name)  # Scrapy's: a missing name is None, not a KeyError

    def __contains__(self, name: object) -> bool:
        return name in self._values or name in DEFAULTS

    def __iter__(self) -> Iterator[str]:
        return iter({**DEFAULTS, **self._values})

    def __len__(self) -> int:
        return len({**DEFAULTS, **self._values})

    def get(self, name: str, default: Any = None) -> Any:
        """The job's value of ``name``, else Scrapy 2.19's default, else ``default``."""
        if name in self._values:
            return self._values[name]
        return DEFAULTS.get(name, default)

    def getbool(self, name: str, default: bool = False) -> bool:
        value = self.get(name, default)
        if value in ("True", "true", "False", "false"):  # Scrapy's spellings, and only those
            return value in ("True", "true")
        try:
            return bool(int(value))
        except ValueError:
            raise ValueError(f"{name}: {value!r} is no boolean (True, False, 1 or 0)") from None

    def getint(self, name: str, default: int = 0) -> int:
        return int(self.get(name, default))

    def getfloat(self, name: str, default: float = 0.0) -> float:
        return float(self.get(name, default))

    def getlist(self, name: str, default: list | None = None) -> list:
        value = self.get(name, default or [])
        if isinstance(value, str):
            return value.split(",") if value else []
        return list(value)

    def getdict(self, name: str, default: dict | None = None) -> dict:
        value = self.get(name, default or {})
        return json.loads(value) if isinstance(value, str) else dict(value)

    def copy_to_dict(self) -> dict[str, Any]:
        return {**DEFAULTS, **self._values}

    def copy(self) -> Settings:
        return Settings(self._values)


BaseSettings = Settings  # Scrapy's base class of its settings: one class here

# Scrapy's names of setting priorities: a value set at a lower one than a name holds is ignored
SETTINGS_PRIORITIES = {"default": 0, "command": 10, "addon": 15, "project": 20, "spider": 30,
                       "cmdline": 40}  # fmt: skip


def _level(priority: int | str) -> int:
    return SETTINGS_PRIORITIES[priority] if isinstance(priority, str) else int(priority)


class UpdatedSettings(Settings):
    """What a spider's ``update_settings(settings)`` classmethod is given: Scrapy's setters
    with its priorities (``set``, ``setdict``, ``update``, ``setdefault``, ``[name] =``,
    ``delete``, ``getpriority``). ``changed()`` is what was set, which the job takes as the
    spider's ``custom_settings``."""

    def __init__(self) -> None:
        super().__init__()
        self._priorities: dict[str, int] = {}

    def set(self, name: str, value: Any, priority: int | str = "project") -> None:
        level = _level(priority)
        if level >= self._priorities.get(name, 0):
            self._values[name], self._priorities[name] = value, level

    def setdict(self, values: Mapping[str, Any], priority: int | str = "project") -> None:
        for name, value in values.items():
            self.set(name, value, priority)

    update = setdict

    def setdefault(self, name: str, default: Any = None, priority: int | str = "project") -> Any:
        if name not in self._values:
            self.set(name, default, priority)
        return self.get(name)

    def __setitem__(self, name: str, value: Any) -> None:
        self.set(name, value)

    def delete(self, name: str, priority: int | str = "project") -> None:
        if _level(priority) >= self._priorities.get(name, 0):
            self._values.pop(name, None)
            self._priorities.pop(name, None)

    def getpriority(self, name: str) -> int | None:
        if name in self._values:
            return self._priorities[name]
        return SETTINGS_PRIORITIES["default"] if name in DEFAULTS else None

    def changed(self) -> dict[str, Any]:
        return dict(self._values)


class Crawler:
    """What ``from_crawler`` is given: the job's ``settings``, its ``spider``, ``stats`` and
    ``signals``."""

    def __init__(self, settings: Settings, spider: Any, stats: StatsCollector | None = None,
                 signals: SignalManager | None = None) -> None:  # fmt: skip
        self.settings = settings
        self.spider = spider
        self.stats = StatsCollector(self) if stats is None else stats
        self.signals = SignalManager(self) if signals is None else signals

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"a worker's crawler has settings, spider, stats and signals, not "
                             f"{name} (docs/spiders.md, Porting)")  # fmt: skip
