"""Where spiders come from, and the spider object a worker process keeps per job.

Reads ``SPIDER_MODULES`` (``CRAWL_SPIDER_MODULES``: modules scanned, with their submodules,
for ``Spider`` subclasses that have a name, as Scrapy's ``SPIDER_MODULES``) and the
``crawlplatform.spiders`` entry-point group (``name = package.module:SpiderClass``), so that
a team ships its spiders as a package in the worker image. Only operators install code: a job
names a spider, never uploads one. A spider's ``settings`` read the job's ``FETCH_MAX_BYTES``.

A spider that cannot be imported is listed with its traceback; a job naming it, or a name no
module provides, fails at start with that text (``SpiderUnavailable``).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import logging
import pkgutil
import threading
import traceback
from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any, NamedTuple

from crawlplatform.spiders import Spider, scrapysettings
from crawlplatform.spiders.porting import MAPPED, REFUSED
from crawlplatform.spiders.scrapydefaults import DEFAULTS
from crawlplatform.spiders.settings import Crawler, Settings, UpdatedSettings
from tasks import defaults
from tasks.content import feeds, stats
from tasks.defaults import setting
from web.models import CrawlJob
from web.models.jobs import MAX_DEPTH_LIMIT

log = logging.getLogger(__name__)
ENTRY_POINTS = "crawlplatform.spiders"


class SpiderUnavailable(Exception):
    """A job's spider cannot be had: unknown, or its module fails to import (the traceback
    is in the message)."""


@dataclass(frozen=True)
class Installed:
    """A spider as this process finds it installed."""

    name: str
    source: str  # the module or entry point it came from
    cls: type[Spider] | None  # None: broken
    error: str = ""  # why it cannot be loaded (its import traceback)


def _modules() -> list[str]:
    return [m.strip() for m in setting("SPIDER_MODULES").split(",") if m.strip()]


def _spiders_in(module: Any) -> list[type[Spider]]:
    return [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, Spider) and obj is not Spider
        and obj.__module__ == module.__name__ and getattr(obj, "name", "")
    ]  # fmt: skip


def _walk(name: str) -> list[Any]:
    """The module ``name`` and, if it is a package, every module under it; a module that
    fails to import is (its name, its traceback)."""
    try:
        module = importlib.import_module(name)
    except Exception:  # user code: any error is the module's, reported, never raised
        return [(name, traceback.format_exc())]
    found: list[Any] = [module]
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), f"{name}."):
        found.extend(_walk(info.name) if not info.ispkg else [importlib.import_module(info.name)])
    return found


@cache
def published() -> tuple[EntryPoint, ...]:
    """The ``crawlplatform.spiders`` entry points of the installed packages, read once per
    process (reading them walks every package's metadata: 10 to 50 ms of CPU); the crawl
    command reads them before it forks its workers (``supervisor.preload``)."""
    return tuple(entry_points(group=ENTRY_POINTS))


def installed() -> dict[str, Installed]:
    """Every spider this process can find, by name (broken modules included, with why)."""
    out: dict[str, Installed] = {}
    for name in _modules():
        for module in _walk(name):
            if isinstance(module, tuple):
                out[f"<{module[0]}>"] = Installed(f"<{module[0]}>", module[0], None, module[1])
                continue
            for cls in _spiders_in(module):
                out.setdefault(cls.name, Installed(cls.name, module.__name__, cls))
    for point in published():
        try:
            cls = point.load()
        except Exception:
            out.setdefault(point.name, Installed(point.name, point.value, None,
                                                 traceback.format_exc()))  # fmt: skip
            continue
        if inspect.isclass(cls) and issubclass(cls, Spider):
            out.setdefault(getattr(cls, "name", "") or point.name,
                           Installed(cls.name or point.name, point.value, cls))  # fmt: skip
    return out


def names() -> list[str]:
    """The spiders this process can run (for the heartbeat and the admin)."""
    return sorted(n for n, s in installed().items() if s.cls is not None)


_classes: dict[str, type[Spider]] = {}


def load(name: str) -> type[Spider]:
    """The class of spider ``name``; SpiderUnavailable says why it cannot be had."""
    found = _classes.get(name)
    if found is not None:
        return found
    every = installed()
    spider = every.get(name)
    if spider is None or spider.cls is None:
        broken = [s for s in every.values() if s.cls is None]
        if spider is None:
            why = f"no spider named {name!r} is installed"
            known = ", ".join(sorted(n for n, s in every.items() if s.cls is not None))
            why += f" (installed: {known or 'none'})"
        else:
            why = f"spider {name!r} cannot be loaded"
        errors = "".join(f"\n{s.source} failed to import:\n{s.error}" for s in broken)
        raise SpiderUnavailable(why + errors)
    _classes[name] = cls = _updated(spider.cls)
    return cls


def _updated(cls: type[Spider]) -> type[Spider]:
    """``cls`` with the settings its own ``update_settings`` classmethod sets as its
    ``custom_settings``, which every reader of the spider's settings reads (Scrapy applies
    them the same way, once, before the crawl); SpiderUnavailable if it raises."""
    if getattr(cls.update_settings, "__func__", None) is Spider.update_settings.__func__:
        return cls
    updated = UpdatedSettings()
    try:
        cls.update_settings(updated)
    except Exception as exc:  # the spider's code
        raise SpiderUnavailable(f"spider {cls.name!r}: its update_settings raised "
                                f"{type(exc).__name__}: {exc}") from None  # fmt: skip
    cls.custom_settings = updated.changed()
    return cls


def create(job: CrawlJob) -> Spider:
    """A new spider object for ``job``, made as Scrapy makes one: by its ``from_crawler``,
    given the job's ``crawler`` (``crawlplatform/spiders/settings.py``: the job's settings, its
    stats, the signals this process sends) and its arguments, set as attributes; then the
    attributes its ``start()`` set when the job started (``spider_state``). Its settings read
    the job's own values under the Scrapy names mapped to them (``scrapys_values``)."""
    cls = load(job.spider)
    settings = Settings(
        {**(cls.custom_settings or {}), **(job.settings or {}), **scrapys_values(job)}
    )
    crawler = Crawler(settings, None, stats=stats.JobStats(job.pk))
    spider = cls.from_crawler(crawler, **dict(job.spider_args or {}))
    crawler.spider = spider
    spider.crawler, spider.settings = crawler, settings  # a from_crawler of its own may not
    spider.__dict__.update(job.spider_state or {})  # what its start() set, in the job's start
    spider.job_id = job.pk
    return spider


