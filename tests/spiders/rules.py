"""A CrawlSpider over the generated site (``tests/site.py``) that counts with
``crawler.stats`` in its rules' callbacks and errback, its items counted by the counting
pipeline and every signal by the ``Heard`` extension (``tests/spiders/counting.py``): the
exactly-once test of a CrawlSpider job under SIGKILL (``tests/test_spider_durability.py``)."""

from __future__ import annotations

import time

from crawlplatform.spiders import CrawlSpider, LinkExtractor, Request, Rule


class CrawlRules(CrawlSpider):
    name = "crawl_rules"
    seed = ""  # -a seed=URL
    pause = "0"  # -a pause=SECONDS: a page's callback waits this long after counting
    custom_settings = {"ITEM_PIPELINES": {"tests.spiders.counting.CountingPipeline": 100},
                       "EXTENSIONS": {"tests.spiders.counting.Heard": 500}}  # fmt: skip
    rules = (
        Rule(
            LinkExtractor(allow=r"/p/\d+$"),
            callback="parse_page",
            cb_kwargs={"kind": "page"},
            follow=True,
        ),  # fmt: skip
        Rule(LinkExtractor(allow=r"/p/\d+\?"), callback="parse_page", cb_kwargs={"kind": "query"}),
        Rule(LinkExtractor(allow=r"/missing/"), errback="missed"),
    )

    async def start(self):
        yield Request(self.seed)

    def parse_start_url(self, response):
        return self.parse_page(response, kind="start")

    def parse_page(self, response, kind):
        self.crawler.stats.inc_value(f"rules/{kind}")
        time.sleep(float(self.pause))  # a worker killed now has counted and not committed
        yield {"url": response.url, "depth": response.meta["depth"], "kind": kind}

    def missed(self, failure):
        self.crawler.stats.inc_value("rules/missing")
        yield {"url": failure.request.url, "depth": -1, "kind": "missing"}
