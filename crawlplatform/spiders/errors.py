"""What an errback checks a failure against, named as Scrapy's and Twisted's exceptions, so
that a ported errback's ``failure.check(HttpError)``, ``failure.check(TimeoutError,
TCPTimedOutError)`` (older Scrapy) or ``failure.check(DownloadTimeoutError)`` (Scrapy 2.19)
takes the branch it takes under Scrapy.

A failure's ``value`` is the exception Scrapy 2.19 raises for what the request met, so that
``isinstance`` holds as under it: an ``HttpError`` for an answer that is not 2xx, as Scrapy's
``HttpErrorMiddleware`` raises it; for a request with no answer, the 2.19 class its outcome
stands for (``as_raised``); else the platform's outcome. Each has the outcome's ``reason`` (the
URL's outcome code) and ``status`` (``carrying``). ``kinds_of`` gives the classes here that an
outcome stands for, and ``Failure.check`` matches those, and the outcome's own, by class or by
name (so Scrapy's and Twisted's own classes match too).
"""

from __future__ import annotations

import re
from typing import Any


class CloseSpider(Exception):
    """Raised by a callback (or errback) to end the crawl, as Scrapy's: what it yielded
    before commits with its page, but for its requests; nothing not yet fetched is fetched;
    the job finishes once the pages in flight are stored."""

    def __init__(self, reason: str = "cancelled") -> None:
        super().__init__(reason)
        self.reason = reason


class NotConfigured(Exception):
    """Raised by an extension's or a pipeline's ``from_crawler`` (or its ``__init__``) to stay
    off, as in Scrapy: the job runs without it (the message, if any, is logged)."""


class NotSupported(Exception):
    """A feature asked for that is not there, as Scrapy's: an ``XMLFeedSpider.iterator`` it
    does not know, or what the platform cannot do where Scrapy could (connecting to a signal
    it never sends; the message says why)."""


class IgnoreRequest(Exception):
    """A request dropped before an answer: robots.txt, the job's scope, the address guard."""


class HttpError(IgnoreRequest):
    """An answer that is not 2xx; ``failure.value.response`` is it (Scrapy's signature:
    ``HttpError(response, *args)``)."""

    def __init__(self, response: Any = None, *args: Any) -> None:
        self.response = response
        super().__init__(*args)


class ConnectError(Exception):
    """No connection to the host."""


class ConnectionRefusedError(ConnectError):
    pass


class TCPTimedOutError(ConnectError):
    pass


class DNSLookupError(OSError):
    pass


class TimeoutError(Exception):
    """No answer within the fetch's time (connect, read or the whole request)."""


class ConnectionLost(Exception):
    pass


class ResponseNeverReceived(Exception):
    pass


class DownloadConnectionRefusedError(Exception):
    """Scrapy 2.19's name for a refused connection (Twisted's ``ConnectionRefusedError``)."""


class CannotResolveHostError(Exception):
    """Scrapy 2.19's name for a host name that does not resolve (``DNSLookupError``)."""


class DownloadTimeoutError(Exception):
    """Scrapy 2.19's name for a download past its time (Twisted's ``TimeoutError``)."""


class DownloadFailedError(Exception):
    """Scrapy 2.19's name for a response that failed (Twisted's ``ResponseFailed``)."""


class ResponseDataLossError(Exception):
    """Scrapy 2.19's name for a response cut short."""


class DownloadCancelledError(Exception):
    """Scrapy 2.19's name for a download cancelled midway: no outcome here is one (no fetch is
    cancelled), so an errback's check for it imports and never matches."""


class UnsupportedURLSchemeError(Exception):
    """Scrapy 2.19's name for a request of a scheme no handler fetches: no outcome here is one
    (a request that is not http(s) is left out as off the job's scope)."""


