"""A spider whose callback stops, once, right after yielding a page's item: the durability
test kills its worker there (``tests/test_spider_durability.py``)."""

from __future__ import annotations

import time
from pathlib import Path

from crawlplatform.spiders import Spider


class Stall(Spider):
    name = "stall"
    marker = ""  # -a marker=PATH: created when the callback stops

    def parse(self, response):
        yield {"url": response.url}
        if self.marker and response.url.endswith("/p/5"):
            marker = Path(self.marker)
            if not marker.exists():
                marker.touch()
                time.sleep(60)  # the worker is killed here
        yield from response.follow_all(css="a")
