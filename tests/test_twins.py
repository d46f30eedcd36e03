"""The harness that runs one spider under Scrapy 2.19 and on the platform: a plain spider
written as Scrapy's tutorial writes it gives the same items under both."""

from __future__ import annotations

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
