"""A spider job's feeds: its items written as Scrapy 2.19's ``FEEDS`` write them, from the
item table, when the job's run finishes (``tasks/frontier/spiderjobs.py``) and on demand
(``manage.py export JOB --feeds``, ``--items -o URI``).

Reads ``FEEDS``, ``FEED_EXPORT_ENCODING``, ``FEED_EXPORT_FIELDS``, ``FEED_EXPORT_INDENT``,
``FEED_STORE_EMPTY`` and ``FEED_EXPORT_BATCH_ITEM_COUNT``: the operator's
(``tasks/defaults.py``), under the spider's ``custom_settings`` of the same names (a spider's
``FEEDS`` replaces the operator's, as in Scrapy), with Scrapy's ``FEED_URI`` and
``FEED_FORMAT`` and the storages' ``FEED_STORAGE_S3_ACL`` and ``AWS_*``
(``feedstorage.py``). A job cannot set them: what a feed writes where is the operator's
and the installed spider's.

Each feed is ``{URI: options}`` as Scrapy's: formats ``jsonlines`` (``jsonl``, ``jl``),
``json``, ``csv`` and ``xml`` (``exporters.py``; the format is the URI's extension unless
``format`` says it), ``encoding``, ``fields``, ``indent``, ``overwrite``, ``store_empty``,
``item_export_kwargs``, ``batch_item_count`` (a file per so many items, its URI naming
``%(batch_id)d`` or ``%(batch_time)s``) and ``postprocessing`` with Scrapy's gzip, bz2 and lzma
plugins. The URI's ``%(name)s`` are Scrapy's URI parameters: the spider's attributes (its
``name``, its arguments), ``%(time)s`` (when the run started, UTC, ``:`` as ``-``),
``%(batch_time)s`` and ``%(batch_id)d``; a value from a spider attribute may not hold ``/`` or
``\\`` or be ``..`` (a job's arguments choose no other directory). What the platform cannot
honour fails the job at its start with the reason (``problems``): other storages (``ftp``,
``gs``, ``stdout``), other formats, ``item_filter``, ``item_classes``, ``uri_params``,
``FEED_URI_PARAMS``, ``FEED_EXPORTERS``, ``FEED_STORAGES``, plugins of the spider's own.

The items are the run's kept ones, in the order they were stored. A feed that cannot be
written (a bad path, S3 refusing) is reported in what ``write`` returns and logged; the items
stay in the table for ``export`` to write again.
"""

from __future__ import annotations

import datetime
import io
import json
import logging
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from crawlplatform.spiders import Spider, scrapysettings
from tasks.content import exporters, feedstorage
from tasks.defaults import setting
from web.models import CrawlJob, Item

log = logging.getLogger(__name__)

# Scrapy settings read here from a spider's custom_settings (those the platform has no use
# for, as it writes no ftp:// or gs:// feed, are accepted and left alone).
SETTINGS = frozenset({
    "FEEDS", "FEED_URI", "FEED_FORMAT", "FEED_EXPORT_ENCODING", "FEED_EXPORT_FIELDS",
    "FEED_EXPORT_INDENT", "FEED_STORE_EMPTY", "FEED_EXPORT_BATCH_ITEM_COUNT",
    "FEED_STORAGE_S3_ACL", "FEED_TEMPDIR", "FEED_STORAGE_FTP_ACTIVE", "FEED_STORAGE_GCS_ACL",
    "FEED_URI_PARAMS", "FEED_EXPORTERS", "FEED_STORAGES", "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION_NAME",
})  # fmt: skip
_OPERATORS = ("FEEDS", "FEED_EXPORT_ENCODING", "FEED_EXPORT_FIELDS", "FEED_EXPORT_INDENT",
              "FEED_STORE_EMPTY", "FEED_EXPORT_BATCH_ITEM_COUNT")  # fmt: skip
_CODE = "code the platform does not run: only operators install code, as spiders"
# Feed settings that fail a job when set (why: crawlplatform/spiders/scrapysettings.py)
_REFUSED_SETTINGS = ("FEED_URI_PARAMS", "FEED_EXPORTERS", "FEED_STORAGES")
_REFUSED_OPTIONS = {
    "item_filter": "items are written from the item table, where their classes are not kept",
    "item_classes": "items are written from the item table, where their classes are not kept",
    "uri_params": f"a function of URI parameters is {_CODE}",
}
_STORAGES = {
    "stdout": "the platform's feeds are written by the process that ends the job, which has "
              "no standard output of the spider's: use manage.py export JOB --items -o -",
    "ftp": "ftp:// feeds are not written: use a path or an s3:// URI",
    "ftps": "ftps:// feeds are not written: use a path or an s3:// URI",
    "gs": "gs:// feeds are not written: use a path or an s3:// URI",
}  # fmt: skip
_BATCH = re.compile(r"%\(batch_time\)s|%\(batch_id\)")
# Scrapy's placeholders; any other % in a URI (%20) is a literal
_PLACEHOLDER = re.compile(r"%\([^)]+\)[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?[diouxXeEfFgGcrsa]")


