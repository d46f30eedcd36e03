"""Scrapy's signals, by Scrapy's names: ``from crawlplatform.spiders import signals``, then
``crawler.signals.connect(receiver, signal=signals.spider_closed)``.

The platform sends the signals in ``SENT``, with Scrapy's keyword arguments, in the worker
process that does the work (``docs/spiders.md``, Signals). The others are importable, so that
a ported module imports, but connecting to one raises ``NotSupported`` with ``NOT_SENT``'s
sentence: the pipeline or extension that does it fails its job at start, saying why.
"""

from __future__ import annotations


class Signal:
    """A signal: compared by identity, as Scrapy's ``object()`` signals are; named for the
    log and for what people are told."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<signal {self.name}>"


engine_started = Signal("engine_started")
engine_stopped = Signal("engine_stopped")
scheduler_empty = Signal("scheduler_empty")
spider_opened = Signal("spider_opened")
spider_idle = Signal("spider_idle")
spider_closed = Signal("spider_closed")
spider_error = Signal("spider_error")
memusage_warning_reached = Signal("memusage_warning_reached")
request_scheduled = Signal("request_scheduled")
request_dropped = Signal("request_dropped")
request_reached_downloader = Signal("request_reached_downloader")
request_left_downloader = Signal("request_left_downloader")
response_received = Signal("response_received")
response_downloaded = Signal("response_downloaded")
headers_received = Signal("headers_received")
bytes_received = Signal("bytes_received")
robots_parsed = Signal("robots_parsed")
item_scraped = Signal("item_scraped")
item_dropped = Signal("item_dropped")
item_error = Signal("item_error")
feed_slot_closed = Signal("feed_slot_closed")
feed_exporter_closed = Signal("feed_exporter_closed")

SENT = frozenset({spider_opened, spider_closed, item_scraped, item_dropped, item_error,
                  request_scheduled, response_received})  # fmt: skip

_ENGINE = ("a worker has no engine of one crawl: its processes serve every job, and the "
           "platform starts and stops them")  # fmt: skip
_TRANSPORT = ("requests are fetched by the platform's transport (address guard, politeness, "
              "identities), which runs no user code")  # fmt: skip
_FEEDS = "feeds are written by the platform from the job's stored items, not by a worker"
NOT_SENT: dict[Signal, str] = {
    engine_started: _ENGINE,
    engine_stopped: _ENGINE,
    scheduler_empty: "the frontier is one for every worker, kept in the database: no worker's "
    "scheduler runs empty",
    spider_idle: "a job ends when the database has no URL left to fetch, decided by the "
    "platform, not in a worker, so no handler can keep it open (DontCloseSpider)",
    spider_error: "a callback that raises ends its URL as spider_error (the traceback on the "
    "URL and in the log), and nothing done for that page is kept",
    memusage_warning_reached: "worker memory is the platform's to watch (metrics, probes)",
    request_dropped: "a duplicate request is dropped in its page's commit (the frontier's "
    "unique index), not by a scheduler in the worker",
    request_reached_downloader: _TRANSPORT,
    request_left_downloader: _TRANSPORT,
    response_downloaded: _TRANSPORT,
    headers_received: _TRANSPORT,
    bytes_received: _TRANSPORT,
    robots_parsed: "robots.txt is fetched and parsed by the platform, once for every worker",
    feed_slot_closed: _FEEDS,
    feed_exporter_closed: _FEEDS,
}
