"""Links and title from an HTML page, with lxml.

Charset comes from the Content-Type header, a byte-order mark, ``<meta>``, or detection, in
that order (w3lib's ``html_to_unicode``, as Scrapy does). ``<base href>`` is honoured.
Malformed markup is repaired by libxml2's HTML parser, so broken pages still yield links.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urljoin

import lxml.etree
from w3lib.encoding import html_to_unicode

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml", ""})
_IGNORED_SCHEMES = ("mailto:", "javascript:", "tel:", "data:", "ftp:", "file:", "#")
_SPACES = re.compile(r"\s+")
_TITLE_MAX = 1000


@dataclass
class Parsed:
    title: str
    base: str  # the URL relative links resolve against (``<base href>`` or the page's)
    hrefs: list[str]  # unique link targets without fragment, in document order; other schemes
    # and links to the page itself are left out
    encoding: str

    @property
    def links(self) -> list[str]:
        """Absolute link URLs, unique, in document order; not yet canonical."""
        return list(dict.fromkeys(urljoin(self.base, h) for h in self.hrefs))


def needs_javascript(parsed: Parsed, body: bytes) -> bool:
    """A page whose links only JavaScript would make: none in the HTML, and scripts that
    stand in for them (or a ``<noscript>`` that says so)."""
    if parsed.hrefs:
        return False
    head = body[: 64 << 10].lower()
    return b"<noscript" in head or b"<script" in head


def looks_binary(body: bytes) -> bool:
    """True for bodies that are not text whatever their Content-Type says."""
    return b"\x00" in body[:2048]


def parse_html(body: bytes, content_type_header: str, url: str) -> Parsed:
    encoding, text = html_to_unicode(content_type_header, body)
    # Plain etree elements: lxml.html's element classes cost a lookup per element.
    try:
        doc = lxml.etree.fromstring(text, lxml.etree.HTMLParser())
    except ValueError:  # an XML declaration with an encoding inside a str
        doc = lxml.etree.fromstring(text.encode("utf-8"), lxml.etree.HTMLParser(encoding="utf-8"))
    except lxml.etree.XMLSyntaxError:
        doc = None
    if doc is None:  # an empty document
        return Parsed(title="", base=url, hrefs=[], encoding=encoding)
    title = _SPACES.sub(" ", doc.findtext(".//title") or "").strip()[:_TITLE_MAX]
    base = url
    base_el = doc.find(".//base[@href]")
    if base_el is not None:
        base = urljoin(url, base_el.get("href", "").strip())
    raw: dict[str, None] = {}
    for el in doc.iter("a", "area"):
        href = el.get("href")
        if href:
            # The fragment never changes the canonical URL; dropping it here lets the many
            # anchors into one page share a single cache entry downstream.
            raw[href.split("#", 1)[0].strip()] = None
    hrefs = [h for h in raw if h and not h.lower().startswith(_IGNORED_SCHEMES)]
    return Parsed(title=title, base=base, hrefs=hrefs, encoding=encoding)