class FeedProblem(ValueError):
    """A feed the platform cannot write as configured (the text says why)."""


class Feed(NamedTuple):
    template: str  # the URI as configured, its %(...)s not yet filled
    options: dict  # Scrapy's feed options, completed from the settings


def settings_of(spider: Spider) -> dict[str, Any]:
    """The feed settings in force for ``spider``: its ``custom_settings`` over the
    operator's."""
    found: dict[str, Any] = {name: setting(name) for name in _OPERATORS}
    found["FEED_EXPORT_ENCODING"] = found["FEED_EXPORT_ENCODING"] or None
    try:
        found["FEEDS"] = json.loads(found["FEEDS"]) if found["FEEDS"].strip() else {}
    except ValueError as exc:
        raise FeedProblem(f"FEEDS (the operator's CRAWL_FEEDS) is not JSON: {exc}") from None
    custom = type(spider).custom_settings or {}
    found.update({name: value for name, value in custom.items() if name in SETTINGS})
    return found


def _dict_or_list(value: Any) -> dict | list | None:
    """Scrapy's ``getdictorlist``: JSON text, or names separated by commas."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value.split(",")
    if isinstance(value, dict | list | tuple):
        return dict(value) if isinstance(value, dict) else list(value)
    raise FeedProblem(f"FEED_EXPORT_FIELDS: {value!r} is no list or dict of field names")


def _complete(options: dict, settings: dict, uri: str) -> dict:
    """Scrapy's ``feed_complete_default_values_from_settings``."""
    out = dict(options)
    out.setdefault("format", Path(uri).suffix.removeprefix("."))
    out.setdefault("batch_item_count", int(settings.get("FEED_EXPORT_BATCH_ITEM_COUNT") or 0))
    out.setdefault("encoding", settings.get("FEED_EXPORT_ENCODING"))
    out.setdefault("fields", _dict_or_list(settings.get("FEED_EXPORT_FIELDS")) or None)
    out.setdefault("store_empty", _boolean(settings.get("FEED_STORE_EMPTY", True)))
    out.setdefault("uri_params", settings.get("FEED_URI_PARAMS"))
    out.setdefault("item_export_kwargs", {})
    indent = settings.get("FEED_EXPORT_INDENT", 0)
    out.setdefault("indent", None if indent is None else int(indent))
    return out


