"""A spider for a site whose links redirect (tests/test_spiders.py): an item for every page
it is called back with, each saying whether a ``dont_filter`` request or which callback
brought it."""

from __future__ import annotations

from crawlplatform.spiders import Request, Spider


class Redirects(Spider):
    name = "redirects"
    base = ""  # -a base=URL

    def start_requests(self):
        yield Request(self.base + "/")
        yield Request(self.base + "/r/e", dont_filter=True, cb_kwargs={"again": True})

    def parse(self, response, again=False):
        yield {"url": response.url, "again": again}
        yield from response.follow_all(css="a")
        yield response.follow("/r/g", callback=self.parse_other)

    def parse_other(self, response):
        yield {"url": response.url, "other": True}
