"""``LinkExtractor`` (alias ``LxmlLinkExtractor``), as Scrapy 2.19's: the links of a page
that a ``CrawlSpider`` rule follows, as ``Link`` objects, with the results of Scrapy's own.

An element of ``tags`` (``a`` and ``area``) gives a link for each of its ``attrs``
(``href``), stripped of HTML spaces, resolved against the page's base (its ``<base href>``),
passed through ``process_value``, escaped in the page's encoding and resolved against the
page's URL; then kept if its scheme is ``http``, ``https``, ``file`` or ``ftp`` and it passes
``allow``/``deny`` (patterns searched in the URL), ``allow_domains``/``deny_domains`` (the
domain or any subdomain), ``deny_extensions`` (``IGNORED_EXTENSIONS`` unless given) and
``restrict_text`` (patterns searched in the link's text). ``restrict_xpaths`` and
``restrict_css`` limit the search to parts of the page; ``canonicalize`` gives w3lib's
canonical URLs; ``unique`` drops repeats as Scrapy does (by URL, the first kept).

Extraction runs on every page of a crawl, so it works on the tree the response has already
parsed and does each piece of work once: the elements are found by lxml (not a Python loop
over every element), joins, escapes and canonical forms are cached across pages, and a
URL's verdict by the filters is kept while the filters stay as they are.
``tests/test_linkextractors.py`` holds the results to Scrapy's own on the same bodies.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import Any
from urllib.parse import urljoin, urlparse

from lxml import etree
from parsel.csstranslator import HTMLTranslator
from w3lib.url import canonicalize_url, safe_url_string

from crawlplatform.spiders.link import Link
from crawlplatform.spiders.response import Response, join_alone

logger = logging.getLogger(__name__)

# fmt: off
IGNORED_EXTENSIONS = [  # Scrapy's: links to files of these extensions are not followed
    # archives
    "7z", "7zip", "bz2", "rar", "tar", "tar.gz", "xz", "zip",
    # images
    "mng", "pct", "bmp", "gif", "jpg", "jpeg", "png", "pst", "psp", "tif", "tiff", "ai", "drw",
    "dxf", "eps", "ps", "svg", "cdr", "ico", "webp",
    # audio
    "mp3", "wma", "ogg", "wav", "ra", "aac", "mid", "au", "aiff",
    # video
    "3gp", "asf", "asx", "avi", "mov", "mp4", "mpg", "qt", "rm", "swf", "wmv", "m4a", "m4v",
    "flv", "webm",
    # office suites
    "xls", "xlsm", "xlsx", "xltm", "xltx", "potm", "potx", "ppt", "pptm", "pptx", "pps", "doc",
    "docb", "docm", "docx", "dotm", "dotx", "odt", "ods", "odg", "odp",
    # other
    "css", "pdf", "exe", "bin", "rss", "dmg", "iso", "apk", "jar", "sh", "rb", "js", "hta",
    "bat", "cpl", "msi", "msp", "py",
]
# fmt: on

_SCHEMES = frozenset(("http", "https", "file", "ftp"))  # the links Scrapy keeps
_XHTML = "{http://www.w3.org/1999/xhtml"  # an XML tag in this namespace counts by local name
_HTML5_SPACE = " \t\n\r\x0c"  # what w3lib's strip_html5_whitespace strips
_string = etree.XPath("string()", smart_strings=False)  # an element's text, as Scrapy's
# Entries of each cache (a few hundred bytes each): enough for the links a site repeats from
# page to page (navigation, categories, pagination), which is where caching pays; links seen
# once pass through. An extractor's verdicts are all forgotten when it holds this many.
_CACHED = 1 << 14

_Regex = str | re.Pattern[str]


def _as_iter(value: Any) -> Iterable[Any]:
    """``value`` as several: Scrapy's ``arg_to_iter`` (None is none, a string is one)."""
    if value is None:
        return ()
    if not isinstance(value, (dict, str, bytes)) and hasattr(value, "__iter__"):
        return value
    return [value]


def _compiled(value: _Regex | Iterable[_Regex] | None) -> list[re.Pattern[str]]:
    return [x if isinstance(x, re.Pattern) else re.compile(x) for x in _as_iter(value)]


def _local(tag: Any) -> Any:
    """An XML tag without an XHTML namespace (Scrapy's ``_nons``)."""
    if isinstance(tag, str) and tag.startswith(_XHTML):
        return tag.split("}")[-1]
    return tag


