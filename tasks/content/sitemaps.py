"""Sitemaps (urlset and sitemap index, plain or gzip), parsed without entity expansion.

Reads ``FETCH_MAX_BYTES``. A sitemap is an ordinary frontier URL of a job with
``use_sitemaps``: it is fetched like any page (politeness, robots, retries), and the URLs it
lists become its links. libxml2 runs with entity resolution, network access and huge-tree
support off, so a billion-laughs or external-entity sitemap yields nothing harmful.
"""

from __future__ import annotations

import gzip
import io
import zlib

import lxml.etree

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
    parser = lxml.etree.XMLParser(
        resolve_entities=False, no_network=True, huge_tree=False, recover=True
    )
    try:
        root = lxml.etree.fromstring(body, parser)
    except lxml.etree.XMLSyntaxError:
        return []
    if root is None or lxml.etree.QName(root).localname not in ("urlset", "sitemapindex"):
        return []
    locs = []
    for el in root.iter("{*}loc"):
        if el.text and el.text.strip():
            locs.append(el.text.strip())
    return locs
