"""A spider that logs and prints from its callbacks (on the spider's callback thread) and
fails on one page, installed alone (``CRAWL_SPIDER_MODULES=tests.logged_spider``): the log
tests find its lines, and its error, under its job."""

from __future__ import annotations

from crawlplatform.spiders import Request, Spider


class Logged(Spider):
    name = "logged"
    seed = ""  # -a seed=URL
    fails = "/p/2"  # -a fails=PATH: the page whose callback raises

    def start_requests(self):
        yield Request(self.seed)

    def parse(self, response):
        self.logger.info("parsing %s", response.url)
        print("printed on", response.url)  # what a spider prints is a line too, one a print
        if response.url.endswith(self.fails):
            raise ValueError("a spider's own error")
        yield {"url": response.url}
        yield from response.follow_all(css="a")
