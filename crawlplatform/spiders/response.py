"""Responses of the spider API, named and shaped as Scrapy's: what a callback receives (the
fetched answer with parsel selectors, ``json()``, ``urljoin``, ``follow``/``follow_all`` and,
built on first use, a beautifulsoup4 tree, ``soup``), and the ``Failure`` an errback receives.
"""

from __future__ import annotations

import json
import re
import traceback
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import ParseResult, urljoin, urlparse, urlunparse, uses_netloc, uses_relative

import parsel
from lxml import etree
from parsel.csstranslator import GenericTranslator, HTMLTranslator
from w3lib.encoding import (
    html_body_declared_encoding,
    http_content_type_encoding,
    read_bom,
    resolve_encoding,
    to_unicode,
)
from w3lib.html import get_base_url

from crawlplatform.spiders.errors import HttpError, NotSupported, as_raised, carrying, kinds_of
from crawlplatform.spiders.headers import Headers
from crawlplatform.spiders.http import Callback, Request, safe_url
from crawlplatform.spiders.link import Link


class Response:
    """A fetched answer as a callback sees it. One whose body is not text (an image, a PDF:
    ``crawlplatform/spiders/responsetypes.py``) has no ``text`` and no selectors, as under
    Scrapy; ``TextResponse`` and its classes have them."""

    # Parsed as "html", "xml" or "json"; None: by the body (a TextResponse)
    _kind: str | None = None

    def __init__(
        self,
        url: str,
        status: int = 200,
        headers: Mapping | Iterable | None = None,
        body: bytes | str = b"",
        request: Request | None = None,
        flags: list[str] | None = None,
        ip_address: str | None = None,
        encoding: str | None = None,
        protocol: str | None = None,
    ) -> None:
        if isinstance(body, str):
            if encoding is None:
                raise TypeError("Cannot convert str body to bytes without an encoding: "
                                "pass encoding= (as Scrapy's TextResponse)")  # fmt: skip
            body = body.encode(encoding)
        self.url = url
        self.status = status
        self.headers = headers.copy() if isinstance(headers, Headers) else Headers(headers)
        self.body = body
        self._given_encoding = encoding
        self.request = request
        self.flags = list(flags or [])
        self.ip_address = ip_address
        self.protocol = protocol  # "HTTP/1.1", as Scrapy's
        self._text: str | None = None
        self._encoding: str | None = encoding
        self._bom = 0  # the length of the body's byte order mark
        self._selector: parsel.Selector | None = None
        self._soup: Any = None
        self._base: str | None = None
        self._directory: str | None = None

    def __repr__(self) -> str:
        return f"<{self.status} {self.url}>"

    def replace(self, **changes: Any) -> Response:
        """A copy with some arguments changed (``body`` fixed up before parsing, say), as
        Scrapy's ``Response.replace`` (``cls``: of another class)."""
        cls = changes.pop("cls", type(self))
        if isinstance(changes.get("body"), str) and "encoding" not in changes:
            changes["encoding"] = self.encoding  # text in, encoded as the page is (Scrapy's)
        fields = {"url": self.url, "status": self.status, "headers": self.headers,
                  "body": self.body, "request": self.request, "flags": self.flags,
                  "ip_address": self.ip_address, "encoding": self._given_encoding,
                  "protocol": self.protocol}  # fmt: skip
        fields.update(changes)
        return cls(**fields)

    def copy(self) -> Response:
        return self.replace()

    @property
    def meta(self) -> dict:
        if self.request is None:
            raise AttributeError(
                "Response.meta not available, this response is not tied to any request"
            )
        return self.request.meta

    @property
    def cb_kwargs(self) -> dict:
        if self.request is None:
            raise AttributeError("Response.cb_kwargs not available: no request")
        return self.request.cb_kwargs

    def urljoin(self, url: str) -> str:
        """``url`` made absolute against the answer's URL (a body that is not text has no
        ``<base href>``)."""
        return urljoin(self.url, url)

    @property
    def text(self) -> str:
        raise AttributeError("Response content isn't text")

    def css(self, *args: Any, **kwargs: Any) -> parsel.SelectorList:
        raise NotSupported("Response content isn't text")

    def jmespath(self, *args: Any, **kwargs: Any) -> parsel.SelectorList:
        raise NotSupported("Response content isn't text")

    def xpath(self, *args: Any, **kwargs: Any) -> parsel.SelectorList:
        raise NotSupported("Response content isn't text")

    def follow(self, url: str | Link, callback: Callback = None, **kwargs: Any) -> Request:
        """A request for ``url`` (relative to the answer's URL, or a ``Link``), with the
        arguments of ``Request``."""
        if isinstance(url, Link):
            url = url.url
        elif url is None:
            raise ValueError("url can't be None")
        cls = kwargs.pop("cls", Request)
        return cls(self.urljoin(url), callback=callback, **kwargs)

    def follow_all(self, urls: Iterable[str | Link], callback: Callback = None,
                   **kwargs: Any) -> Iterator[Request]:  # fmt: skip
        """Requests for each of ``urls``."""
        if not hasattr(urls, "__iter__"):
            raise TypeError("'urls' argument must be an iterable")
        return (self.follow(url, callback=callback, **kwargs) for url in urls)


