"""Requests of the spider API, named and shaped as Scrapy's (responses: ``response.py``).

``Request`` holds what the platform needs to send a request later, from any worker: its
method, URL, headers, body, the *name* of its callback (a method of the spider, so that it
survives a restart), ``cb_kwargs`` and ``meta`` (both JSON). ``JsonRequest`` and
``FormRequest`` build bodies; ``FormRequest.from_response`` submits a page's form.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from types import MethodType
from typing import Any, Protocol
from urllib.parse import urlencode, urljoin, urlsplit, urlunsplit

import parsel
from parsel.csstranslator import HTMLTranslator
from w3lib.html import strip_html5_whitespace
from w3lib.url import safe_url_string

from crawlplatform.spiders import porting
from crawlplatform.spiders.curl import curl_to_request_kwargs
from crawlplatform.spiders.headers import Headers

Callback = Callable[..., Any] | str | None


class Page(Protocol):
    """What ``FormRequest.from_response`` reads of a response (``response.py``)."""

    url: str
    encoding: str

    def urljoin(self, url: str) -> str: ...

    def xpath(self, query: str) -> parsel.SelectorList: ...


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
    head = _PLAIN_HEAD.match(url)
    if (head is not None and _ESCAPE.search(url) is None and url[-1] not in "?#"
            and "?#" not in url  # an empty query, or fragment at the end, is dropped
            and url.count("#") < 2  # a "#" in the fragment is escaped
            and "'" not in url  # escaped in a query
            and (head.group(1) is None or int(head.group(1)) <= 65535)):  # fmt: skip
        return url
    return safe_url_string(url)  # (a port out of range raises ValueError, as Scrapy's does)


@lru_cache(maxsize=64)
def _ascii_compatible(encoding: str) -> bool:
    """Whether ``encoding`` spells ASCII as ASCII (an ASCII URL is then escaped alike in it
    and in UTF-8; not so in UTF-16)."""
    probe = "".join(map(chr, range(128)))
    try:
        return probe.encode(encoding) == probe.encode("ascii")
    except (LookupError, UnicodeError):
        return False


_ESCAPE = re.compile(r"[^A-Za-z0-9\-._~:/?#@!$&'()*+,;=%]")  # what safe_url_string escapes
# A scheme and a plain authority: a lower-case host name or IPv6 address and a port written as
# a number (userinfo, upper case, a port of another spelling: safe_url_string's to rewrite)
_PLAIN_HEAD = re.compile(r"[a-z][a-z0-9+.-]*://(?:[a-z0-9.-]+|\[[0-9a-f:.]+\])"
                         r"(?::([1-9][0-9]{0,4}))?(?:/|$)")  # fmt: skip


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
        cookies: Mapping[str, str] | Iterable[Mapping[str, Any]] | None = None,
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
            plain = encoding == "utf-8" or (url.isascii() and _ascii_compatible(encoding))
            url = safe_url(url) if plain else safe_url_string(url, encoding)
        if "://" not in url and not url.startswith(("about:", "data:")):  # Scrapy's own check
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
            self._cookies = _cookies(cookies)
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

    @classmethod
    def from_curl(cls, curl_command: str, ignore_unknown_options: bool = True,
                  **kwargs: Any) -> Request:  # fmt: skip
        """The request a curl command makes (``curl.py``), as Scrapy's ``from_curl``: its
        method, URL, headers, cookies and body, ``kwargs`` over them."""
        return cls(**{**curl_to_request_kwargs(curl_command, ignore_unknown_options), **kwargs})

    def replace(self, **changes: Any) -> Request:
        """A copy with some arguments changed, as Scrapy's ``Request.replace`` (``cls``: of
        another class). New ``data`` (a ``JsonRequest``'s) or ``formdata`` (a
        ``FormRequest``'s) make the body again, as the class's constructor does; the method
        stays the request's unless ``method`` is changed too, as in Scrapy."""
        cls = changes.pop("cls", type(self))
        remade = {k: changes.pop(k) for k in ("data", "formdata", "dumps_kwargs") if k in changes}
        fields = {
            "url": self.url, "callback": self.callback, "method": self.method,
            "headers": self.headers.pairs(), "body": self.body, "cookies": self.cookies,
            "meta": self.meta, "encoding": self.encoding, "priority": self.priority,
            "dont_filter": self.dont_filter, "errback": self.errback, "flags": self.flags,
            "cb_kwargs": self.cb_kwargs,
        }  # fmt: skip
        fields.update(changes)
        dumps_kwargs = getattr(self, "_dumps_kwargs", None)  # a JsonRequest's, kept as Scrapy's
        if dumps_kwargs is not None and issubclass(cls, JsonRequest):
            remade.setdefault("dumps_kwargs", dumps_kwargs)
        if {"data", "formdata"} & remade.keys():
            if "body" not in changes:
                del fields["body"]
            return cls(**fields, **remade)
        copy = cls.__new__(cls)
        Request.__init__(copy, **fields)  # the body as it is, not encoded again
        if "dumps_kwargs" in remade:
            copy._dumps_kwargs = {"sort_keys": True, **remade["dumps_kwargs"]}
        return copy

    def copy(self) -> Request:
        return self.replace()

    def __repr__(self) -> str:
        return f"<{self.method} {self.url}>"


def _cookies(cookies: Mapping[str, str] | Iterable[Mapping[str, Any]]) -> dict | list[dict]:
    """A request's cookies as it was given them: a dict of names and values, or Scrapy's list
    of dicts (``name``, ``value`` and the ``domain`` and ``path`` the jar keeps them for)."""
    if isinstance(cookies, Mapping):
        return dict(cookies)
    return [{k: str(v) for k, v in c.items() if k in ("name", "value", "domain", "path")}
            for c in cookies]  # fmt: skip


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
        self._dumps_kwargs = {"sort_keys": True, **(dumps_kwargs or {})}
        if data is not None and kwargs.get("body") is None:
            kwargs["body"] = json.dumps(data, **self._dumps_kwargs)
            kwargs.setdefault("method", "POST")
        super().__init__(url, *args, **kwargs)
        self.headers.setdefault("Content-Type", "application/json")
        self.headers.setdefault("Accept", "application/json, text/javascript, */*; q=0.01")

    @property
    def dumps_kwargs(self) -> dict:
        """What ``json.dumps`` is given for ``data``, here and in a ``replace``'s."""
        return self._dumps_kwargs


class FormRequest(Request):
    """A form submission: ``formdata`` urlencoded in the request's encoding into the body
    (POST) or as the URL's query (GET)."""

    valid_form_methods = ("GET", "POST")

    def __init__(self, *args: Any, formdata: Mapping | Iterable | None = None, **kwargs: Any):
        if formdata and kwargs.get("method") is None:
            kwargs["method"] = "POST"
        super().__init__(*args, **kwargs)
        if not formdata:
            return
        items = formdata.items() if isinstance(formdata, Mapping) else formdata
        query = _urlencode(items, self.encoding)
        if self.method == "POST":
            self.headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
            self.body = query.encode("ascii")
        else:
            self.url = urlunsplit(urlsplit(self.url)._replace(query=query))

    @classmethod
    def from_response(
        cls,
        response: Page,
        formname: str | None = None,
        formid: str | None = None,
        formnumber: int = 0,
        formdata: Mapping | Iterable | None = None,
        clickdata: Mapping[str, Any] | None = None,
        dont_click: bool = False,
        formxpath: str | None = None,
        formcss: str | None = None,
        **kwargs: Any,
    ) -> FormRequest:
        """The submission of a form of ``response``, as Scrapy's: its fields as the page fills
        them (hidden ones, a CSRF token among them), its first submit button (or the one
        ``clickdata`` names) unless ``dont_click``, and ``formdata`` over them; encoded as the
        page is. The form is the one ``formname``, ``formid``, ``formxpath`` or ``formcss``
        finds, else the ``formnumber``-th of the page."""
        kwargs.setdefault("encoding", response.encoding)
        if formcss is not None:
            formxpath = HTMLTranslator().css_to_xpath(formcss)
        form = _find_form(response, formname, formid, formnumber, formxpath)
        fields = _form_fields(form, formdata, dont_click, clickdata)
        url = _form_url(response, form, kwargs.pop("url", None))
        method = kwargs.pop("method", form.method)
        if method is not None:
            method = method.upper()
            if method not in cls.valid_form_methods:
                method = "GET"  # a browser's fallback (``dialog``, a typo)
        return cls(url=url, method=method, formdata=fields, **kwargs)


def _urlencode(items: Iterable, encoding: str) -> str:
    """Form fields as a query string in ``encoding``: a list's values each once, None left
    out."""
    pairs = [(_encoded(k, encoding), _encoded(v, encoding))
             for k, values in items
             for v in (values if _listlike(values) else [values])
             if v is not None]  # fmt: skip
    return urlencode(pairs, doseq=True)


def _listlike(value: Any) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, str | bytes)


