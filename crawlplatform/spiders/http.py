"""Requests and responses of the spider API, named and shaped as Scrapy's.

``Request`` holds what the platform needs to send a request later, from any worker: its
method, URL, headers, body, the *name* of its callback (a method of the spider, so that it
survives a restart), ``cb_kwargs`` and ``meta`` (both JSON). ``Response`` is what a callback
receives: the fetched answer with parsel selectors (``css``, ``xpath``), ``json()``,
``urljoin``, ``follow``/``follow_all`` and, built on first use, a beautifulsoup4 tree
(``soup``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit, urlunsplit

import parsel
from w3lib.encoding import html_to_unicode

Callback = Callable[..., Any] | str | None


class Headers(dict):
    """Header names are case-insensitive; values are bytes, as in Scrapy (``getlist`` gives
    every value of a repeated header, ``to_unicode_dict`` text)."""

    def __init__(self, headers: Mapping | Iterable | None = None, encoding: str = "utf-8") -> None:
        super().__init__()
        self.encoding = encoding
        pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
        for name, value in pairs:
            values = value if isinstance(value, list | tuple) else [value]
            for one in values:
                self.appendlist(name, one)

    def _key(self, name: str | bytes) -> str:
        return (name.decode("latin-1") if isinstance(name, bytes) else str(name)).title()

    def _value(self, value: Any) -> bytes:
        return value if isinstance(value, bytes) else str(value).encode(self.encoding)

    def appendlist(self, name: str | bytes, value: Any) -> None:
        super().setdefault(self._key(name), []).append(self._value(value))

    def __setitem__(self, name: str | bytes, value: Any) -> None:
        values = value if isinstance(value, list | tuple) else [value]
        super().__setitem__(self._key(name), [self._value(v) for v in values])

    def __getitem__(self, name: str | bytes) -> bytes:
        return super().__getitem__(self._key(name))[-1]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str | bytes) and super().__contains__(self._key(name))

    def get(self, name: str | bytes, default: Any = None) -> Any:
        return self[name] if name in self else default

    def getlist(self, name: str | bytes, default: list | None = None) -> list[bytes]:
        return list(super().get(self._key(name), default or []))

    def setdefault(self, name: str | bytes, default: Any = None) -> bytes:
        if name not in self:
            self[name] = default
        return self[name]

    def items(self) -> Iterator[tuple[str, bytes]]:  # type: ignore[override]
        return ((k, self[k]) for k in self.keys())

    def values(self) -> list[bytes]:  # type: ignore[override]
        return [self[k] for k in self.keys()]

    def pairs(self) -> list[tuple[str, str]]:
        """Every (name, value) as text, repeated headers once per value."""
        return [(k, v.decode("latin-1")) for k in self.keys() for v in self.getlist(k)]

    def to_unicode_dict(self) -> dict[str, str]:
        return {k: b", ".join(self.getlist(k)).decode("latin-1") for k in self.keys()}


def _callback_name(callback: Callback) -> str | None:
    if callback is None or isinstance(callback, str):
        return callback
    name = getattr(callback, "__name__", None)
    if not name or getattr(callback, "__self__", None) is None:
        raise TypeError(
            f"a callback must be a method of the spider (or its name), not {callback!r}: "
            "requests are stored and their callbacks found again by name"
        )
    return name


class Request:
    """A request to make later, from any worker; its callback runs on the response."""

    def __init__(
        self,
        url: str,
        callback: Callback = None,
        method: str = "GET",
        headers: Mapping | Iterable | None = None,
        body: bytes | str | None = None,
        cookies: Mapping[str, str] | None = None,
        meta: dict | None = None,
        encoding: str = "utf-8",
        priority: int = 0,
        dont_filter: bool = False,
        errback: Callback = None,
        flags: list[str] | None = None,
        cb_kwargs: dict | None = None,
    ) -> None:
        if not isinstance(url, str):
            raise TypeError(f"Request url must be str, got {type(url).__name__}")
        if not urlsplit(url).scheme:
            raise ValueError(f"Missing scheme in request url: {url}")
        self.url = url
        self.callback = callback
        self.errback = errback
        self._callback = _callback_name(callback)
        self._errback = _callback_name(errback)
        self.method = str(method).upper()
        self.encoding = encoding
        self.headers = Headers(headers, encoding)
        if isinstance(body, str):
            body = body.encode(encoding)
        self.body = body or b""
        self.cookies = dict(cookies or {})
        self.meta = dict(meta or {})
        self.priority = int(priority)
        self.dont_filter = bool(dont_filter)
        self.flags = list(flags or [])
        self.cb_kwargs = dict(cb_kwargs or {})

    @property
    def callback_name(self) -> str | None:
        """The name of the spider method that handles the response (None: ``parse``)."""
        return self._callback

    @property
    def errback_name(self) -> str | None:
        return self._errback

    def replace(self, **changes: Any) -> Request:
        """A copy with some arguments changed, as Scrapy's ``Request.replace`` (``cls``: of
        another class)."""
        cls = changes.pop("cls", type(self))
        fields = {
            "url": self.url, "callback": self.callback, "method": self.method,
            "headers": self.headers.pairs(), "body": self.body, "cookies": self.cookies,
            "meta": self.meta, "encoding": self.encoding, "priority": self.priority,
            "dont_filter": self.dont_filter, "errback": self.errback, "flags": self.flags,
            "cb_kwargs": self.cb_kwargs,
        }  # fmt: skip
        fields.update(changes)
        copy = cls.__new__(cls)
        Request.__init__(copy, **fields)  # the body as it is, not encoded again
        return copy

    def __repr__(self) -> str:
        return f"<{self.method} {self.url}>"


class JsonRequest(Request):
    """A request whose body is ``data`` as JSON (POST unless ``method`` says otherwise)."""

    def __init__(
        self,
        url: str,
        *args: Any,
        data: Any = None,
        dumps_kwargs: dict | None = None,
        **kwargs: Any,
    ) -> None:
        if data is not None and "body" not in kwargs:
            kwargs["body"] = json.dumps(data, **(dumps_kwargs or {"sort_keys": True}))
            kwargs.setdefault("method", "POST")
        super().__init__(url, *args, **kwargs)
        self.headers.setdefault("Content-Type", "application/json")
        self.headers.setdefault("Accept", "application/json, text/javascript, */*; q=0.01")


def _with_query(url: str, query: str) -> str:
    parts = urlsplit(url)
    joined = f"{parts.query}&{query}" if parts.query else query
    return urlunsplit(parts._replace(query=joined, fragment=""))


class FormRequest(Request):
    """A form submission: ``formdata`` urlencoded into the body (POST) or the query (GET)."""

    valid_form_methods = ("GET", "POST")

    def __init__(self, *args: Any, formdata: Mapping | Iterable | None = None, **kwargs: Any):
        if formdata and "method" not in kwargs:
            kwargs["method"] = "POST"
        super().__init__(*args, **kwargs)
        if not formdata:
            return
        items = formdata.items() if isinstance(formdata, Mapping) else formdata
        query = urlencode([(k, v) for k, v in items if v is not None], doseq=True)
        if self.method == "POST":
            self.headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
            self.body = query.encode(self.encoding)
        else:
            self.url = _with_query(self.url, query)

    @classmethod
    def from_response(
        cls,
        response: Response,
        formname: str | None = None,
        formid: str | None = None,
        formnumber: int = 0,
        formdata: Mapping | Iterable | None = None,
        clickdata: Mapping[str, str] | None = None,
        dont_click: bool = False,
        formxpath: str | None = None,
        formcss: str | None = None,
        **kwargs: Any,
    ) -> FormRequest:
        """The submission of a form of ``response`` with its fields as the page fills them
        (hidden ones, a CSRF token among them) and ``formdata`` over them; built by
        ``form2request``. The form is the first that ``formcss``, ``formxpath``, ``formid``
        or ``formname`` finds, else the ``formnumber``-th of the page."""
        from form2request import form2request

        form = _find_form(response, formname, formid, formnumber, formxpath, formcss)
        click: Any = False if dont_click else None
        if clickdata and not dont_click:
            conditions = " and ".join(f"@{k}={json.dumps(str(v))}" for k, v in clickdata.items())
            found = form.xpath(f".//*[({conditions}) and (self::input or self::button)]")
            if not found:
                raise ValueError(f"no clickable element matching clickdata {dict(clickdata)}")
            click = found[0].root
        method = kwargs.pop("method", None)
        built = form2request(form, formdata, click=click, method=method)
        base = urljoin(response.url, "")
        headers = [*built.headers, *_pairs(kwargs.pop("headers", None))]
        request = cls(urljoin(base, built.url), method=built.method, headers=headers,
                      body=built.body, **kwargs)  # fmt: skip
        return request


def _pairs(headers: Mapping | Iterable | None) -> list[tuple[str, Any]]:
    if not headers:
        return []
    return list(headers.items() if isinstance(headers, Mapping) else headers)


def _find_form(
    response: Response,
    formname: str | None,
    formid: str | None,
    formnumber: int,
    formxpath: str | None,
    formcss: str | None,
) -> parsel.Selector:
    if formcss is not None:
        found = response.css(formcss)
        forms = [f for s in found for f in s.xpath("ancestor-or-self::form")]
        if not forms:
            raise ValueError(f"No <form> element found with {formcss}")
        return forms[0]
    if formxpath is not None:
        found = response.xpath(formxpath)
        forms = [f for s in found for f in s.xpath("ancestor-or-self::form")]
        if not forms:
            raise ValueError(f"No <form> element found with {formxpath}")
        return forms[0]
    for attribute, value in (("id", formid), ("name", formname)):
        if value is not None:
            forms = response.xpath(f"//form[@{attribute}={json.dumps(value)}]")
            if forms:
                return forms[0]
    forms = response.xpath("//form")
    if not forms:
        raise ValueError(f"No <form> element found in {response}")
    if formnumber >= len(forms):
        raise IndexError(f"Form number {formnumber} not found in {response}")
    return forms[formnumber]


class Response:
    """A fetched answer as a callback sees it."""

    def __init__(
        self,
        url: str,
        status: int = 200,
        headers: Mapping | Iterable | None = None,
        body: bytes = b"",
        request: Request | None = None,
        flags: list[str] | None = None,
        ip_address: str | None = None,
    ) -> None:
        self.url = url
        self.status = status
        self.headers = Headers(headers)
        self.body = body
        self.request = request
        self.flags = list(flags or [])
        self.ip_address = ip_address
        self._text: str | None = None
        self._encoding: str | None = None
        self._selector: parsel.Selector | None = None
        self._soup: Any = None

    def __repr__(self) -> str:
        return f"<{self.status} {self.url}>"

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

    def _decode(self) -> None:
        content_type = self.headers.get("Content-Type", b"").decode("latin-1")
        self._encoding, self._text = html_to_unicode(content_type, self.body)

    @property
    def text(self) -> str:
        if self._text is None:
            self._decode()
        return self._text

    @property
    def encoding(self) -> str:
        if self._encoding is None:
            self._decode()
        return self._encoding

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.text)

    @property
    def selector(self) -> parsel.Selector:
        if self._selector is None:
            content_type = self.headers.get("Content-Type", b"").decode("latin-1").lower()
            kind = "xml" if "xml" in content_type and "html" not in content_type else "html"
            self._selector = parsel.Selector(text=self.text, type=kind, base_url=self.url)
        return self._selector

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

    def urljoin(self, url: str) -> str:
        """``url`` made absolute against the page's base (its ``<base href>`` if it has one)."""
        base = self.url
        if self.body and b"<base" in self.body[:65536].lower():
            href = self.css("base::attr(href)").get()
            if href:
                base = urljoin(self.url, href.strip())
        return urljoin(base, url)

    def follow(
        self, url: str | parsel.Selector, callback: Callback = None, **kwargs: Any
    ) -> Request:
        """A request for ``url`` (relative, an ``<a>``/``<link>`` selector or an attribute
        selector), with the arguments of ``Request``."""
        if isinstance(url, parsel.Selector):
            url = _url_from_selector(url)
        elif isinstance(url, parsel.SelectorList):
            raise ValueError("SelectorList is not supported: follow one selector, or follow_all")
        if url == "":
            raise ValueError("url can't be empty")
        cls = kwargs.pop("cls", Request)
        return cls(self.urljoin(url.strip()), callback=callback, **kwargs)

    def follow_all(
        self,
        urls: Iterable[str | parsel.Selector] | parsel.SelectorList | None = None,
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
            urls = self.css(css) if css is not None else self.xpath(xpath)
        for url in urls:
            try:
                yield self.follow(url, callback=callback, **kwargs)
            except ValueError:  # a selected element without a link
                continue


def _url_from_selector(sel: parsel.Selector) -> str:
    if isinstance(sel.root, str):  # an attribute or text selection
        return sel.root.strip()
    tag = getattr(sel.root, "tag", "")
    if tag not in ("a", "link"):
        raise ValueError(f"Only <a> and <link> elements are supported; got <{tag}>")
    href = sel.root.get("href")
    if href is None:
        raise ValueError(f"<{tag}> element has no href attribute: {sel}")
    return href.strip()


class TextResponse(Response):
    """Scrapy's name for a response with a text body: the same class here."""


class HtmlResponse(TextResponse):
    """Scrapy's name for an HTML response: the same class here."""


class XmlResponse(TextResponse):
    """Scrapy's name for an XML response: the same class here."""


class Failure:
    """What an errback receives, shaped as the Twisted ``Failure`` Scrapy passes: ``value``
    (the exception the request ended with; its ``reason`` is the URL's outcome code),
    ``request``, ``response`` (the server's answer for an HTTP error: its status, headers and
    the start of its body; else None), ``check()`` and ``getErrorMessage()``."""

    def __init__(self, value: BaseException, request: Request, response: Response | None = None):
        self.value = value
        self.type = type(value)
        self.request = request
        self.response = response
        if response is not None and not hasattr(value, "response"):
            value.response = response  # as Scrapy's HttpError carries it

    def check(self, *types: type) -> type | None:
        """The first of ``types`` the exception is an instance of (by class or by name)."""
        for kind in types:
            name = kind if isinstance(kind, str) else kind.__name__
            if isinstance(kind, type) and isinstance(self.value, kind):
                return kind
            if any(c.__name__ == name for c in self.type.__mro__):
                return kind
        return None

    def getErrorMessage(self) -> str:  # noqa: N802 (Twisted's name)
        return str(self.value)

    def __repr__(self) -> str:
        return f"<Failure {self.type.__name__}: {self.value}>"
