"""Sitemaps (urlset and sitemap index, plain or gzip), parsed without entity expansion.

Reads ``FETCH_MAX_BYTES``. A sitemap is an ordinary frontier URL of a job with
``use_sitemaps``: it is fetched like any page (politeness, robots, retries), and the URLs it
lists become its links: the ``<loc>`` of each ``<url>`` or ``<sitemap>``, as a
``SitemapSpider`` reads them (``crawlplatform.spiders.Sitemap``, Scrapy's reading: an
image's ``<image:loc>`` is no page). libxml2 runs with entity resolution, network access and
huge-tree support off, so a billion-laughs or external-entity sitemap yields nothing harmful.
A gzip sitemap is gunzipped up to the cap and read as far as that goes.
"""

from __future__ import annotations

import gzip
import io
import zlib

import lxml.etree

from crawlplatform.spiders import Sitemap

XML_TYPES = frozenset(
    {"application/xml", "text/xml", "application/gzip", "application/x-gzip",
     "application/octet-stream"}
)  # fmt: skip
_GZIP_MAGIC = b"\x1f\x8b"


def looks_like_sitemap(url: str, content_type: str) -> bool:
    path = url.split("?", 1)[0].lower()
    return content_type in XML_TYPES or path.endswith((".xml", ".xml.gz"))


def _gunzip(body: bytes, max_bytes: int) -> bytes:
    out = io.BytesIO()
    stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
    for start in range(0, len(body), 1 << 16):
        out.write(stream.decompress(body[start : start + (1 << 16)], max_bytes - out.tell() + 1))
        if out.tell() > max_bytes:
            break
    return out.getvalue()[:max_bytes]


def parse_sitemap(body: bytes, max_bytes: int) -> list[str]:
    """The ``<loc>`` URLs of a sitemap or sitemap index; [] if the body is not one."""
    if body[:2] == _GZIP_MAGIC:
        try:
            body = _gunzip(body, max_bytes)
        except (zlib.error, EOFError, gzip.BadGzipFile):
            return []
    try:
        listed = Sitemap(body)
        if listed.type not in ("urlset", "sitemapindex"):
            return []
        return [entry["loc"] for entry in listed if entry["loc"]]
    except (lxml.etree.XMLSyntaxError, StopIteration):  # no XML at all
        return []