def scrapys_values(job: CrawlJob) -> dict[str, Any]:
    """What the job does, under the Scrapy names of the same meaning and as Scrapy reads them:
    ``RETRY_TIMES`` is its attempts less one, ``DEPTH_LIMIT`` 0 where it goes as deep as the
    platform allows, ``USER_AGENT`` the one it presents first. A spider's ``custom_settings``
    and the job's fields that overrode them are both in these, and the operator's caps."""
    values = {name: back(getattr(job, field))
              for name, (field, _, back) in SCRAPY_FIELDS.items()}  # fmt: skip
    values.update((name, back(setting(target, job)))
                  for name, (target, _, back) in SCRAPY_SETTINGS.items())  # fmt: skip
    values["USER_AGENT"] = (job.user_agents or [setting("USER_AGENT", job)])[0]
    return values


_instances: dict[tuple[int, int], Spider] = {}
_made = threading.Lock()  # the worker's threads make one spider object per job between them


def for_job(job: CrawlJob) -> Spider:
    """This process's spider object of ``job`` (one per job and run, kept between pages).
    Its callbacks may run in several threads of the process at once: crawl state belongs in
    ``cb_kwargs`` and ``meta``, not in the spider's attributes."""
    key = (job.pk, job.run)
    spider = _instances.get(key)
    if spider is None:
        with _made:
            spider = _instances.get(key)
            if spider is None:
                if len(_instances) > setting("LINK_CACHE_JOBS"):
                    _instances.clear()
                spider = _instances[key] = create(job)
    return spider


def forget(job_id: int) -> list[Spider]:
    """Drop this process's spider objects of a job; those dropped."""
    gone = [key for key in _instances if key[0] == job_id]
    return [_instances.pop(key) for key in gone]


# Scrapy settings with a job field of the same meaning: the field, how a spider's value
# carries over, and how the job's value reads back in the spider's ``settings``.
SCRAPY_FIELDS: dict[str, tuple[str, Any, Any]] = {
    "DOWNLOAD_DELAY": ("delay", float, float),
    "ROBOTSTXT_OBEY": ("obey_robots", bool, bool),
    "CONCURRENT_REQUESTS_PER_DOMAIN": ("host_concurrency", int, int),
    "DEPTH_LIMIT": (
        "max_depth",
        lambda n: int(n) or MAX_DEPTH_LIMIT,  # Scrapy's 0: no limit
        lambda n: 0 if n >= MAX_DEPTH_LIMIT else n,
    ),
    "CLOSESPIDER_PAGECOUNT": ("max_pages", lambda n: int(n) or None, lambda n: n or 0),
    "DEFAULT_REQUEST_HEADERS": ("headers", lambda h: {str(k): str(v) for k, v in h.items()}, dict),
}
# Scrapy settings with a job setting of the same meaning, the same three.
SCRAPY_SETTINGS: dict[str, tuple[str, Any, Any]] = {
    "DOWNLOAD_TIMEOUT": ("FETCH_DEADLINE_S", float, float),
    "RETRY_TIMES": (
        "RETRY_MAX_ATTEMPTS",
        lambda n: int(n) + 1,  # retries -> attempts
        lambda n: n - 1,
    ),
    "DOWNLOAD_MAXSIZE": ("FETCH_MAX_BYTES", int, int),
    "REDIRECT_MAX_TIMES": ("FETCH_MAX_REDIRECTS", int, int),
}
# Settings the spider's code reads (its pipelines and extensions, the error answers its
# callbacks take, a SitemapSpider's warning size, whether a CrawlSpider follows links), and
# those its feeds are written by (checked where the job starts: tasks/content/feeds.py).
READ_BY_THE_SPIDER = frozenset({"ITEM_PIPELINES", "EXTENSIONS", "HTTPERROR_ALLOWED_CODES",
                                "HTTPERROR_ALLOW_ALL", "DOWNLOAD_WARNSIZE",
                                "CRAWLSPIDER_FOLLOW_LINKS", "REDIRECT_ENABLED",
                                "METAREFRESH_ENABLED", "CLOSESPIDER_ITEMCOUNT", "COOKIES_ENABLED",
                                *feeds.SETTINGS})  # fmt: skip