class TextResponse(Response):
    """An answer with a text body: decoded, parsed on first use (by the ``Content-Type``'s
    kind for a class of its own, else by the body, as Scrapy 2.18 on), joined against its
    ``<base href>``."""

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = self._decoded(None)
        return self._text

    @property
    def encoding(self) -> str:
        """The body's encoding, found as Scrapy finds it: the byte order mark, the
        ``Content-Type`` charset, the body's own declaration, else inferred from the bytes
        (``_inferred``). Found without decoding the body, which only ``text`` does."""
        if self._encoding is None:
            content_type = (self.headers.get("Content-Type") or b"").decode("latin-1")
            self._encoding, self._bom = _encoding_of(content_type, self.body)
        return self._encoding

    def _decoded(self, chars: int | None) -> str:
        """The text, or its first ``chars`` characters, decoded from four bytes a character
        where that gives more than ``chars`` of them (one cut short at the end is past those
        kept); else from the whole body (an encoding that spends more, as ISO-2022-JP's
        escapes do). A byte order mark decides, whatever encoding was given (as w3lib's
        ``html_to_unicode`` decodes Scrapy's text), and is no part of the text."""
        encoding, start = _codec(self.encoding), self._bom  # finds the byte order mark too
        if self._given_encoding is not None:
            marked, bom = read_bom(self.body)
            if marked is not None and bom is not None:
                encoding, start = marked, len(bom)
        if chars is not None and start + 4 * chars < len(self.body):
            head = to_unicode(self.body[start : start + 4 * chars], encoding)
            if len(head) > chars:
                return head[:chars]
        return to_unicode(self.body[start:], encoding)[:chars]

    def json(self) -> Any:
        """The body parsed as JSON, from its bytes (UTF-8, -16 or -32, whatever the
        ``Content-Type`` says), as Scrapy's; a body that is none of those, from its text."""
        try:
            return json.loads(self.body)
        except UnicodeDecodeError:
            return json.loads(self.text)

    @property
    def selector(self) -> parsel.Selector:
        if self._selector is None:
            kind = self._kind  # None: parsel tells JSON, XML and HTML by the body (Scrapy 2.18)
            if kind == "html" and self._parses_as_text():
                self._selector = parsel.Selector(body=self.body, encoding="utf-8", type=kind,
                                                 base_url=self.url)  # fmt: skip
            else:
                self._selector = parsel.Selector(text=self.text, type=kind, base_url=self.url)
        return self._selector

    def _parses_as_text(self) -> bool:
        """Whether parsel, given the body's bytes, builds the tree it builds from ``text``
        (what Scrapy gives it): the body is UTF-8 and, after ASCII spaces, starts and ends
        with printable ASCII, where ``str.strip`` and ``bytes.strip`` agree (parsel handles
        a NUL or an invalid byte inside the same way on both paths). Parsing the bytes
        saves encoding ``text`` back to them: up to a seventh of a large page's parse."""
        if self.encoding != "utf-8" and not (self.encoding == "cp1252" and self.body.isascii()):
            return False  # an ASCII body is its own UTF-8
        stripped = self.body.strip()
        return bool(stripped) and 0x20 < stripped[0] < 0x7F and 0x20 < stripped[-1] < 0x7F

    def jmespath(self, query: str, **kwargs: Any) -> parsel.SelectorList:
        """A JMESPath query on a JSON response's selector (parsel's, as Scrapy's)."""
        return self.selector.jmespath(query, **kwargs)

    def css(self, query: str) -> parsel.SelectorList:
        return self.selector.css(query)

    def xpath(self, query: str, **kwargs: Any) -> parsel.SelectorList:
        return self.selector.xpath(query, **kwargs)

    @property
    def soup(self) -> Any:
        """The body as a beautifulsoup4 tree, built on first use."""
        if self._soup is None:
            from bs4 import BeautifulSoup

            self._soup = BeautifulSoup(self.text, "html.parser")
        return self._soup

    @property
    def base(self) -> str:
        """What relative URLs resolve against, as Scrapy's ``get_base_url`` has it: the
        ``<base href="...">`` in the text's first 4096 characters, else the page's URL (both
        made safe by w3lib's ``safe_url_string``, as there)."""
        if self._base is None:
            text = self._text
            head = text[:_BASE_WITHIN] if text is not None else self._decoded(_BASE_WITHIN)
            found = _BASE_TAG.search(head) is not None
            self._base = (get_base_url(head, self.url, self.encoding) if found else
                          safe_url(self.url))  # fmt: skip
        return self._base

    def urljoin(self, url: str) -> str:
        """``url`` made absolute against the page's base (its ``<base href>`` if it has one),
        as urllib's ``urljoin`` makes it (Scrapy's ``response.urljoin``).

        Joins are cached by the base's directory where they depend on no more of the base
        (``join_in_directory``), and without the fragment where urllib keeps it as it is: a
        page's many ``page.html#section`` links are one entry."""
        bare, _, fragment = url.partition("#")
        if not fragment or "\t" in url or "\n" in url or "\r" in url:  # urllib drops these
            bare, fragment = url, ""
        if self._directory is None:
            self._directory = url_directory(self.base)
        joined = join_in_directory(self._directory, bare)
        if joined is None:
            joined = _joined(self.base, bare or ("#" if fragment else ""))
        return f"{joined}#{fragment}" if fragment else joined

    def follow(
        self, url: str | Link | parsel.Selector, callback: Callback = None, **kwargs: Any
    ) -> Request:
        """A request for ``url`` (relative, a ``Link`` a link extractor found, an
        ``<a>``/``<link>`` selector or an attribute selector), with the arguments of
        ``Request``."""
        if isinstance(url, Link):
            url = url.url
        elif isinstance(url, parsel.Selector):
            url = _url_from_selector(url)
        elif isinstance(url, parsel.SelectorList):
            raise ValueError("SelectorList is not supported: follow one selector, or follow_all")
        elif url is None:
            raise ValueError("url can't be None")
        cls = kwargs.pop("cls", Request)
        return self._made(cls, self.urljoin(url.strip()), callback, kwargs)

    def _made(self, make: type[Request], url: str, callback: Callback, kwargs: dict) -> Request:
        """A request the page makes: in the page's encoding (a query's non-ASCII characters
        escaped in it, as Scrapy's ``follow`` has it) unless told otherwise; a URL that
        encoding cannot spell (where Scrapy raises UnicodeEncodeError), in UTF-8."""
        if "encoding" in kwargs or self.encoding == "utf-8":
            return make(url, callback=callback, **kwargs)
        try:
            return make(url, callback=callback, encoding=self.encoding, **kwargs)
        except UnicodeEncodeError:
            return make(url, callback=callback, **kwargs)

    def follow_all(
        self,
        urls: Iterable[str | Link | parsel.Selector] | parsel.SelectorList | None = None,
        callback: Callback = None,
        css: str | None = None,
        xpath: str | None = None,
        **kwargs: Any,
    ) -> Iterator[Request]:
        """Requests for each of ``urls``, or for each link ``css`` or ``xpath`` selects."""
        if sum(x is not None for x in (urls, css, xpath)) != 1:
            raise ValueError(
                "Please supply exactly one of the following arguments: urls, css, xpath"
            )
        if urls is None:
            urls = self._links(css, xpath)
        elif isinstance(urls, parsel.SelectorList):
            urls = _links_of(sel.root for sel in urls)
        make = kwargs.pop("cls", Request)
        for url in urls:
            try:
                if isinstance(url, str):  # most are: a page's links, stripped
                    yield self._made(make, self.urljoin(url.strip()), callback, kwargs)
                else:
                    yield self.follow(url, callback=callback, cls=make, **kwargs)
            except ValueError:  # a link that is no URL (``http://[x``), as a browser skips it
                continue

    def _links(self, css: str | None, xpath: str | None) -> list[str]:
        """The links of what ``css`` or ``xpath`` selects, as ``self.css(css)`` would give
        them to Scrapy's ``follow_all``, without a Selector for each element (for a CSS
        query of HTML elements, the ``href`` of its ``<a>`` and ``<link>`` read by XPath)."""
        selector = self.selector
        if css is not None and selector.type == "html" and "::" not in css:
            found = _hrefs(_HTML.css_to_xpath(css))(selector.root)
            return [href.strip(_HTML5_SPACE) for href in found]
        if css is not None:
            xpath = (_HTML if selector.type == "html" else _XML).css_to_xpath(css)
        try:
            found = selector.root.xpath(xpath, namespaces=selector.namespaces,
                                        smart_strings=False)  # fmt: skip
        except etree.XPathError as exc:  # reported as parsel reports it
            raise ValueError(f"XPath error: {exc} in {xpath}") from None
        return _links_of(found if isinstance(found, list) else [found])