# An outcome stands for the exception Scrapy 2.19 raises and for the one older Scrapy raised,
# so that an errback written for either takes its branch.
_BY_REASON: dict[str, tuple[type[Exception], ...]] = {
    "http_4xx": (HttpError,),
    "http_5xx": (HttpError,),
    "http_429": (HttpError,),
    "http_408": (HttpError,),
    "http_3xx": (HttpError,),
    "dns": (DNSLookupError, CannotResolveHostError),
    "connect_timeout": (TCPTimedOutError, TimeoutError, DownloadTimeoutError),
    "read_timeout": (TimeoutError, DownloadTimeoutError),
    "deadline": (TimeoutError, DownloadTimeoutError),
    "connect_error": (ConnectionRefusedError, DownloadConnectionRefusedError),
    "host_unreachable": (ConnectError,),
    "connection_reset": (ConnectionLost, ResponseNeverReceived, DownloadFailedError),
    "protocol_error": (ResponseNeverReceived, DownloadFailedError),
    "too_many_redirects": (IgnoreRequest,),
    "robots": (IgnoreRequest,),
    "out_of_scope": (IgnoreRequest,),
    "blocked_address": (IgnoreRequest,),
    "invalid_url": (ValueError,),  # as Scrapy's Request raises for a URL it cannot make
}


# A host whose circuit is open stands for the failure that opened it (its summary), as the
# request would have failed under Scrapy.
_BY_CAUSE: dict[str, tuple[type[Exception], ...]] = {
    "connection refused": (ConnectionRefusedError, DownloadConnectionRefusedError),
    "connect timeout": (TCPTimedOutError, TimeoutError, DownloadTimeoutError),
    "name does not resolve": (DNSLookupError, CannotResolveHostError),
    "name lookup failed for now": (DNSLookupError, CannotResolveHostError),
}


_DATA_LOSS = re.compile(r"IncompleteRead|ChunkedEncodingError|InvalidChunkLength")


def kinds_of(value: BaseException) -> tuple[type[Exception], ...]:
    """The classes here that an outcome stands for: by its reason (an open circuit's also by
    its cause), and ``HttpError`` for any answer that is not 2xx (a block page refused with a
    403, say)."""
    reason = getattr(value, "reason", "")
    kinds = _BY_REASON.get(reason, ())
    if reason == "host_unreachable":
        kinds += _BY_CAUSE.get(getattr(value, "summary", ""), ())
    if reason == "connection_reset" and _DATA_LOSS.search(str(value)):
        kinds = (ConnectionLost, ResponseDataLossError)  # the body cut short, as 2.19 names it
    status = getattr(value, "status", None)
    if not kinds and status is not None and not 200 <= status < 300:
        return (HttpError,)
    return kinds


# What Scrapy 2.19 raises into an errback for a request that got no answer, by the outcome's
# kinds (``kinds_of``), the first found: an errback's ``isinstance(failure.value, ...)`` holds.
_RAISED = (CannotResolveHostError, DownloadTimeoutError, DownloadConnectionRefusedError,
           ResponseDataLossError, DownloadFailedError, IgnoreRequest, ValueError)  # fmt: skip


def as_raised(outcome: BaseException) -> Exception | None:
    """The exception Scrapy 2.19 raises for a request that ended with ``outcome`` before an
    answer (a timeout, a refused connection, a name that does not resolve, robots.txt, ...),
    with the outcome's message, ``reason`` and ``status`` and the outcome as its cause; None
    where Scrapy names none of its own (the platform's outcome stands)."""
    kinds = kinds_of(outcome)
    raised = next((kind for kind in _RAISED if kind in kinds), None)
    return None if raised is None else carrying(raised(str(outcome)), outcome)


def carrying(error: Exception, outcome: BaseException) -> Exception:
    """``error``, raised for the platform's ``outcome``: with its ``reason`` and ``status``,
    and the outcome as its cause."""
    error.reason = getattr(outcome, "reason", "")
    error.status = getattr(outcome, "status", None)
    error.__cause__ = outcome
    return error