def _count(value: Any) -> bool:
    """Whether ``value`` is a count Scrapy's ``getint`` reads (0: none)."""
    try:
        return int(value) >= 0 and not isinstance(value, bool | float)
    except (TypeError, ValueError):
        return False


def _own(name: str, known: list[str]) -> bool:
    """A name of the spider's own (``MONGO_URI``, read by its pipelines' ``from_crawler``):
    close enough to none of the platform's ``known`` names to be a typo of it."""
    return not difflib.get_close_matches(name, known, n=1, cutoff=0.8)


class Custom(NamedTuple):
    """A spider's ``custom_settings`` as a job takes them."""

    settings: dict[str, Any]  # job settings (tasks/defaults.py), validated as a job's own
    fields: dict[str, Any]  # job fields a Scrapy setting names (DOWNLOAD_DELAY: delay, ...)
    problems: list[str]  # Scrapy settings whose value does not carry over


def custom_settings(spider_cls: type[Spider]) -> Custom:
    """A spider's ``custom_settings`` that the job takes (``READ_BY_THE_SPIDER`` are read where
    they are used): the platform's settings by their names, Scrapy's as
    ``crawlplatform/spiders/scrapysettings.py`` says (translated where the platform has the
    same knob, left out where it does the same its own way, a problem where it refuses)."""
    settings: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    problems: list[str] = []
    known = defaults.names()
    for name, value in (spider_cls.custom_settings or {}).items():
        if name in feeds.SETTINGS:
            continue  # checked with the feeds themselves, where the job starts (feeds.problems)
        row = scrapysettings.verdict(name, value)
        if row is not None and row.verdict == REFUSED:
            problems.append(f"{name}: {row.why}")
            continue
        if name == "CLOSESPIDER_ITEMCOUNT" and not _count(value):
            problems.append(f"{name}: {value!r} cannot be taken")
            continue
        if name in READ_BY_THE_SPIDER or name == "RETRY_ENABLED":  # the latter: below
            continue
        target = SCRAPY_FIELDS.get(name) or SCRAPY_SETTINGS.get(name)
        platforms_way = name in scrapysettings.NAMES and (row is None or row.verdict == MAPPED)
        if target is None and platforms_way:
            log.info("spider %s: custom setting %s is Scrapy's, which the platform does its own "
                     "way: left out (docs/spiders.md, Porting)", spider_cls.name, name)  # fmt: skip
            continue
        if target is None and name in known:
            settings[name] = value  # the platform's: validated with the job's settings
            continue
        if target is None and _own(name, known):
            log.info("spider %s: custom setting %s is the spider's own: its pipelines read it "
                     "(crawler.settings), the job does not", spider_cls.name, name)  # fmt: skip
            continue
        if target is None:
            settings[name] = value  # a typo of the platform's: the job's validation names it
            continue
        try:
            converted = target[1](value)
        except (TypeError, ValueError):
            problems.append(f"{name}: {value!r} cannot be taken")
            continue
        (fields if name in SCRAPY_FIELDS else settings)[target[0]] = converted
    if not scrapysettings.on((spider_cls.custom_settings or {}).get("RETRY_ENABLED", True)):
        settings["RETRY_MAX_ATTEMPTS"] = 1  # whatever RETRY_TIMES says, as Scrapy's
    # Unset, DEFAULT_REQUEST_HEADERS is Scrapy's own, which its DefaultHeadersMiddleware sends.
    fields.setdefault("headers", dict(DEFAULTS["DEFAULT_REQUEST_HEADERS"]))
    return Custom(settings, fields, problems)