def _boolean(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def configured(spider: Spider) -> list[Feed]:
    """The feeds of ``spider``'s jobs, each checked; FeedProblem says what cannot be written,
    every problem at once."""
    settings = settings_of(spider)
    found: list[str] = [f"{name}: {why}" for name in _REFUSED_SETTINGS
                        if (why := scrapysettings.refusal(name, settings.get(name)))]  # fmt: skip
    feeds: dict[str, dict] = {}
    if settings.get("FEED_URI"):  # Scrapy's older way, under FEEDS
        uri = str(settings["FEED_URI"])
        feeds[uri] = {"format": settings.get("FEED_FORMAT") or "jsonlines"}
    given = settings.get("FEEDS") or {}
    if not isinstance(given, Mapping):
        raise FeedProblem(f"FEEDS must be a dict of URI: options, not {type(given).__name__}")
    for uri, options in given.items():
        feeds[str(uri.absolute()) if isinstance(uri, Path) else str(uri)] = options
    out = []
    for uri, options in feeds.items():
        if not isinstance(options, Mapping):
            found.append(f"FEEDS {uri}: its options must be a dict")
            continue
        try:
            feed = Feed(uri, _complete(dict(options), settings, uri))
        except (TypeError, ValueError) as exc:
            found.append(f"FEEDS {uri}: {exc}")
            continue
        found.extend(f"FEEDS {feedstorage.shown(uri)}: {why}" for why in _feed_problems(feed))
        out.append(feed)
    if found:
        raise FeedProblem("; ".join(found))
    return out


def _feed_problems(feed: Feed) -> list[str]:
    uri, options = feed
    found = [f"{name}: {why}" for name, why in _REFUSED_OPTIONS.items() if options.get(name)]
    where = feedstorage.kind(uri)
    if where in _STORAGES:
        found.append(_STORAGES[where])
    elif where not in ("file", "s3"):
        found.append(f"{where}:// is no feed storage (a path, file:// or s3://)")
    fmt = options["format"]
    if fmt not in exporters.EXPORTERS:
        found.append(f"format {fmt!r} is not one the platform writes (jsonlines, jsonl, jl, "
                     "json, csv, xml)" if fmt else "the format is not set and the URI has no "
                     "extension to tell it: set it with the 'format' key")  # fmt: skip
    elif (problem := _exporter_problem(options)) is not None:
        found.append(problem)
    if options["batch_item_count"] and not _BATCH.search(uri):
        found.append("with batch_item_count, the URI must name %(batch_time)s or "
                     "%(batch_id)d, so that each batch has a file of its own")  # fmt: skip
    for plugin in options.get("postprocessing") or []:
        if feedstorage.plugin_name(plugin) is None:
            found.append(f"postprocessing {plugin!r}: the platform applies Scrapy's own "
                         f"plugins, named by their paths ({feedstorage.SCRAPY_PLUGINS}"
                         "GzipPlugin, Bz2Plugin, LZMAPlugin); one of the spider's own is "
                         f"{_CODE}")  # fmt: skip
    return found


def _exporter_problem(options: dict) -> str | None:
    """Why the format's exporter refuses the feed's options (an unknown encoding, an option
    json.JSONEncoder or csv.writer does not take), as Scrapy's would when the feed opens."""
    try:
        exporter(options, io.BytesIO())
    except (TypeError, ValueError, LookupError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def exporter(options: dict, file: Any) -> exporters.BaseExporter:
    """The feed's exporter, writing to ``file``."""
    cls = exporters.EXPORTERS[options["format"]]
    return cls(file, fields_to_export=options["fields"], encoding=options["encoding"],
               indent=options["indent"], **dict(options["item_export_kwargs"]))  # fmt: skip


class _Params(Mapping):
    """Scrapy's URI parameters, looked up as the URI names them: the spider's attributes,
    ``time``, ``batch_time`` and ``batch_id``."""

    def __init__(self, spider: Spider, started: datetime.datetime, batch_id: int,
                 batch_time: datetime.datetime) -> None:  # fmt: skip
        started, batch_time = started.astimezone(datetime.UTC), batch_time.astimezone(datetime.UTC)
        self.spider = spider
        self.own = {"time": started.replace(microsecond=0).isoformat().replace(":", "-"),
                    "batch_time": batch_time.isoformat().replace(":", "-"),
                    "batch_id": batch_id}  # fmt: skip

    def __getitem__(self, name: str) -> Any:
        if name in self.own:
            return self.own[name]
        try:
            value = getattr(self.spider, name)
        except AttributeError:
            raise FeedProblem(f"%({name})s: the spider has no attribute {name!r}") from None
        text = str(value)
        if "/" in text or "\\" in text or text in (".", ".."):
            raise FeedProblem(f"%({name})s: the spider's {name!r} is {text[:100]!r}, which "
                              "would choose another directory")  # fmt: skip
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self.own)

    def __len__(self) -> int:
        return len(self.own)


def uri_for(template: str, spider: Spider, started: datetime.datetime, batch_id: int = 1,
            batch_time: datetime.datetime | None = None) -> str:  # fmt: skip
    """Scrapy's ``apply_uri_params``: ``template``'s placeholders filled, other ``%`` kept;
    FeedProblem if one cannot be."""
    parts, last = [], 0
    for match in _PLACEHOLDER.finditer(template):
        parts.append(template[last:match.start()].replace("%", "%%"))
        parts.append(match.group(0))
        last = match.end()
    parts.append(template[last:].replace("%", "%%"))
    params = _Params(spider, started, batch_id, batch_time or started)
    try:
        return "".join(parts) % params
    except (TypeError, ValueError) as exc:
        raise FeedProblem(f"{template}: {exc}") from None


def problems(spider: Spider) -> list[str]:
    """Why ``spider``'s jobs cannot have their feeds written (checked at a job's start, with
    its spider as ``start()`` left it)."""
    try:
        feeds = configured(spider)
        now = datetime.datetime.now(datetime.UTC)
        for feed in feeds:
            uri_for(feed.template, spider, now)
    except FeedProblem as exc:
        return [str(exc)]
    return []


def _rows(job: CrawlJob, all_runs: bool) -> Iterator[exporters.Stored]:
    """The job's kept items (its last run's, unless ``all_runs``), in the order they were
    stored, from a server-side cursor."""
    kept = Item.objects.filter(job_id=job.pk, dropped="")
    if not all_runs:
        kept = kept.filter(run=job.run)
    for data, fields in kept.order_by("id").values_list("data", "fields").iterator(2000):
        yield exporters.Stored.of(data, fields)


def write(job: CrawlJob, spider: Spider) -> list[dict]:
    """Every feed of ``job``'s run, from its items; what each file written holds (its URI,
    format, items, and the error if it could not be written)."""
    try:
        feeds = configured(spider)
    except FeedProblem as exc:
        log.error("job=%s: feeds not written: %s", job.pk, exc)
        return [{"error": str(exc)[:2000]}]
    return [done for feed in feeds for done in write_feed(job, spider, feed)]


def write_feed(job: CrawlJob, spider: Spider, feed: Feed, all_runs: bool = False) -> list[dict]:
    """One feed of ``job``: a file, or one per batch of ``batch_item_count`` items."""
    started = job.started_at or datetime.datetime.now(datetime.UTC)
    size = feed.options["batch_item_count"]
    rows = _rows(job, all_runs)
    pending = next(rows, None)
    if pending is None:
        if not feed.options["store_empty"]:
            return []
        return [_store(job, spider, feed, _uri(feed, spider, started, 1), iter(()))]

    def batch() -> Iterator[exporters.Stored]:
        nonlocal pending
        count = 0
        while pending is not None and (not size or count < size):
            yield pending
            count += 1
            pending = next(rows, None)

    written, batch_id = [], 1
    while pending is not None:
        written.append(_store(job, spider, feed, _uri(feed, spider, started, batch_id), batch()))
        batch_id += 1
    return written


def _uri(feed: Feed, spider: Spider, started: datetime.datetime, batch_id: int) -> str | Exception:
    try:
        when = started if batch_id == 1 else datetime.datetime.now(datetime.UTC)
        return uri_for(feed.template, spider, started, batch_id, when)
    except FeedProblem as exc:
        return exc


def _store(job: CrawlJob, spider: Spider, feed: Feed, uri: str | Exception,
           items: Iterator[exporters.Stored]) -> dict:  # fmt: skip
    """Write ``items`` to ``uri`` (an exception: why there is no URI); what it holds."""
    fmt = feed.options["format"]
    shown = feedstorage.shown(feed.template if isinstance(uri, Exception) else uri)
    done: dict[str, Any] = {"uri": shown, "format": fmt, "items": 0}
    try:
        if isinstance(uri, Exception):
            raise uri
        if feedstorage.kind(uri) == "s3" and feed.options.get("overwrite", True) is False:
            log.warning("job=%s: S3 does not support appending to files: %s is replaced",
                        job.pk, shown)  # fmt: skip
        with feedstorage.opened(uri, feed.options, settings_of(spider)) as out:
            done["items"], left_out = export(feed.options, items, out, f"job={job.pk} {shown}")
    except Exception as exc:  # a path, a bucket, a refusal: reported, the items stay
        for _ in items:  # the rest of the batch, passed over
            pass
        log.error("job=%s: %s feed (%d items) not stored in %s", job.pk, fmt, done["items"],
                  shown, exc_info=True)  # fmt: skip
        done["error"] = f"{type(exc).__name__}: {exc}"[:1000]
        return done
    if left_out:
        done["items_left_out"] = left_out
    log.info("job=%s: stored %s feed (%d items) in: %s", job.pk, fmt, done["items"], shown)
    return done


def export(options: dict, items: Iterator[exporters.Stored], out: Any,
           what: str) -> tuple[int, int]:  # fmt: skip
    """``items`` written to ``out`` as the feed's exporter writes them; how many were written
    and how many left out (an item the feed's encoding cannot hold: logged and left out, as
    Scrapy logs the error and goes on)."""
    writer = exporter(options, out)
    writer.start_exporting()
    written = left_out = 0
    for item in items:
        try:
            writer.export_item(item)
        except (ValueError, TypeError) as exc:
            left_out += 1
            log.error("%s: an item left out of the %s feed: %s", what, options["format"], exc)
            continue
        written += 1
    writer.finish_exporting()
    return written, left_out


def on_demand(spider: Spider, uri: str, fmt: str) -> Feed:
    """The feed ``manage.py export JOB --items -o URI`` writes, as Scrapy's ``-O URI``: the
    spider's feed settings, the file replaced (a ``.gz`` name compressed); FeedProblem if it
    cannot be written."""
    options: dict[str, Any] = {"format": fmt, "overwrite": True}
    if uri.endswith(".gz"):
        options.update(postprocessing=[feedstorage.SCRAPY_PLUGINS + "GzipPlugin"], gzip_mtime=0)
    feed = Feed(uri, _complete(options, settings_of(spider), uri))
    if found := _feed_problems(feed):
        raise FeedProblem("; ".join(found))
    return feed


def every_item(job: CrawlJob) -> Iterator[exporters.Stored]:
    """The job's kept items of every run (what ``export --items`` writes)."""
    return _rows(job, all_runs=True)