class LinkExtractor:
    """The links of a page that pass the filters given, as Scrapy's ``LinkExtractor``
    (see the module's docstring; the arguments are Scrapy's)."""

    _csstranslator = HTMLTranslator()

    def __init__(
        self,
        allow: _Regex | Iterable[_Regex] = (),
        deny: _Regex | Iterable[_Regex] = (),
        allow_domains: str | Iterable[str] = (),
        deny_domains: str | Iterable[str] = (),
        restrict_xpaths: str | Iterable[str] = (),
        tags: str | Iterable[str] | None = ("a", "area"),
        attrs: str | Iterable[str] | None = ("href",),
        canonicalize: bool = False,
        unique: bool = True,
        process_value: Callable[[Any], Any] | None = None,
        deny_extensions: str | Iterable[str] | None = None,
        restrict_css: str | Iterable[str] = (),
        strip: bool = True,
        restrict_text: _Regex | Iterable[_Regex] | None = None,
        deny_tags: str | Iterable[str] = (),
        deny_attrs: str | Iterable[str] = (),
    ) -> None:
        self.tags, self.deny_tags = set(_as_iter(tags)), set(_as_iter(deny_tags))
        self.attrs, self.deny_attrs = set(_as_iter(attrs)), set(_as_iter(deny_attrs))
        self.unique = unique
        self.strip = strip
        self.process_value = process_value
        self.allow_res = _compiled(allow)
        self.deny_res = _compiled(deny)
        self.allow_domains: set[str] = set(_as_iter(allow_domains))
        self.deny_domains: set[str] = set(_as_iter(deny_domains))
        self.restrict_xpaths: tuple[str, ...] = tuple(_as_iter(restrict_xpaths)) + tuple(
            map(self._csstranslator.css_to_xpath, _as_iter(restrict_css))
        )
        if deny_extensions is None:
            deny_extensions = IGNORED_EXTENSIONS
        self.canonicalize = canonicalize
        self.deny_extensions: set[str] = {"." + e for e in _as_iter(deny_extensions)}
        self.restrict_text = _compiled(restrict_text)
        self._verdicts: dict[str, bool] = {}  # URL -> whether the filters but the text's pass
        self._verdicts_by: tuple = ()  # the filters those verdicts were given by

    def matches(self, url: str) -> bool:
        """Whether ``url`` passes the domain and pattern filters (not the others), as
        Scrapy's ``matches``."""
        if self.allow_domains and not _from_any(urlparse(url).netloc, self.allow_domains):
            return False
        if self.deny_domains and _from_any(urlparse(url).netloc, self.deny_domains):
            return False
        allowed = any(r.search(url) for r in self.allow_res) if self.allow_res else True
        return allowed and not any(r.search(url) for r in self.deny_res)

    def extract_links(self, response: Response) -> list[Link]:
        """The page's links that pass the filters, in the page's order (each URL once if
        ``unique``), from the tree the response has parsed."""
        if self.restrict_xpaths:
            roots = [sel.root for xpath in self.restrict_xpaths for sel in response.xpath(xpath)]
        else:
            roots = [response.selector.root]
        filters = (tuple(self.allow_res), tuple(self.deny_res), frozenset(self.allow_domains),
                   frozenset(self.deny_domains), tuple(self.deny_extensions))  # fmt: skip
        if filters != self._verdicts_by:  # changed since (Scrapy's are read on every page)
            self._verdicts.clear()
            self._verdicts_by = filters
        page = _Page(response, response.selector.type == "html")
        seen: set[str] | None = set() if self.unique else None
        links: list[Link] = []
        for root in roots:
            links.extend(self._links_in(root, page, seen))
        return links

    def _links_in(self, root: Any, page: _Page, seen: set[str] | None) -> Iterator[Link]:
        """The links of one part of the page. Repeats are dropped as Scrapy drops them: by
        the URL as found within the part, before the filters, then by the URL kept (``seen``,
        shared by the parts of one page)."""
        found: set[str] = set()
        for element, value in self._candidates(root, page.html):
            url = page.absolute(value, self.strip, self.process_value)
            if url is None:
                continue
            if seen is not None:
                if url in found:
                    continue
                found.add(url)
            text = None
            if self.restrict_text:
                text = _text(element)
                if not any(r.search(text) for r in self.restrict_text):
                    continue
            if not self._allowed(url):
                continue
            if self.canonicalize:
                url = _canonical(url)
            if seen is not None:
                if url in seen:
                    continue
                seen.add(url)
            rel = element.get("rel")
            nofollow = rel is not None and "nofollow" in rel.lower().replace(",", " ").split()
            yield Link(url, _text(element) if text is None else text, nofollow=nofollow)

    def _candidates(self, root: Any, html: bool) -> Iterator[tuple[Any, str]]:
        """Each (element, attribute value) of ``tags`` and ``attrs`` under ``root``, in
        document order (an element's attributes in their order)."""
        tags, attrs = self.tags - self.deny_tags, self.attrs - self.deny_attrs
        if html and "*" not in self.tags and all(map(_plain_name, tags)):  # lxml finds them
            elements = root.iter(*tags) if tags else ()
        else:
            elements = (
                el
                for el in root.iter(etree.Element)
                if _name_matches(self.tags, self.deny_tags, _local(el.tag))
            )
        if len(attrs) == 1 and "*" not in self.attrs:
            (name,) = attrs
            for element in elements:
                value = element.get(name)
                if value is not None:
                    yield element, value
            return
        for element in elements:
            for name, value in element.items():
                if _name_matches(self.attrs, self.deny_attrs, name):
                    yield element, value

    def _allowed(self, url: str) -> bool:
        """Whether ``url`` passes every filter but ``restrict_text`` (kept for next time)."""
        verdict = self._verdicts.get(url)
        if verdict is None:
            if len(self._verdicts) >= _CACHED:
                self._verdicts.clear()
            verdict = self._verdicts[url] = self._judged(url)
        return verdict

    def _judged(self, url: str) -> bool:
        if url.split("://", 1)[0] not in _SCHEMES:
            return False
        if self.allow_res and not any(r.search(url) for r in self.allow_res):
            return False
        if self.deny_res and any(r.search(url) for r in self.deny_res):
            return False
        parsed = urlparse(url)
        if self.allow_domains and not _from_any(parsed.netloc, self.allow_domains):
            return False
        if self.deny_domains and _from_any(parsed.netloc, self.deny_domains):
            return False
        return not parsed.path.lower().endswith(self._verdicts_by[-1])


