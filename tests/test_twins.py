"""The harness that runs one spider under Scrapy 2.19 and on the platform: a plain spider
written as Scrapy's tutorial writes it gives the same items under both, and one that counts
with ``crawler.stats`` and writes them from a ``spider_closed`` extension gives the same
counts."""

from __future__ import annotations

import json

import pytest

from tests import twins
from tests.site import Site

pytestmark = pytest.mark.django_db(transaction=True)

TUTORIAL = '''
import scrapy


class PagesSpider(scrapy.Spider):
    name = "twin_pages"

    async def start(self):
        yield scrapy.Request(self.seed)

    def parse(self, response):
        yield {"url": response.url, "title": response.css("title::text").get()}
        yield from response.follow_all(css="a[href^='/p/']")
'''


def test_port_changes_only_the_imports():
    ported = twins.port("import scrapy\nfrom scrapy.spiders import CrawlSpider, Rule\n"
                        "x = scrapy.Request\n")  # fmt: skip
    assert ported == ("import crawlplatform.spiders as scrapy\n"
                      "from crawlplatform.spiders import CrawlSpider, Rule\nx = scrapy.Request\n")


def test_a_tutorial_spider_gives_scrapys_items_on_the_platform(worker_env, tmp_path):
    with Site(pages=60) as site:
        args = {"seed": site.url("/p/0")}
        scrapy = twins.under_scrapy(TUTORIAL, tmp_path, args)
        ours = twins.on_platform(TUTORIAL, "twin_pages", worker_env, tmp_path, args)
    assert len(scrapy.items) == 62  # every page, two of them with a query too
    assert twins.same(ours.items) == twins.same(scrapy.items)


STATS = '''
import json

import scrapy
from scrapy import signals
from scrapy.exceptions import DropItem


class CountItems:
    def __init__(self, stats):
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.stats)

    def process_item(self, item):
        self.stats.inc_value("twin/items")
        self.stats.max_value("twin/longest_title", len(item["title"]))
        if item["url"].endswith("/p/3"):
            raise DropItem("not this one")
        return item


class StatsFile:
    """Writes the crawl's stats to the spider's stats_file when it closes."""

    names = ["twin/pages", "twin/items", "twin/longest_title", "twin/scraped_heard",
             "item_scraped_count", "item_dropped_count"]

    def __init__(self, stats):
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler):
        ext = cls(crawler.stats)
        crawler.signals.connect(ext.item_scraped, signal=signals.item_scraped)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def item_scraped(self, item, spider):
        self.stats.inc_value("twin/scraped_heard")

    def spider_closed(self, spider, reason):
        found = {name: self.stats.get_value(name) for name in self.names}
        with open(spider.stats_file, "w") as out:
            json.dump({"reason": reason, **found}, out, sort_keys=True)


class CountingSpider(scrapy.Spider):
    name = "twin_stats"
    custom_settings = {"ITEM_PIPELINES": {f"{__name__}.CountItems": 300},
                       "EXTENSIONS": {f"{__name__}.StatsFile": 500}}

    async def start(self):
        yield scrapy.Request(self.seed)

    def parse(self, response):
        self.crawler.stats.inc_value("twin/pages")
        yield {"url": response.url, "title": response.css("title::text").get()}
        yield from response.follow_all(css="a[href^='/p/']")
'''


def test_a_spider_counting_with_stats_and_writing_them_when_it_closes_gives_scrapys_counts(
    worker_env, tmp_path
):
    with Site(pages=60) as site:
        runs = {}
        for side in ("scrapy", "platform"):
            args = {"seed": site.url("/p/0"), "stats_file": str(tmp_path / f"{side}.json")}
            runs[side] = (twins.under_scrapy(STATS, tmp_path, args) if side == "scrapy" else
                          twins.on_platform(STATS, "twin_stats", worker_env, tmp_path, args))
    written = {side: json.loads((tmp_path / f"{side}.json").read_text()) for side in runs}
    assert written["scrapy"] == {"reason": "finished", "twin/pages": 62, "twin/items": 62,
                                 "twin/longest_title": 7, "twin/scraped_heard": 61,
                                 "item_scraped_count": 61, "item_dropped_count": 1}
    assert written["platform"] == written["scrapy"]
    assert twins.same(runs["platform"].items) == twins.same(runs["scrapy"].items)
