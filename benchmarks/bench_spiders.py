"""The spider the benchmarks crawl with (``CRAWL_SPIDER_MODULES=bench_spiders``, with
``benchmarks/`` on the path): one item per page and every link followed, the spider twin of
the CSS rule ``title=h1``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crawlplatform.spiders import Request, Response, Spider


class Titles(Spider):
    name = "titles"

    def parse(self, response: Response) -> Iterator[dict[str, Any] | Request]:
        yield {"url": response.url, "title": response.css("h1::text").get()}
        yield from response.follow_all(css="a", callback=self.parse)