LxmlLinkExtractor = LinkExtractor


def _text(element: Any) -> str:
    """An element's text, all of it (XPath's ``string()``, as Scrapy reads a link's text);
    read directly where it has no children (comments and entities count as children)."""
    if len(element):
        return _string(element) or ""
    return element.text or ""


def _plain_name(tag: Any) -> bool:
    """Whether lxml's ``iter(tag)`` finds exactly the elements of that name (a ``{`` would
    make it a namespace, or any namespace)."""
    return isinstance(tag, str) and tag != "" and "{" not in tag and "}" not in tag


def _name_matches(allowed: set[str], denied: set[str], name: str) -> bool:
    """Whether a tag or attribute counts: allowed (by name or ``*``) and not denied."""
    return name not in denied and ("*" in allowed or name in allowed)


def _from_any(netloc: str, domains: Iterable[str]) -> bool:
    """Whether a URL of ``netloc`` is from one of ``domains`` or a subdomain of one (Scrapy's
    ``url_is_from_any_domain``: the port, if any, is part of what is compared)."""
    host = netloc.lower()
    return bool(host) and any(host == d or host.endswith(f".{d}") for d in map(str.lower, domains))


class _Page:
    """What a page's links are resolved with: its base (the response's), URL, scheme and
    encoding."""

    __slots__ = ("encoding", "html", "response", "scheme", "url")

    def __init__(self, response: Response, html: bool) -> None:
        self.html = html
        self.response = response  # its urljoin is Scrapy's, with its <base href>
        self.url = response.url
        self.scheme = urlparse(response.url).scheme
        self.encoding = response.encoding

    def absolute(self, value: str, strip: bool, process: Callable[[Any], Any] | None) -> str | None:
        """The URL of an attribute's value, as Scrapy makes it: stripped, joined with the
        base, processed, escaped in the page's encoding and joined with the page's URL; None
        where Scrapy skips the link (no URL, or ``process_value`` said None)."""
        if strip:
            value = value.strip(_HTML5_SPACE)
        try:
            url = self.response.urljoin(value)  # cached by the base's directory
        except ValueError:
            return None  # no URL at all (``http://[x``)
        if process is not None:
            url = process(url)
            if url is None:
                return None
        safe, joined = _made_safe(url, self.encoding, self.scheme)
        if safe is None:
            logger.debug("Skipping extraction of link with bad URL %r", url)
            return None
        return urljoin(self.url, safe) if joined is None else joined


@lru_cache(maxsize=_CACHED)
def _made_safe(url: str, encoding: str, scheme: str) -> tuple[str | None, str | None]:
    """``url`` escaped in ``encoding`` as w3lib's ``safe_url_string`` escapes it (None where
    it cannot), and what joining that with any page of ``scheme`` gives where it depends on
    nothing else of the page's URL (else None), so that a site's links are escaped and joined
    once per process, not once per page."""
    try:
        safe = safe_url_string(url, encoding=encoding)
    except ValueError:
        return None, None
    return safe, (join_alone(safe, urlparse(safe, scheme), scheme) if safe else None)


_canonical = lru_cache(maxsize=_CACHED)(canonicalize_url)
