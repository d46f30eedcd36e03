"""What can happen to one URL, as a small tree of types whose classes decide the policy.

::

    CrawlOutcome                      reason, retryable, slows_host
    ├── Retryable                     back to the frontier with backoff, up to RETRY_MAX_ATTEMPTS
    │   ├── ConnectTimeout            connect_timeout   slows host
    │   ├── ReadTimeout               read_timeout      slows host
    │   ├── DeadlineExceeded          deadline          slows host
    │   ├── ConnectionReset           connection_reset  slows host
    │   ├── ConnectFailed             connect_error     slows host
    │   ├── DNSFailure                dns
    │   ├── RobotsUnavailable         robots_unavailable (robots.txt 5xx or unreachable)
    │   ├── ServerError               http_5xx          slows host if 503/504, honours Retry-After
    │   └── TooManyRequests           http_429          slows host, honours Retry-After
    ├── Permanent                     the URL fails with its reason
    │   ├── ClientError               http_4xx
    │   ├── TLSError                  tls
    │   ├── TooManyRedirects          too_many_redirects
    │   ├── RedirectLoop              redirect_loop
    │   ├── InvalidURL                invalid_url
    │   ├── ProtocolError             protocol_error
    │   └── ParseError                parse_error (the page could not be parsed at all)
    └── Skip                          the URL is skipped, never fetched (or not followed)
        ├── OutOfScope                out_of_scope (a redirect left the job's scope)
        └── RobotsDisallowed          robots

:func:`from_requests` maps a ``requests`` or ``urllib3`` exception into the tree; it is the only
place that knows their exception types.
"""

from __future__ import annotations

import socket

import requests
import urllib3


class CrawlOutcome(Exception):
    reason = "error"
    retryable = False
    slows_host = False

    def __init__(
        self, message: str = "", *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message or self.reason)
        self.status = status
        self.retry_after = retry_after  # seconds the server asked us to wait, if it did


class Retryable(CrawlOutcome):
    retryable = True


class ConnectTimeout(Retryable):
    reason, slows_host = "connect_timeout", True


class ReadTimeout(Retryable):
    reason, slows_host = "read_timeout", True


class DeadlineExceeded(Retryable):
    reason, slows_host = "deadline", True


class ConnectionReset(Retryable):
    reason, slows_host = "connection_reset", True


class ConnectFailed(Retryable):
    reason, slows_host = "connect_error", True


class DNSFailure(Retryable):
    reason = "dns"


class ServerError(Retryable):
    reason = "http_5xx"

    @property
    def slows_host(self) -> bool:
        """503 and 504 say "overloaded": slow down. A 500 on one URL says nothing of the host."""
        return self.status in (503, 504)


class RobotsUnavailable(Retryable):
    reason = "robots_unavailable"


class TooManyRequests(Retryable):
    reason, slows_host = "http_429", True


class Permanent(CrawlOutcome):
    pass


class ClientError(Permanent):
    reason = "http_4xx"


class TLSError(Permanent):
    reason = "tls"


class TooManyRedirects(Permanent):
    reason = "too_many_redirects"


class RedirectLoop(Permanent):
    reason = "redirect_loop"


class InvalidURL(Permanent):
    reason = "invalid_url"


class ProtocolError(Permanent):
    reason = "protocol_error"


class ParseError(Permanent):
    reason = "parse_error"


class Skip(CrawlOutcome):
    reason = "skipped"


class OutOfScope(Skip):
    reason = "out_of_scope"


class RobotsDisallowed(Skip):
    reason = "robots"


def _is_dns(exc: BaseException) -> bool:
    while exc is not None:
        if isinstance(exc, socket.gaierror):
            return True
        if "Name or service not known" in str(exc) or "NameResolutionError" in type(exc).__name__:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def from_requests(exc: Exception) -> CrawlOutcome:
    """Map a requests (or, while reading a body, urllib3) exception onto the outcome tree."""
    message = f"{type(exc).__name__}: {exc}"[:500]
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return ConnectTimeout(message)
    if isinstance(exc, (requests.exceptions.ReadTimeout, urllib3.exceptions.ReadTimeoutError)):
        return ReadTimeout(message)
    if isinstance(exc, urllib3.exceptions.ProtocolError):
        return ConnectionReset(message)
    if isinstance(exc, requests.exceptions.SSLError):
        return TLSError(message)
    if isinstance(exc, requests.exceptions.ConnectionError):
        if _is_dns(exc):
            return DNSFailure(message)
        text = str(exc)
        if "Read timed out" in text:
            return ReadTimeout(message)
        if "reset" in text.lower() or "aborted" in text.lower() or "RemoteDisconnected" in text:
            return ConnectionReset(message)
        return ConnectFailed(message)
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return ConnectionReset(message)
    if isinstance(
        exc,
        (
            requests.exceptions.InvalidURL,
            requests.exceptions.MissingSchema,
            requests.exceptions.InvalidSchema,
        ),
    ):
        return InvalidURL(message)
    return ProtocolError(message)


def from_status(status: int, retry_after: float | None) -> CrawlOutcome | None:
    """The outcome of an HTTP status code; None for a success."""
    if status == 429:
        return TooManyRequests(f"HTTP {status}", status=status, retry_after=retry_after)
    if status >= 500:
        return ServerError(f"HTTP {status}", status=status, retry_after=retry_after)
    if status >= 400:
        return ClientError(f"HTTP {status}", status=status)
    return None