@lru_cache(maxsize=256)
def _hrefs(xpath: str) -> etree.XPath:
    """The ``href`` of each ``<a>`` or ``<link>`` that ``xpath`` (a node-set) selects, in
    document order."""
    return etree.XPath(f"({xpath})[self::a or self::link]/@href", smart_strings=False)


_HTML, _XML = HTMLTranslator(), GenericTranslator()
_BASE_WITHIN = 4096  # characters of the text where Scrapy looks for <base href>
_BASE_TAG = re.compile(r"<base\s", re.IGNORECASE)


@lru_cache(maxsize=65536)
def join_in_directory(directory: str, href: str) -> str | None:
    """What urllib's ``urljoin`` gives for ``href`` on any base of ``directory``
    (``url_directory``), where it depends on no more of the base: everywhere but where
    ``href`` has neither a path nor parameters (``""``, ``?q``, ``#f``, ``//``, ``http:``),
    which need the whole base (None). Pages of one directory share their links' joins."""
    scheme = urlparse(directory).scheme
    parsed = urlparse(href, scheme)
    alone = join_alone(href, parsed, scheme)
    if alone is None and (parsed.path or parsed.params):
        return urljoin(directory, href)
    return alone


def join_alone(url: str, parsed: ParseResult, scheme: str) -> str | None:
    """The first branches of urllib's ``urljoin(base, url)`` for a base of ``scheme``
    (``parsed``: ``urlparse(url, scheme)``), which read nothing else of the base: ``url``
    itself for another scheme or one that does not resolve, ``url`` unparsed again where it
    names its host; else None."""
    if parsed.scheme != scheme or parsed.scheme not in uses_relative:
        return url
    if parsed.scheme in uses_netloc and parsed.netloc:
        return urlunparse(parsed)
    return None


