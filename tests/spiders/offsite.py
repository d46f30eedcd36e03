"""A spider whose requests go beyond its ``allowed_domains`` (tests/test_spiders.py): dropped,
but for those Scrapy 2.19's ``OffsiteMiddleware`` lets through, ``dont_filter`` ones and
those with ``allow_offsite`` in their meta, and where their redirects lead."""

from __future__ import annotations

from crawlplatform.spiders import Request, Spider


class Offsite(Spider):
    name = "offsite"
    allowed_domains = ["127.0.0.1"]
    first = ""  # -a first=URL, on 127.0.0.1
    other = ""  # -a other=URL, on another host

    def start_requests(self):
        yield Request(self.first)
        yield Request(self.other + "/start", dont_filter=True)  # a start URL elsewhere
        yield Request(self.other + "/start-dropped")

    def parse(self, response):
        yield {"url": response.url}
        if response.url != self.first:
            return
        yield Request(self.other + "/dropped")
        yield Request(self.other + "/allowed", meta={"allow_offsite": True})
        yield Request(self.other + "/again", dont_filter=True)
        yield Request(self.other + "/excluded", dont_filter=True)  # the job's pattern wins
        yield Request(self.other + "/hop", meta={"allow_offsite": True})  # redirects on there
        yield Request(self.other + "/not-allowed", meta={"allow_offsite": False})
