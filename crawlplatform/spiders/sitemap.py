"""``SitemapSpider``, as Scrapy 2.19's: it crawls what sitemaps list.

``sitemap_urls`` are sitemaps, sitemap indexes or robots.txt files (whose ``Sitemap:`` lines
are followed); ``sitemap_rules`` send each listed URL to the callback of the first pattern it
matches (a method or its name; a URL none matches is left out); ``sitemap_follow`` says which
sitemaps of an index are followed; ``sitemap_alternate_links`` follows a URL's
``<xhtml:link rel="alternate">`` too; ``sitemap_filter(entries)`` may drop entries by their
fields (``lastmod``, ...). A gzip sitemap (gzip data, whatever its headers) is gunzipped
within a cap; one past it is skipped with a warning, as any body that is no sitemap is.

Reads the spider's ``settings``: ``DOWNLOAD_MAXSIZE`` (the job's ``FETCH_MAX_BYTES``: the cap,
which a spider's ``download_maxsize`` attribute or a request's ``meta`` may lower, never
raise) and ``DOWNLOAD_WARNSIZE`` (a larger gunzipped sitemap is logged; 32 MiB, Scrapy's
default, unless the spider's ``custom_settings``, ``download_warnsize`` attribute or request
``meta`` say otherwise).
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from crawlplatform.spiders.http import Callback, Request
from crawlplatform.spiders.response import Response, XmlResponse
from crawlplatform.spiders.spider import Spider
from crawlplatform.spiders.utils import (
    DecompressionMaxSizeExceeded,
    Sitemap,
    gunzip,
    gzip_magic_number,
    sitemap_urls_from_robots,
)

logger = logging.getLogger(__name__)

_WARN_SIZE = 32 << 20  # Scrapy's DOWNLOAD_WARNSIZE: a larger gunzipped sitemap is logged


class SitemapSpider(Spider):
    """A spider that starts from sitemaps and robots.txt files and calls back what they list."""

    sitemap_urls: Sequence[str] = ()
    sitemap_rules: Sequence[tuple[re.Pattern[str] | str, Callback]] = [("", "parse")]
    sitemap_follow: Sequence[re.Pattern[str] | str] = [""]
    sitemap_alternate_links: bool = False

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self._cbs: list[tuple[re.Pattern[str], Callback]] = []
        for r, c in self.sitemap_rules:
            self._cbs.append((regex(r), getattr(self, c) if isinstance(c, str) else c))
        self._follow = [regex(x) for x in self.sitemap_follow]

    async def start(self) -> AsyncIterator[Any]:
        for url in self.sitemap_urls:
            yield Request(url, self._parse_sitemap)

    def sitemap_filter(self, entries: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
        """The entries of a sitemap to follow: all of them, unless a spider says otherwise
        (those with a recent ``lastmod``, say)."""
        yield from entries

    def _parse_sitemap(self, response: Response) -> Iterable[Request]:
        if response.url.endswith("/robots.txt"):
            urls = list(sitemap_urls_from_robots(response.body, base_url=response.url))
            return (Request(url, callback=self._parse_sitemap) for url in urls)
        body = self._get_sitemap_body(response)
        if not body:
            logger.warning("Ignoring invalid sitemap: %(response)s", {"response": response},
                           extra={"spider": self})  # fmt: skip
            return ()
        s = Sitemap(body)
        if s.type == "sitemapindex":
            urls = list(self._get_urls_from_sitemapindex(self.sitemap_filter(s)))
            return (Request(loc, callback=self._parse_sitemap) for loc in urls)
        if s.type == "urlset":
            pairs = list(self._get_urls_and_callbacks_from_urlset(self.sitemap_filter(s)))
            return (Request(loc, callback=c) for loc, c in pairs)
        logger.warning("Ignoring invalid sitemap: %(response)s", {"response": response},
                       extra={"spider": self})  # fmt: skip
        return ()

    def _get_urls_from_sitemapindex(self, it: Iterable[dict[str, Any]]) -> Iterable[str]:
        for loc in iterloc(it, self.sitemap_alternate_links):
            if any(x.search(loc) for x in self._follow):
                yield loc

    def _get_urls_and_callbacks_from_urlset(
        self, it: Iterable[dict[str, Any]]
    ) -> Iterable[tuple[str, Callback]]:
        for loc in iterloc(it, self.sitemap_alternate_links):
            for r, c in self._cbs:
                if r.search(loc):
                    yield loc, c
                    break

    def _get_sitemap_body(self, response: Response) -> bytes | None:
        """The sitemap in the response (gunzipped if it is gzip data), or None if it holds
        none, or one that gunzips past the cap."""
        if isinstance(response, XmlResponse):
            return response.body
        if gzip_magic_number(response):
            uncompressed_size = len(response.body)
            asked = getattr(self, "download_maxsize", 0)
            max_size = self._cap(response.meta.get("download_maxsize", asked))
            warn_size = response.meta.get("download_warnsize", self._warn_size)
            try:
                body = gunzip(response.body, max_size=max_size)
            except DecompressionMaxSizeExceeded:
                return None
            if uncompressed_size < warn_size <= len(body):
                logger.warning(f"{response} body size after decompression ({len(body)} B) "
                               f"is larger than the download warning size ({warn_size} B).")
            return body
        # A body that is no gzip data for a .xml.gz URL was sent with Content-Encoding: gzip
        # (plain XML compressed on the way), which the fetch has undone.
        if response.url.endswith((".xml", ".xml.gz")):
            return response.body
        return None

    def _cap(self, asked: int) -> int:
        """What a gzip sitemap may gunzip to: the job's ``FETCH_MAX_BYTES``, or less if the
        spider or the request asks for less (Scrapy's 0, no cap, is the job's)."""
        settings = getattr(self, "settings", None)
        job = settings.getint("DOWNLOAD_MAXSIZE") if settings is not None else 0
        return min(asked, job) if asked and job else asked or job

    @property
    def _warn_size(self) -> int:
        settings = getattr(self, "settings", None)
        default = (settings.getint("DOWNLOAD_WARNSIZE", _WARN_SIZE) if settings is not None
                   else _WARN_SIZE)
        return getattr(self, "download_warnsize", default)


def regex(x: re.Pattern[str] | str) -> re.Pattern[str]:
    return re.compile(x) if isinstance(x, str) else x


def iterloc(it: Iterable[dict[str, Any]], alt: bool = False) -> Iterable[str]:
    """The ``loc`` of each entry that has one, followed by its alternates if ``alt``."""
    for d in it:
        if loc := d["loc"]:
            yield loc
        if alt and (alt_list := d.get("alternate")):
            yield from alt_list