_joined = lru_cache(maxsize=4096)(urljoin)  # the joins that need the whole base


def _encoding_of(content_type: str, body: bytes) -> tuple[str, int]:
    """The body's encoding, as Scrapy's ``TextResponse.encoding`` names it, and its byte order
    mark's length (tests/test_spider_api.py holds Scrapy 2.19's results)."""
    bom_encoding, bom = read_bom(body)
    if bom_encoding is not None and bom is not None:
        return bom_encoding, len(bom)
    encoding = http_content_type_encoding(content_type) or html_body_declared_encoding(body)
    return (encoding or _inferred(body)), 0


def _codec(encoding: str) -> str:
    """What a body of ``encoding`` is decoded with: a declared UTF-16 or UTF-32 without a
    byte order mark is big-endian (w3lib's ``html_to_unicode``, as Scrapy decodes it)."""
    return encoding + "-be" if encoding in ("utf-16", "utf-32") else encoding


def _inferred(body: bytes) -> str:
    """The encoding of a body that declares none, as Scrapy's ``TextResponse`` infers it:
    ``cp1252`` (w3lib's name for ASCII) for an ASCII body, ``utf-8`` for one that decodes as
    UTF-8, else charset-normalizer's best guess (``ascii`` if it has none)."""
    if body.isascii():
        return "cp1252"
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        from charset_normalizer import from_bytes

        match = from_bytes(body).best()
        return resolve_encoding(match.encoding) or "ascii" if match else "ascii"
    return "utf-8"


