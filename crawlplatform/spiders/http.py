"""Requests of the spider API, named and shaped as Scrapy's (responses: ``response.py``).

``Request`` holds what the platform needs to send a request later, from any worker: its
method, URL, headers, body, the *name* of its callback (a method of the spider, so that it
survives a restart), ``cb_kwargs`` and ``meta`` (both JSON). ``JsonRequest`` and
``FormRequest`` build bodies; ``FormRequest.from_response`` submits a page's form.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache
from types import MethodType
from typing import Any, Protocol
from urllib.parse import urlencode, urljoin, urlsplit, urlunsplit

import parsel
from w3lib.url import safe_url_string

Callback = Callable[..., Any] | str | None


class Page(Protocol):
    """What ``FormRequest.from_response`` reads of a response (``response.py``)."""

    url: str

    def urljoin(self, url: str) -> str: ...

    def css(self, query: str) -> parsel.SelectorList: ...

    def xpath(self, query: str) -> parsel.SelectorList: ...


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
    if type(callback) is MethodType:  # a spider's method, as most are: bound, so it has a self
        return callback.__name__
    if callback is None or isinstance(callback, str):
        return callback
    name = getattr(callback, "__name__", None)
    if not name or getattr(callback, "__self__", None) is None:
        raise TypeError(
            f"a callback must be a method of the spider (or its name), not {callback!r}: "
            "requests are stored and their callbacks found again by name"
        )
    return name


@lru_cache(maxsize=65536)
def safe_url(url: str) -> str:
    """``url`` as w3lib's ``safe_url_string`` makes it (as Scrapy's Request does every URL:
    spaces and non-ASCII escaped, the host in IDNA), cached (a site's pages link to the same
    URLs) and skipped where it would change nothing (it takes 3.5 µs)."""
    if (_ESCAPE.search(url) is None and _PLAIN_HEAD.match(url) and url[-1] not in "?#"
            and "?#" not in url):  # an empty query, or fragment at the end, is dropped
        return url
    return safe_url_string(url)


_ESCAPE = re.compile(r"[^A-Za-z0-9\-._~:/?#@!$&'()*+,;=%]")  # what safe_url_string escapes
_PLAIN_HEAD = re.compile(r"[a-z][a-z0-9+.-]*://[^A-Z/?#]*(?:/|$)")  # a path; no capital to lower


class _MadeOnUse:
    """A dict or list attribute made on first use, as Scrapy's ``meta`` and ``cb_kwargs``:
    most requests (a page's links) leave ``meta``, ``cb_kwargs``, ``cookies`` and ``flags``
    empty."""

    def __init__(self, make: type[dict] | type[list]) -> None:
        self.make = make

    def __set_name__(self, owner: type, name: str) -> None:
        self.kept = "_" + name

    def __get__(self, request: Any, owner: type | None = None) -> Any:
        if request is None:
            return self
        value = request.__dict__.get(self.kept)
        if value is None:
            value = request.__dict__[self.kept] = self.make()
        return value

    def __set__(self, request: Any, value: dict | list | None) -> None:
        request.__dict__[self.kept] = value


class Request:
    """A request to make later, from any worker; its callback runs on the response."""

    meta = _MadeOnUse(dict)
    cb_kwargs = _MadeOnUse(dict)
    cookies = _MadeOnUse(dict)
    flags = _MadeOnUse(list)
    # What a page's links leave as it is: the class's, so that a link's request sets only
    # its URL and callback (a docs page yields about 300).
    method = "GET"
    encoding = "utf-8"
    body = b""
    priority = 0
    dont_filter = False
    errback = None
    _errback = None
    _headers: Headers | None = None

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
        if not (meta and meta.get("verbatim_url")):  # Scrapy's way to keep a URL as it is
            url = safe_url(url) if encoding == "utf-8" else safe_url_string(url, encoding)
        if ":" not in url:  # Scrapy's own check, cheap enough for every link of a page
            raise ValueError(f"Missing scheme in request url: {url}")
        self.url = url
        self.callback = callback
        self._callback = None if callback is None else _callback_name(callback)
        if errback is not None:
            self.errback, self._errback = errback, _callback_name(errback)
        if method != "GET":
            self.method = str(method).upper()
        if encoding != "utf-8":
            self.encoding = encoding
        if headers:
            self._headers = Headers(headers, encoding)
        if body:
            self.body = body.encode(encoding) if isinstance(body, str) else body
        if cookies:
            self._cookies = dict(cookies)
        if meta:
            self._meta = dict(meta)
        if priority:
            self.priority = int(priority)
        if dont_filter:
            self.dont_filter = True
        if flags:
            self._flags = list(flags)
        if cb_kwargs:
            self._cb_kwargs = dict(cb_kwargs)

    @property
    def headers(self) -> Headers:
        if self._headers is None:
            self._headers = Headers(None, self.encoding)
        return self._headers

    @headers.setter
    def headers(self, headers: Mapping | Iterable | None) -> None:
        self._headers = headers if isinstance(headers, Headers) else Headers(headers, self.encoding)

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
        response: Page,
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
        headers = [*built.headers, *_pairs(kwargs.pop("headers", None))]
        return cls(_form_url(response, form, built), method=built.method, headers=headers,
                   body=built.body, **kwargs)  # fmt: skip


def _form_url(response: Page, form: parsel.Selector, built: Any) -> str:
    """Where the form goes: its action against the page's base (its ``<base href>`` too, as
    Scrapy resolves it), the page itself without one; a GET carries the fields as its query."""
    action = form.attrib.get("action")
    url = response.url if action is None else urljoin(response.urljoin(""), action.strip())
    if built.method == "GET":
        parts = urlsplit(url)
        url = urlunsplit(parts._replace(query=urlsplit(built.url).query, fragment=""))
    return url


def _pairs(headers: Mapping | Iterable | None) -> list[tuple[str, Any]]:
    if not headers:
        return []
    return list(headers.items() if isinstance(headers, Mapping) else headers)


def _find_form(
    response: Page,
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
