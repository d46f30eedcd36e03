"""Links, title and robots directives from an HTML page, with lexbor (selectolax).

Charset comes from the Content-Type header, a byte-order mark, ``<meta>``, or detection, in
that order (w3lib's ``html_to_unicode``, as Scrapy does). ``<base href>`` is honoured.
Malformed markup is repaired the way browsers repair it (lexbor is an HTML5 parser), so
broken pages still yield links. Lexbor parses a link-heavy page about three times as fast as
libxml2 (``docs/benchmarks.md``).

Page-level robots directives come from ``<meta name="robots">`` (or ``name`` set to the
crawler's robots token) and the ``X-Robots-Tag`` header (unscoped, or scoped to the token):
``noindex`` (the page is not kept as content), ``nofollow`` (its links are not followed),
``none`` (both). Links marked ``rel="nofollow"`` are reported apart, for jobs that obey them.
"""

from __future__ import annotations

import re
from codecs import BOM_UTF8
from dataclasses import dataclass
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser
from w3lib.encoding import html_to_unicode

from tasks.defaults import setting

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml", ""})
_IGNORED_SCHEMES = ("mailto:", "javascript:", "tel:", "data:", "ftp:", "file:", "#")
_SPACES = re.compile(r"\s+")


@dataclass
class Parsed:
    title: str
    base: str  # the URL relative links resolve against (``<base href>`` or the page's)
    hrefs: list[str]  # unique link targets without fragment, in document order; other schemes
    # and links to the page itself are left out
    encoding: str
    text: str = ""  # the decoded document
    tree: LexborHTMLParser | None = None  # the parsed document (for extraction rules)
    robots: frozenset[str] = frozenset()  # <meta name="robots"> directives, lower case
    nofollow_hrefs: frozenset[str] = frozenset()  # hrefs only ever linked with rel=nofollow

    @property
    def links(self) -> list[str]:
        """Absolute link URLs, unique, in document order; not yet canonical."""
        return list(dict.fromkeys(urljoin(self.base, h) for h in self.hrefs))


_INLINE_SCRIPT = re.compile(rb"<script\b(?![^>]*\bsrc\s*=)[^>]*>(.*?)</script", re.S | re.I)
# what a script does that builds the page's links or content once it runs: makes an anchor,
# sets or writes an href, writes markup with anchors, or loads the content it shows
_BUILDS = re.compile(
    rb"createelement\(\s*[\"']a[\"']|\.href\s*=[^=]|setattribute\(\s*[\"']href"
    rb"|[\"'`]\s*<a[\s>]|\bfetch\(|xmlhttprequest|\$\.(?:get|ajax|getjson)\("
)
# an empty element a single-page application mounts itself into, a list or table left empty
# for a script to fill, or a placeholder that says it is loading
_MOUNT = re.compile(
    rb"<div[^>]+id=[\"']?(?:root|app|__next|__nuxt|main)[\"']?[^>]*>\s*</div>"
    rb"|<(ul|ol|dl|tbody|table)\b[^>]*>\s*</\1\s*>|>\s*loading\s*(?:\.\.\.|\xe2\x80\xa6)?\s*<"
)
_TAGS = re.compile(rb"<script\b.*?</script\s*>|<style\b.*?</style\s*>|<[^>]*>", re.S)
_SCAN = 256 << 10  # of a body, what is looked at


def needs_javascript(parsed: Parsed, body: bytes) -> bool:
    """A page whose links or content only its scripts make, which ``--render auto`` renders:
    one with scripts and no links in its HTML, or a ``<noscript>`` (the page says it needs
    them), or an inline script that builds links or loads content, or an empty element a
    single-page application mounts into, an empty list or table, a "Loading..." placeholder,
    or almost no text to read."""
    head = body[:_SCAN].lower()
    if b"<script" not in head and b"<noscript" not in head:
        return False
    if not parsed.hrefs or b"<noscript" in head or _MOUNT.search(head):
        return True
    if any(_BUILDS.search(code) for code in _INLINE_SCRIPT.findall(head)):
        return True
    return len(_SPACES.sub(" ", _TAGS.sub(b" ", head).decode("utf-8", "replace")).strip()) < 200


def looks_binary(body: bytes) -> bool:
    """True for bodies that are not text whatever their Content-Type says."""
    return b"\x00" in body[:2048]


_DIRECTIVES = {"none": {"noindex", "nofollow"}}
# X-Robots-Tag values that look scoped ("name: value") but are directives with a parameter.
_PARAMETERISED = {"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"}


def _directives(values: list[str]) -> set[str]:
    found: set[str] = set()
    for value in values:
        for item in value.lower().split(","):
            item = item.strip()
            found |= _DIRECTIVES.get(item, {item} if item else set())
    return found


def robots_directives(meta: frozenset[str], header_values: list[str], agent: str) -> set[str]:
    """The page's robots directives for crawler ``agent``: its meta tags and X-Robots-Tag."""
    found = set(meta)
    for value in header_values:
        scope, sep, rest = value.partition(":")
        scope = scope.strip().lower()
        if sep and scope and " " not in scope and scope not in _PARAMETERISED:
            if scope == agent.lower():
                found |= _directives([rest])
        else:
            found |= _directives([value])
    return found


def parse_html(body: bytes, content_type_header: str, url: str, agent: str = "") -> Parsed:
    encoding, text = html_to_unicode(content_type_header, body, default_encoding="utf-8")
    # Lexbor reads UTF-8: a UTF-8 body is given as it came (less its byte-order mark, which
    # lexbor would keep as text), not encoded again from the decoded text.
    doc = LexborHTMLParser(body.removeprefix(BOM_UTF8) if encoding == "utf-8" else text)
    title_el = doc.css_first("title")
    title = _SPACES.sub(" ", title_el.text() if title_el is not None else "").strip()
    title = title[: setting("TITLE_MAX_CHARS")]
    base = url
    base_el = doc.css_first("base[href]")
    if base_el is not None:
        base = urljoin(url, (base_el.attributes.get("href") or "").strip())
    raw: dict[str, None] = {}
    marked: set[str] = set()  # hrefs of links that say rel=nofollow (rare)
    followed: set[str] = set()
    for el in doc.css("a[href], area[href]"):
        attributes = el.attributes
        href = attributes.get("href")
        if href:
            href = _href(href)
            raw[href] = None
            if _says_nofollow(attributes.get("rel")):
                marked.add(href)
            else:
                followed.add(href)
    hrefs = [h for h in raw if h and not h.lower().startswith(_IGNORED_SCHEMES)]
    names = {"robots", agent.lower()} if agent else {"robots"}
    meta = [
        el.attributes.get("content") or ""
        for el in doc.css("meta[name]")
        if (el.attributes.get("name") or "").strip().lower() in names
    ]
    return Parsed(title=title, base=base, hrefs=hrefs, encoding=encoding, text=text, tree=doc,
                  robots=frozenset(_directives(meta)),
                  nofollow_hrefs=frozenset(marked - followed))  # fmt: skip


def _href(href: str) -> str:
    # The fragment never changes the canonical URL; dropping it here lets the many anchors
    # into one page share a single cache entry downstream.
    return href.split("#", 1)[0].strip()


def _says_nofollow(rel: str | None) -> bool:
    return bool(rel) and "nofollow" in rel.lower().split()