def _encoded(value: Any, encoding: str) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode(encoding)


def _form_url(response: Page, form: Any, url: str | None) -> str:
    """Where the form goes: ``url`` if given, else its action, against the page's base (its
    ``<base href>`` too, as Scrapy's selector has it); the base itself without an action."""
    base = response.urljoin("")
    if url is None:
        action = form.get("action")
        return base if action is None else urljoin(base, strip_html5_whitespace(action))
    return urljoin(base, url)


def _find_form(response: Page, formname: str | None, formid: str | None, formnumber: int,
               formxpath: str | None) -> Any:  # fmt: skip
    """The form's lxml element, found as Scrapy finds it."""
    forms = response.xpath("//form")
    if not forms:
        raise ValueError(f"No <form> element found in {response}")
    for attribute, value in (("name", formname), ("id", formid)):
        if value is not None:
            found = response.xpath(f"//form[@{attribute}={_literal(value)}]")
            if found:
                return found[0].root
    if formxpath is not None:
        nodes = response.xpath(formxpath)
        element = nodes[0].root if nodes else None
        while element is not None and not isinstance(element, str):
            if element.tag == "form":
                return element
            element = element.getparent()
        raise ValueError(f"No <form> element found with {formxpath}")
    if formnumber >= len(forms):
        raise IndexError(f"Form number {formnumber} not found in {response}")
    return forms[formnumber].root