def url_directory(base: str) -> str:
    """What a relative path resolves against: ``base`` up to its path's last slash (the
    same for every page of one directory, so joins are cached by it)."""
    head = base.split("?", 1)[0].split("#", 1)[0]
    cut = head.rfind("/")
    return head[: cut + 1] if cut > head.find("//") + 1 else head


def _links_of(roots: Iterable[Any]) -> list[str]:
    """The link of each selected node that has one (Scrapy skips the others)."""
    return [link for link in map(_link_of, roots) if link is not None]


def _link_of(root: Any) -> str | None:
    """A selected node's link: an attribute's or a text's value, the ``href`` of an ``<a>`` or
    ``<link>``; None for any other node."""
    if isinstance(root, str):
        return root.strip(_HTML5_SPACE)
    href = root.get("href") if getattr(root, "tag", None) in ("a", "link") else None
    return None if href is None else href.strip(_HTML5_SPACE)


_HTML5_SPACE = " \t\n\r\x0c"


def _url_from_selector(sel: parsel.Selector) -> str:
    link = _link_of(sel.root)
    if link is not None:
        return link
    tag = getattr(sel.root, "tag", "")
    if tag in ("a", "link"):
        raise ValueError(f"<{tag}> element has no href attribute: {sel}")
    raise ValueError(f"Only <a> and <link> elements are supported; got <{tag}>")


class HtmlResponse(TextResponse):
    """Scrapy's name for an HTML response: parsed as HTML, whatever its ``Content-Type``."""

    _kind = "html"


class XmlResponse(TextResponse):
    """Scrapy's name for an XML response: parsed as XML, whatever its ``Content-Type``."""

    _kind = "xml"


class JsonResponse(TextResponse):
    """Scrapy's name for a JSON response: its selector is a ``json`` one (``jmespath``)."""

    _kind = "json"


class Failure:
    """What an errback receives, shaped as the Twisted ``Failure`` Scrapy passes: ``value``
    (the exception Scrapy 2.19 raises for what the request met: an ``HttpError`` for an
    answer that is not 2xx, a ``DownloadTimeoutError``, a ``CannotResolveHostError``, ...
    (``errors.as_raised``), else the platform's outcome; each with the outcome's ``reason``,
    the URL's outcome code, and ``status``), ``request``, ``response`` (the server's answer for
    an HTTP error: its status, headers and the start of its body; else None), ``check()`` and
    ``getErrorMessage()``."""

    def __init__(self, value: BaseException, request: Request, response: Response | None = None):
        self._outcome = value
        answered = response is not None and not isinstance(value, HttpError)
        if answered and HttpError in kinds_of(value):  # as Scrapy's HttpErrorMiddleware
            value = carrying(HttpError(response, "Ignoring non-200 response"), value)
        elif response is None and not isinstance(value, HttpError):
            value = as_raised(value) or value
        self.value = value
        self.type = type(value)
        self.request = request
        self.response = response
        if response is not None and getattr(value, "response", None) is None:
            value.response = response  # as Scrapy's HttpError carries it

    def check(self, *types: type | str) -> type | str | None:
        """The first of ``types`` the failure is, by class or by name: the platform's outcome
        class, or the Scrapy or Twisted exception it stands for (``errors.py``)."""
        values = (self.value, self._outcome)
        names = {c.__name__ for value in values for c in type(value).__mro__}
        names.update(c.__name__ for kind in kinds_of(self._outcome) for c in kind.__mro__)
        for kind in types:
            if isinstance(kind, type) and any(isinstance(value, kind) for value in values):
                return kind
            if (kind if isinstance(kind, str) else kind.__name__) in names:
                return kind
        return None

    def trap(self, *types: type | str) -> type | str:
        """The first of ``types`` the failure is; else its exception is raised, as Twisted's."""
        found = self.check(*types)
        if found is None:
            raise self.value
        return found

    def raiseException(self) -> None:  # noqa: N802 (Twisted's name)
        raise self.value

    def getErrorMessage(self) -> str:  # noqa: N802 (Twisted's name)
        return str(self.value)

    def getTraceback(self) -> str:  # noqa: N802 (Twisted's name)
        return "".join(traceback.format_exception_only(self.value))

    def __repr__(self) -> str:
        return f"<Failure {self.type.__name__}: {self.value}>"
