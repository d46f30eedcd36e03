"""A spider that counts with ``crawler.stats`` in its callback and in a pipeline, and an
extension that hears every signal the platform sends and counts them too: the stats and
signals tests (``tests/test_spider_stats.py``) and the exactly-once test under SIGKILL
(``tests/test_spider_durability.py``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import ClassVar

from crawlplatform.spiders import DropItem, IgnoreRequest, Request, Spider, signals


class CountingPipeline:
    """Counts each item it sees; drops the items of ``/p/3``."""

    def __init__(self, stats) -> None:
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.stats)

    def process_item(self, item):
        self.stats.inc_value("counting/items")
        self.stats.max_value("counting/depth_max", item["depth"])
        self.stats.min_value("counting/depth_min", item["depth"])
        if item["url"].endswith("/p/3"):
            raise DropItem("odd page")
        if item["url"].endswith("/p/4") and item.get("break"):
            raise RuntimeError("the pipeline breaks")
        return item


class Heard:
    """Hears every signal the platform sends with Scrapy's arguments (each receiver takes
    exactly what Scrapy passes), keeps what it heard in this process (``calls``) and counts
    it in the job's stats (``heard/SIGNAL``); ``-a raising=1``: its item_scraped raises;
    ``-a ignore=PATH``: its request_scheduled drops requests to PATH; ``-a stats_file=PATH``:
    spider_closed writes the job's stats there."""

    calls: ClassVar[list[tuple[str, dict]]] = []

    def __init__(self, crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler):
        ext = cls(crawler)
        for signal in signals.SENT:
            crawler.signals.connect(getattr(ext, signal.name), signal=signal)
        return ext

    def _heard(self, name: str, **kwargs) -> None:
        self.calls.append((name, kwargs))
        self.stats.inc_value(f"heard/{name}")

    def spider_opened(self, spider):
        self._heard("spider_opened", spider=spider)

    def spider_closed(self, spider, reason):
        self._heard("spider_closed", spider=spider, reason=reason)
        self.stats.set_value("heard/closed_reason", reason)
        if getattr(spider, "stats_file", ""):
            Path(spider.stats_file).write_text(json.dumps(self.stats.get_stats(), default=str))

    def item_scraped(self, item, response, spider):
        self._heard("item_scraped", item=item, response=response, spider=spider)
        if getattr(spider, "raising", ""):
            raise ValueError("a receiver that fails")

    def item_dropped(self, item, response, exception, spider):
        self._heard("item_dropped", item=item, response=response, exception=exception,
                    spider=spider)  # fmt: skip

    def item_error(self, item, response, spider, failure):
        self._heard("item_error", item=item, response=response, spider=spider, failure=failure)

    def request_scheduled(self, request, spider):
        self._heard("request_scheduled", request=request, spider=spider)
        if getattr(spider, "ignore", "") and request.url.endswith(spider.ignore):
            raise IgnoreRequest("not that one")

    def response_received(self, response, request, spider):
        self._heard("response_received", response=response, request=request, spider=spider)


class Counting(Spider):
    name = "counting"
    seed = ""  # -a seed=URL
    custom_settings = {"ITEM_PIPELINES": {"tests.spiders.counting.CountingPipeline": 100},
                       "EXTENSIONS": {"tests.spiders.counting.Heard": 500}}  # fmt: skip

    def start_requests(self):
        yield Request(self.seed)

    pause = "0"  # -a pause=SECONDS: the callback waits this long after counting

    def parse(self, response):
        self.crawler.stats.inc_value("counting/pages")
        links = response.css("a[href^='/p/']")
        self.crawler.stats.inc_value("counting/requests", len(links))
        time.sleep(float(self.pause))  # a worker killed now has counted and not committed
        yield {"url": response.url, "depth": response.meta["depth"],
               "break": bool(getattr(self, "break_pipeline", ""))}  # fmt: skip
        yield from response.follow_all(css="a[href^='/p/']")


class Deaf(Spider):
    """Its extension connects to a signal the platform never sends."""

    name = "deaf"
    custom_settings = {"EXTENSIONS": {"tests.spiders.counting.Idle": 500}}

    def start_requests(self):
        yield Request("http://127.0.0.1:9/")


class Idle:
    @classmethod
    def from_crawler(cls, crawler):
        crawler.signals.connect(cls.idle, signal=signals.spider_idle)
        return cls()

    @staticmethod
    def idle(spider):
        pass


class Flaky(Spider):
    """Each page's callback counts, then raises the first time this process runs it: its
    request asks to be retried (``retry_on_error``), and the retry counts again."""

    name = "flaky"
    seed = ""  # -a seed=URL
    failed: ClassVar[set[str]] = set()  # the URLs whose callback raised in this process

    def start_requests(self):
        yield Request(self.seed, meta={"retry_on_error": True})

    def parse(self, response):
        self.crawler.stats.inc_value("flaky/calls")
        if response.url not in self.failed:
            self.failed.add(response.url)
            raise RuntimeError("not this time")
        yield {"url": response.url}
        yield from response.follow_all(css="a[href^='/p/']", meta={"retry_on_error": True})


class HalfDone(Spider):
    """A callback and an errback that yield, then raise: what they yielded before is kept, as
    Scrapy keeps what a generator yielded before its exception (its items through the
    pipelines, its requests followed). The page's URL ends as ``spider_error``; the errback's
    keeps its own outcome."""

    name = "half_done"
    seed = ""  # -a seed=URL: a site's /p/0, whose /missing/0 answers 404

    def start_requests(self):
        yield Request(self.seed)
        yield Request(self.seed.replace("/p/0", "/missing/0"), errback=self.missed)

    def parse(self, response):
        yield {"url": response.url, "part": "first"}
        yield response.follow("/p/1", callback=self.last)
        raise RuntimeError("half done")

    def last(self, response):
        yield {"url": response.url, "part": "last"}

    def missed(self, failure):
        yield {"url": failure.request.url, "part": "missed"}
        raise ValueError("an errback that fails")