_FIELDS = ('descendant::textarea|descendant::select|descendant::input[not(@type) or @type['
           ' not(re:test(., "^(?:submit|image|reset)$", "i")) and (../@checked or'
           '  not(re:test(., "^(?:checkbox|radio)$", "i")))]]')  # fmt: skip
_CLICKABLES = ('descendant::input[re:test(@type, "^(submit|image)$", "i")]'
               '|descendant::button[not(@type) or re:test(@type, "^submit$", "i")]')  # fmt: skip
_RE = {"re": "http://exslt.org/regular-expressions"}


def _form_fields(form: Any, formdata: Mapping | Iterable | None, dont_click: bool,
                 clickdata: Mapping[str, Any] | None) -> list[tuple[str, Any]]:  # fmt: skip
    """The (name, value) pairs the form submits: its fields but those ``formdata`` sets, the
    clicked button, then ``formdata`` (a None value leaves a field out)."""
    try:
        given = dict(formdata or ()).keys()
    except (ValueError, TypeError):
        raise ValueError("formdata should be a dict or iterable of tuples") from None
    values = [(k, "" if v is None else v)
              for k, v in (_field_value(e) for e in form.xpath(_FIELDS, namespaces=_RE))
              if k and k not in given]  # fmt: skip
    if not dont_click:
        clicked = _clicked(clickdata, form)
        if clicked and clicked[0] is not None and clicked[0] not in (formdata or ()):
            values.append(clicked)  # (Scrapy's test: a list of pairs never holds a name)
    items = formdata.items() if isinstance(formdata, Mapping) else formdata or []
    values.extend((k, v) for k, v in items if v is not None)
    return values


def _field_value(element: Any) -> tuple[str | None, Any]:
    """A field's name and value; a single ``<select>`` with nothing selected sends its first
    option, as a browser does."""
    if element.tag == "select" and element.value is None and not element.multiple:
        options = element.value_options
        return (element.name, options[0]) if options else (None, None)
    value = element.value
    return element.name, list(value) if element.tag == "select" and element.multiple else value


def _clicked(clickdata: Mapping[str, Any] | None, form: Any) -> tuple[str, str] | None:
    """The button a click submits with: the first, or the one ``clickdata`` names (``nr``: its
    place among the form's inputs; else attributes that only it has)."""
    clickables = form.xpath(_CLICKABLES, namespaces=_RE)
    if not clickables:
        return None
    if clickdata is None:
        return clickables[0].get("name"), clickables[0].get("value") or ""
    nr = clickdata.get("nr")
    if nr is not None:
        inputs = list(form.inputs)
        if -len(inputs) <= nr < len(inputs):
            return inputs[nr].get("name"), inputs[nr].get("value") or ""
    conditions = "".join(f"[@{k}={_literal(str(v))}]" for k, v in clickdata.items())
    found = form.xpath(".//*" + conditions)
    if len(found) > 1:
        raise ValueError(f"Multiple elements found matching the criteria in clickdata: "
                         f"{dict(clickdata)!r}")  # fmt: skip
    if not found:
        raise ValueError(f"No clickable element matching clickdata: {dict(clickdata)!r}")
    return found[0].get("name"), found[0].get("value") or ""


def _literal(value: str) -> str:
    """``value`` as an XPath string literal (XPath has no escapes: ``concat()`` joins the
    parts of a value that holds both kinds of quote)."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    return "concat(" + ", \"'\", ".join(f"'{part}'" for part in value.split("'")) + ")"


def __getattr__(name: str) -> Any:
    """A refused name of Scrapy's ``scrapy.http`` (``XmlRpcRequest``) fails with its reason.
    Scrapy's module holds the responses too: the package puts them here (they build on this
    module, which therefore cannot import them)."""
    reason = porting.refusal(name)
    if reason is not None:
        raise ImportError(reason, name=name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
