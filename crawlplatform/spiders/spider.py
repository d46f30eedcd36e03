"""The ``Spider`` base class and ``DropItem``, as in Scrapy.

A spider names itself (``name``), says where it starts (``start_urls``, ``async def start()``
or the older ``start_requests()``) and handles responses in its methods (``parse`` by
default). It is made by ``from_crawler(crawler, **arguments)``, as in Scrapy: arguments given
with ``-a key=value`` or a job's ``spider_args`` are set as attributes before the start
requests are asked for. ``custom_settings`` are the job's settings
(validated as a job's own) plus ``ITEM_PIPELINES``; ``item_schema`` is a JSON Schema every
item must satisfy (items that do not are dropped as ``schema``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any, ClassVar

from crawlplatform.spiders.http import Request
from crawlplatform.spiders.response import Response
from crawlplatform.spiders.settings import Crawler, UpdatedSettings


class DropItem(Exception):
    """Raised by a pipeline's ``process_item``: the item is not stored; the message is the
    reason it is counted under. ``log_level``: Scrapy's, kept on the exception."""

    def __init__(self, message: str = "", log_level: str | None = None) -> None:
        super().__init__(message)
        self.log_level = log_level


class Spider:
    """Base class of every spider."""

    name: ClassVar[str] = ""
    custom_settings: ClassVar[dict[str, Any] | None] = None
    start_urls: list[str]  # [] unless the class or its arguments give them
    allowed_domains: list[str]  # optional: the job's scope when the job sets none
    item_schema: ClassVar[dict | None] = None

    def __init__(self, name: str | None = None, **kwargs: Any) -> None:
        if name is not None:
            self.name = name
        elif not getattr(self, "name", None):
            raise ValueError(f"{type(self).__name__} must have a name")
        self.__dict__.update(kwargs)
        if not hasattr(self, "start_urls"):
            self.start_urls = []

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> Spider:
        """The spider, made with its arguments and given the job's ``crawler``, as Scrapy
        makes it: a spider may override this to connect its methods to ``crawler.signals``."""
        spider = cls(*args, **kwargs)
        spider._set_crawler(crawler)
        return spider

    @classmethod
    def update_settings(cls, settings: UpdatedSettings) -> None:
        """Scrapy's: the spider's ``custom_settings`` put in ``settings`` at the spider's
        priority. A spider may override it to set others too; what it leaves set is what
        the job takes as its ``custom_settings``."""
        settings.setdict(cls.custom_settings or {}, priority="spider")

    @staticmethod
    def close(spider: Spider, reason: str) -> Any:
        """Scrapy's: the spider's ``closed(reason)``, if it has one."""
        closed = getattr(spider, "closed", None)
        return closed(reason) if callable(closed) else None

    def _set_crawler(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.settings = crawler.settings

    @property
    def logger(self) -> logging.LoggerAdapter:
        return logging.LoggerAdapter(logging.getLogger(self.name), {"spider": self.name})

    def log(self, message: Any, level: int = logging.DEBUG, **kw: Any) -> None:
        self.logger.log(level, message, **kw)

    async def start(self) -> AsyncIterator[Any]:
        """The first requests (and items) of the crawl: by default those of
        ``start_requests()``."""
        for found in self.start_requests():
            yield found

    def start_requests(self) -> Iterable[Any]:
        """One request per URL of ``start_urls``, handled by ``parse``."""
        for url in self.start_urls:
            yield Request(url, dont_filter=True)

    def _parse(self, response: Response, **kwargs: Any) -> Any:
        """The callback of a request that names none, as Scrapy's: ``parse``, unless a
        spider class of the kind that crawls by itself (``CrawlSpider``, the feed spiders)
        says otherwise."""
        return self.parse(response, **kwargs)

    def parse(self, response: Response, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.parse callback is not defined")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} at 0x{id(self):0x}>"
