"""A spider's request as the frontier keeps it, and back: its row (JSON), its key and rank,
and the Request a stored row stands for.

Reads ``SPIDER_BODY_MAX_BYTES`` and ``SPIDER_REQUEST_MAX_BYTES``.

A request's frontier key is its fingerprint: the canonical URL for a GET without a body
(so a spider's links dedup as any crawl's), else the canonical URL with
``#METHOD:<sha1 of the body>`` appended (canonical URLs have no fragment); ``dont_filter``
adds a mark unique to where it was yielded (the yielding URL's id and the request's place
among what it yielded, or ``start.N``), so that the same page run again yields the same keys.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import hashlib
import json
import logging
import sys
from typing import Any
from urllib.parse import urlsplit

from w3lib.http import basic_auth_header

from crawlplatform.spiders import Request, Spider
from tasks.defaults import setting
from tasks.fetch import outcomes

UNSAFE_RETRY = "retry_on_timeout"  # meta key: a POST (or other non-GET) is retried on a timeout
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")

log = logging.getLogger(__name__)


class FilledTimeout(float):
    """A ``download_timeout`` the platform filled in (the job's deadline, as Scrapy's middleware
    fills in ``DOWNLOAD_TIMEOUT``), not the request's own: a request that carries it on
    (``meta=response.meta``) is not kept to it, so that it is fetched under the job's deadline
    of its own time."""


def record(request: Request, spider: Spider, restarted: bool = False) -> dict:
    """A request as its frontier row keeps it (JSON); ValueError says what cannot be kept.
    ``restarted``: a request at depth 0 that is no start request (``started``)."""
    callback = _method_name(spider, request, request.callback, request.callback_name)
    if callback == "parse" and type(spider)._parse is Spider._parse:
        callback = None  # the default callback by another name: the row may be a plain one
    errback = _method_name(spider, request, request.errback, request.errback_name)
    if request.body and len(request.body) > setting("SPIDER_BODY_MAX_BYTES"):  # links have none
        raise ValueError(f"{request}: body of {len(request.body)} bytes is above "
                         f"SPIDER_BODY_MAX_BYTES")  # fmt: skip
    headers = request.headers.pairs()
    if (credentials := _basic_auth(request, spider)) is not None:
        headers.append(("Authorization", credentials))
    kept = {"url": request.url, "method": request.method, "headers": headers,
            "body": base64.b64encode(request.body).decode() if request.body else "",
            "callback": callback, "errback": errback, "cb_kwargs": request.cb_kwargs,
            "meta": request.meta, "cookies": request.cookies,
            "dont_filter": request.dont_filter}  # fmt: skip
    if restarted:
        kept["restarted"] = True
    if isinstance(request.meta.get("download_timeout"), FilledTimeout):
        kept["meta"] = {k: v for k, v in request.meta.items() if k != "download_timeout"}
    if not (request.cb_kwargs or request.meta or request.cookies or kept["headers"]):
        return kept  # nothing of the user's to check: a page's links mostly
    kept["meta"], kept["cb_kwargs"] = _tagged(kept["meta"]), _tagged(kept["cb_kwargs"])
    try:
        text = json.dumps(kept, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{request}: meta, cb_kwargs and cookies must be JSON: {exc}") from None
    if len(text) > setting("SPIDER_REQUEST_MAX_BYTES"):
        raise ValueError(f"{request}: headers, cb_kwargs and meta take {len(text)} bytes, above "
                         f"SPIDER_REQUEST_MAX_BYTES")  # fmt: skip
    return kept


def _basic_auth(request: Request, spider: Spider) -> str | None:
    """The ``Authorization`` header Scrapy's ``HttpAuthMiddleware`` adds to a request that has
    none of its own: from its ``meta``'s ``http_user`` and ``http_pass`` (for its
    ``http_auth_domain`` and the domain's subdomains, if it names one), else the spider's
    attributes of those names (``-a http_user=...``), for its ``http_auth_domain`` (None:
    every host), else its ``allowed_domains``."""
    meta = request.meta
    user, password = meta.get("http_user", ""), meta.get("http_pass", "")
    if user or password:
        domains = [meta.get("http_auth_domain")]
    else:
        user, password = getattr(spider, "http_user", ""), getattr(spider, "http_pass", "")
        if not (user or password):
            return None
        # with no http_auth_domain, the spider's own domains only (Scrapy 2.19 fails to read
        # it, and then sends them to every host): None says every host
        domains = [getattr(spider, "http_auth_domain", None)] if hasattr(
            spider, "http_auth_domain") else list(getattr(spider, "allowed_domains", None) or [])
        if not domains:
            return None
    if "Authorization" in request.headers:
        return None
    host = (urlsplit(request.url).hostname or "").lower()
    if None not in domains and not any(host == str(d).lower() or host.endswith(
            "." + str(d).lower()) for d in domains):  # fmt: skip
        return None
    return basic_auth_header(user, password).decode("latin-1")


def _method_name(spider: Spider, request: Request, function: Any, name: str | None) -> str | None:
    """The name the spider holds ``function`` under: ``name``, unless a decorator without
    ``functools.wraps`` named it after its wrapper; then the attribute of the spider's class
    that holds it. ValueError if the spider has no such method."""
    if name is None or callable(getattr(spider, name, None)):
        return name
    if function is not None and not isinstance(function, str):
        wanted = getattr(function, "__func__", function)
        for cls in type(spider).__mro__:
            for attribute, value in vars(cls).items():
                if value is wanted:
                    return attribute
    raise ValueError(f"{request}: the spider has no method {name!r} to call back")


def key(canonical: str, kept: dict, unique: str = "") -> str:
    """The request's frontier key: its fingerprint (see the module's docstring)."""
    body = kept["body"]
    if kept["method"] == "GET" and not body and not kept["dont_filter"]:
        return canonical
    digest = hashlib.sha1(base64.b64decode(body), usedforsecurity=False).hexdigest()
    suffix = f"#{kept['method']}:{digest}"
    return canonical + suffix + (f":{unique}" if unique else "")


def stored(kept: dict, row_key: str) -> dict | None:
    """What the row keeps of the request: nothing for a GET for ``parse`` with nothing else
    to remember, of the URL its row has (its canonical form, but for a fragment). Else the
    row keeps the URL as the spider gave it, which is what is fetched, as Scrapy sends it (a
    query's order, ``?flag`` without ``=``), while the canonical URL is what it is
    deduplicated by."""
    plain = (kept["url"].partition("#")[0] in (row_key, row_key.removesuffix("/"))
             and kept["method"] == "GET" and not kept["body"] and not kept["headers"]
             and kept["callback"] is None and not kept["errback"] and not kept["cb_kwargs"]
             and not kept["meta"] and not kept["cookies"] and not kept["dont_filter"]
             and not kept.get("restarted"))  # fmt: skip
    return None if plain else kept


def started(depth: int, kept: dict | None) -> bool:
    """Whether a row at ``depth`` holds one of the spider's start requests: at depth 0, and
    not a request that a ``depth_reset`` or an errback's failure put there (``record``)."""
    return depth == 0 and not (kept or {}).get("restarted")


def rank(request: Request) -> int:
    """The request's ``priority`` as the frontier orders by it: Scrapy's meaning (higher
    first, negative allowed), within the column's range (-32768 to 32767)."""
    return max(-32768, min(32767, request.priority))


def leaves_domains(dont_filter: bool, meta: Any) -> bool:
    """Whether a spider's request may go beyond the job's domains: ``dont_filter``, or
    ``allow_offsite`` in its ``meta``, as Scrapy 2.19's ``OffsiteMiddleware`` lets it through
    (the job's patterns and the network guard still hold)."""
    return bool(dont_filter or (isinstance(meta, dict) and meta.get("allow_offsite")))


def ignores_robots(meta: Any) -> bool:
    """Whether a request's ``meta`` says ``dont_obey_robotstxt``: Scrapy's
    ``RobotsTxtMiddleware`` lets it through whatever robots.txt says (a job may ignore
    robots.txt as a whole too)."""
    return bool(isinstance(meta, dict) and meta.get("dont_obey_robotstxt"))


def plain_get(request: Request) -> bool:
    """A request whose frontier key is its canonical URL."""
    return request.method == "GET" and not request.body and not request.dont_filter


def request_of(url: str, kept: dict | None, priority: int = 0) -> Request:
    """The Request a stored row stands for (a plain row: a GET of its URL for the default
    callback), with the row's ``priority``."""
    if not kept:
        return Request(url, priority=priority)
    return Request(kept.get("url") or url, callback=kept.get("callback"),
                   method=kept.get("method", "GET"), headers=kept.get("headers"),
                   body=base64.b64decode(kept.get("body") or ""),
                   meta=_untagged(kept.get("meta")), cookies=kept.get("cookies"),
                   priority=priority, dont_filter=kept.get("dont_filter", False),
                   errback=kept.get("errback"),
                   cb_kwargs=_untagged(kept.get("cb_kwargs")))  # fmt: skip


# Values of meta and cb_kwargs that JSON has no type for, kept as {_TYPE: name, "v": JSON}
# and made again when the request is (a partial item's Decimal price, a date, a set of seen
# IDs, a tuple: what a Scrapy spider carries in them, which Scrapy's memory keeps as they are)
_TYPE = "__crawlplatform_type__"
_MADE = {
    "decimal": decimal.Decimal, "datetime": datetime.datetime.fromisoformat,
    "date": datetime.date.fromisoformat, "time": datetime.time.fromisoformat,
    "bytes": base64.b64decode, "tuple": lambda v: tuple(_untagged(v)),
    "set": lambda v: set(_untagged(v)), "frozenset": lambda v: frozenset(_untagged(v)),
}  # fmt: skip


def _tagged(value: Any) -> Any:
    """``value`` with what JSON has no type for tagged (``_MADE``'s types, and an item of a
    class of its own: an ``Item``, a dataclass, an attrs or pydantic item);
    anything else left as it is, for ``json.dumps`` to take or refuse."""
    if value is None or isinstance(value, str | int | float):
        return value
    if type(value) is dict:
        tagged = {k: _tagged(v) for k, v in value.items()}
        # a dict of the spider's (a page's data, say) that holds the tag's key is kept as a
        # dict: never read back as a tag
        return {_TYPE: "dict", "v": tagged} if _TYPE in value else tagged
    if isinstance(value, list):
        return [_tagged(v) for v in value]
    for kind, name in _CONTAINERS:
        if isinstance(value, kind):
            return {_TYPE: name, "v": [_tagged(v) for v in value]}
    for kind, name, text in _SCALARS:  # a datetime before a date: it is one
        if isinstance(value, kind):
            return {_TYPE: name, "v": text(value)}
    made = _item_of_a_class(value)
    if made is not None:
        cls, fields = made
        return {_TYPE: "item", "class": cls, "v": {k: _tagged(v) for k, v in fields.items()}}
    return value


_CONTAINERS = ((tuple, "tuple"), (frozenset, "frozenset"), (set, "set"))
_SCALARS = (
    (decimal.Decimal, "decimal", str),
    (datetime.datetime, "datetime", datetime.datetime.isoformat),
    (datetime.date, "date", datetime.date.isoformat),
    (datetime.time, "time", datetime.time.isoformat),
    (bytes, "bytes", lambda b: base64.b64encode(b).decode()),
)


def _item_of_a_class(value: Any) -> tuple[str, dict] | None:
    """Where an item that is no plain dict finds its class again (``module:qualified
    name``), and its fields; None for anything else. (itemadapter, which imports every item
    library installed, is imported by the first such value, not for a spider's dicts.)"""
    from itemadapter import ItemAdapter

    if not ItemAdapter.is_item(value):
        return None
    cls = type(value)
    return f"{cls.__module__}:{cls.__qualname__}", dict(ItemAdapter(value).items())


def _item(made: dict) -> Any:
    """The item ``_tagged`` kept, of its class again, found among the modules the worker
    has imported (the spider's, and those it imports: no module is imported for a row), and
    only if it is an item class. A class not found, or one its fields no longer make, gives
    the fields as a dict (logged)."""
    from itemadapter import ItemAdapter

    fields = {k: _untagged(v) for k, v in made["v"].items()}
    module, _, name = str(made.get("class")).partition(":")
    cls: Any = sys.modules.get(module)
    for part in name.split("."):
        cls = getattr(cls, part, None)
    try:  # an item class alone (a class that does anything else is never called for a row)
        if isinstance(cls, type) and cls is not dict and ItemAdapter.is_item_class(cls):
            return cls(**fields)
    except (TypeError, ValueError, KeyError) as exc:
        log.warning("meta or cb_kwargs: item of %s not made again (%s): a dict given",
                    made["class"], exc)  # fmt: skip
        return fields
    log.warning("meta or cb_kwargs: no item class %s in this worker: a dict given",
                made.get("class"))  # fmt: skip
    return fields


def _untagged(value: Any) -> Any:
    """``value`` as ``_tagged`` took it."""
    if isinstance(value, dict):
        if value.get(_TYPE) == "dict":
            return {k: _untagged(v) for k, v in value["v"].items()}
        if value.get(_TYPE) == "item":
            return _item(value)
        if _TYPE in value and value[_TYPE] in _MADE:
            return _MADE[value[_TYPE]](value["v"])
        return {k: _untagged(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_untagged(v) for v in value]
    return value


def download_timeout(kept: dict | None) -> float | None:
    """The seconds a spider request asks its download to end within (Scrapy's
    ``download_timeout`` meta key); None if it asks nothing, or nothing that is a number."""
    value = ((kept or {}).get("meta") or {}).get("download_timeout")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def not_retried(kept: dict | None, outcome: outcomes.CrawlOutcome,
                attempt: int) -> outcomes.CrawlOutcome:  # fmt: skip
    """A spider request's ``outcome`` at its ``attempt``, not retried where the request says
    so: a timed-out request that is not safe to send twice (a POST, say) fails at once unless
    its ``meta`` says ``retry_on_timeout`` (the server may have acted on it); with
    ``dont_retry`` in its ``meta`` (Scrapy's), what the site did (a timeout, a refused or
    reset connection, a name that does not resolve, a 5xx or 429) is not retried, nor past
    its ``max_retry_times`` retries (Scrapy's key; the job's attempts still bound it). What
    the platform did (its database away, a lost worker) is retried still."""
    if not kept:
        return outcome
    meta = kept.get("meta") or {}
    if (isinstance(outcome, outcomes.Timeout) and kept.get("method") not in SAFE_METHODS
            and not meta.get(UNSAFE_RETRY)):  # fmt: skip
        outcome.retryable = False
    most = meta.get("max_retry_times")
    retries = most if isinstance(most, int) and not isinstance(most, bool) else None
    site = isinstance(outcome, SITE_FAILURES)
    if site and (meta.get("dont_retry") or (retries is not None and attempt > retries)):
        outcome.retryable = False
    return outcome


SITE_FAILURES = (outcomes.Timeout, outcomes.ConnectionReset, outcomes.ConnectFailed,
                 outcomes.DNSFailure, outcomes.ServerError, outcomes.TooManyRequests,
                 outcomes.RequestTimeout)  # fmt: skip
