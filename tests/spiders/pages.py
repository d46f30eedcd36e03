"""A spider that does what a crawl does, an item for every page: the chaos suite's
``--spider`` (``python -m tests.chaos --spider``)."""

from __future__ import annotations

from crawlplatform.spiders import Request, Spider


class Pages(Spider):
    name = "pages"
    seed = ""  # -a seed=URL

    def start_requests(self):
        yield Request(self.seed)

    def parse(self, response):
        yield {"url": response.url, "title": response.css("title::text").get()}
        yield from response.follow_all(css="a")
