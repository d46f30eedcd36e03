"""What can happen to one URL, as a small tree of types whose classes decide the policy.

::

    CrawlOutcome                  reason              policy
    ├── Retryable                 back to the frontier with backoff, up to RETRY_MAX_ATTEMPTS
    │   ├── Timeout               (timeouts end a URL from RETRY_TIMEOUT_ATTEMPTS on)
    │   │   ├── ConnectTimeout    connect_timeout     host-level
    │   │   ├── ReadTimeout       read_timeout        overload signal
    │   │   └── DeadlineExceeded  deadline            overload signal
    │   ├── ConnectionReset       connection_reset    overload signal
    │   ├── ConnectFailed         connect_error       host-level (refused, unreachable)
    │   ├── DNSFailure            dns                 host-level
    │   ├── RobotsUnavailable     robots_unavailable  (robots.txt answered 5xx)
    │   ├── ServerError           http_5xx            overload signal if 503/504 without Retry-After
    │   ├── TooManyRequests       http_429            overload signal without Retry-After
    │   ├── RequestTimeout        http_408            (the server gave up waiting for the request)
    │   ├── Banned                banned              (a block page: the host's ladder decides)
    │   ├── ProxyFailed           proxy_error         (the job's proxy, not the site: its health)
    │   ├── TaskTimeout           task_timeout        (the page ran past the task's time limit)
    │   ├── DatabaseUnavailable   database_error      (the page could not be committed)
    │   ├── InternalError         internal_error      (an unexpected exception; see the worker log)
    │   └── SpiderUnavailable     spider_unavailable  (this worker cannot load the job's spider)
    ├── Permanent                 the URL fails with its reason
    │   ├── ClientError           http_4xx
    │   ├── TLSError              tls                 host-level
    │   ├── HostUnreachable       host_unreachable    (its host's circuit is open: no request made)
    │   ├── TooManyRedirects      too_many_redirects
    │   ├── RedirectLoop          redirect_loop
    │   ├── RedirectNotFollowed   http_3xx            (a spider's request asked not to follow it)
    │   ├── InvalidURL            invalid_url         (the URL or a redirect's Location)
    │   ├── BlockedAddress        blocked_address     (not a public address, and not allowed)
    │   ├── ProtocolError         protocol_error
    │   ├── HeadersTooLarge       headers_too_large   (more than 100 headers, or a 64 KiB line)
    │   ├── ParseError            parse_error
    │   ├── StoreRefused          store_error         (the database refused the page's values)
    │   ├── AttemptsExhausted     attempts_exhausted  (claimed after its last attempt)
    │   ├── SpiderError           spider_error        (the spider's callback raised; traceback kept)
    │   └── SpiderTimeout         spider_timeout      (the callback ran past its time limit)
    └── Skip                      the URL is skipped, never fetched (or not followed)
        ├── OutOfScope            out_of_scope        (a redirect left the job's scope)
        ├── RobotsDisallowed      robots
        └── DuplicateRedirect     duplicate_redirect  (redirects to a URL fetched as itself)

*Overload signals* tell the host's throttle that the server may be struggling
(``tasks/fetch/politeness.py``); one signal slows nothing, most recent outcomes being signals
does. *Host-level* failures say the host cannot be reached at all; a few in a row open its
circuit (``tasks/fetch/circuit.py``). Of them, the *definitive* ones (connection refused, no
route to the host or its network, a name that does not exist) open it at once on a host that
has not answered in this job. A ``Retry-After`` holds the host for that long instead
of counting as a signal.

:func:`from_requests` maps a ``requests`` or ``urllib3`` exception into the tree (and
:func:`through_proxy` decides whose fault it was behind a proxy); they are the only place
that knows those exception types.
"""

from __future__ import annotations

import errno
import http.client
import socket
import ssl

import requests
import socks
import urllib3

from tasks.rules import proxy_urls

# connect failures that are an answer: something at the address said no
_DEFINITIVE_CONNECT = {"connection refused", "no route to host", "network unreachable"}


class CrawlOutcome(Exception):
    reason = "error"
    retryable = False
    host_level = False  # the host cannot be reached at all: counts toward its circuit breaker
    definitive = False  # ... and says so for good unless it answered before (refused, no name)
    signals_overload = False  # the server may be struggling: counts toward its throttle
    summary = ""  # a few words for people, e.g. "connection refused"

    def __init__(
        self, message: str = "", *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message or self.reason)
        self.status = status
        self.retry_after = retry_after  # seconds the server asked us to wait, if it did
        self.url: str | None = None  # the URL that failed, when it is not the one asked for
        self.headers: dict[str, str] = {}  # an HTTP failure's answer: headers, start of body
        self.body = b""
        self.truncated = False  # the body is not all the answer had (a cap, or cut short)
        self.screenshot: bytes | None = None  # a rendered answer's picture (PNG), for review
        self.redirects: list[str] = []  # an HTTP failure's: the hops followed before its answer
        self.redirect_statuses: list[int] = []  # ... and their statuses
        self.method = ""  # ... and the method its answer was asked with

    @property
    def overload(self) -> bool:
        """An overload signal for the host's throttle (a Retry-After says exactly instead)."""
        return self.signals_overload and self.retry_after is None


class Retryable(CrawlOutcome):
    retryable = True


class Timeout(Retryable):
    pass


class ConnectTimeout(Timeout):
    reason, host_level, summary = "connect_timeout", True, "connect timeout"


class ReadTimeout(Timeout):
    reason, signals_overload = "read_timeout", True


class DeadlineExceeded(Timeout):
    reason, signals_overload = "deadline", True


class ConnectionReset(Retryable):
    reason, signals_overload = "connection_reset", True


class ConnectFailed(Retryable):
    reason, host_level, summary = "connect_error", True, "connection failed"

    @property
    def definitive(self) -> bool:
        """Refused, or no route: something answered for the address, and it said no."""
        return self.summary in _DEFINITIVE_CONNECT


class DNSFailure(Retryable):
    """The name does not resolve; ``definitive`` unless the resolver said "try again"."""

    reason, host_level, summary, definitive = "dns", True, "name does not resolve", True


class ServerError(Retryable):
    reason = "http_5xx"

    @property
    def signals_overload(self) -> bool:
        """503 and 504 say "overloaded". A 500 on one URL says nothing of the host."""
        return self.status in (503, 504)


class RobotsUnavailable(Retryable):
    reason = "robots_unavailable"


class TooManyRequests(Retryable):
    reason, signals_overload = "http_429", True


class RequestTimeout(Retryable):
    """408: the server gave up waiting for the request, as a busy server or a slow path to it
    makes it do: retried, as Scrapy retries it (``RETRY_HTTP_CODES``)."""

    reason = "http_408"


class Banned(Retryable):
    """A block page (CAPTCHA, challenge, "access denied"): never stored; the host's ladder
    climbs, and after its last attempt the URL is parked for review instead of failing."""

    reason = "banned"


class ProxyFailed(Retryable):
    """The proxy could not be reached, or refused us (407): counts against the proxy's health
    (``tasks/fetch/proxies.py``), not against the site's host."""

    reason = "proxy_error"


def through_proxy(failure: CrawlOutcome, exc: Exception) -> CrawlOutcome:
    """A failure of a request sent through a proxy: the proxy's when the proxy itself could not
    be reached; a SOCKS proxy's report that the site could not be reached stays the site's."""
    chain = list(_chain(exc))
    if any(isinstance(e, socks.SOCKS5Error) for e in chain):
        return failure
    proxy_side = isinstance(exc, requests.exceptions.ProxyError) or any(
        isinstance(e, socks.ProxyConnectionError) for e in chain
    )
    if proxy_side or failure.host_level:
        failure = ProxyFailed(f"proxy unreachable: {failure}")
    failure.args = (proxy_urls.redact(str(failure))[:500],)  # no proxy credential in a message
    return failure


class TaskTimeout(Retryable):
    reason = "task_timeout"


class DatabaseUnavailable(Retryable):
    reason = "database_error"


class InternalError(Retryable):
    reason = "internal_error"


class SpiderUnavailable(Retryable):
    reason = "spider_unavailable"


class Permanent(CrawlOutcome):
    pass


class SpiderError(Permanent):
    reason = "spider_error"


class SpiderTimeout(Permanent):
    reason = "spider_timeout"


class ClientError(Permanent):
    reason = "http_4xx"


class TLSError(Permanent):
    reason, host_level, summary = "tls", True, "TLS handshake failed"


class HostUnreachable(Permanent):
    reason = "host_unreachable"

    @classmethod
    def because(cls, cause: str, message: str) -> HostUnreachable:
        """Its host's circuit is open for ``cause`` (the failure's summary, e.g. "connection
        refused"), kept as its summary: an errback checks it as that failure."""
        unreachable = cls(message)
        unreachable.summary = cause
        return unreachable


class RedirectNotFollowed(Permanent):
    """A redirect a spider's request takes as its answer (``dont_redirect``, or its status
    in ``handle_httpstatus_list``): its callback gets it if it handles the status, as under
    Scrapy, else its errback (``HttpError``)."""

    reason = "http_3xx"


class TooManyRedirects(Permanent):
    reason = "too_many_redirects"


class RedirectLoop(Permanent):
    reason = "redirect_loop"


class InvalidURL(Permanent):
    reason = "invalid_url"


class BlockedAddress(Permanent):
    reason = "blocked_address"


class ProtocolError(Permanent):
    reason = "protocol_error"


class HeadersTooLarge(Permanent):
    reason = "headers_too_large"


class ParseError(Permanent):
    reason = "parse_error"


class StoreRefused(Permanent):
    reason = "store_error"


class AttemptsExhausted(Permanent):
    reason = "attempts_exhausted"


class Skip(CrawlOutcome):
    reason = "skipped"


class OutOfScope(Skip):
    reason = "out_of_scope"


class RobotsDisallowed(Skip):
    reason = "robots"


class DuplicateRedirect(Skip):
    reason = "duplicate_redirect"


def _chain(exc: BaseException | None):
    """``exc`` and what caused it: its cause and context, and exceptions it wraps (urllib3
    and requests pass the original along in ``args`` and ``reason``)."""
    todo, seen = [exc], set()
    while todo:
        exc = todo.pop(0)
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        yield exc
        wrapped = [*getattr(exc, "args", ()), getattr(exc, "reason", None)]
        todo += [exc.__cause__, exc.__context__]
        todo += [e for e in wrapped if isinstance(e, BaseException)]


def _is_dns(exc: BaseException) -> bool:
    return any(
        isinstance(e, socket.gaierror)
        or "Name or service not known" in str(e)
        or "NameResolutionError" in type(e).__name__
        for e in _chain(exc)
    )


def _dns_failure(exc: BaseException, message: str) -> DNSFailure:
    failed = DNSFailure(message)
    if any(
        (isinstance(e, socket.gaierror) and e.errno == socket.EAI_AGAIN)
        or "Temporary failure in name resolution" in str(e)
        for e in _chain(exc)
    ):
        failed.definitive, failed.summary = False, "name lookup failed for now"
    return failed


_CONNECT_ERRNOS = {
    errno.ECONNREFUSED: "connection refused",
    errno.EHOSTUNREACH: "no route to host",
    errno.ENETUNREACH: "network unreachable",
    errno.EADDRNOTAVAIL: "address not available",
}


def _connect_failure(exc: BaseException, message: str) -> ConnectFailed:
    failed = ConnectFailed(message)
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in _CONNECT_ERRNOS:
            failed.summary = _CONNECT_ERRNOS[e.errno]
            break
    return failed


# OpenSSL's verify codes that mean "signed by an authority we do not trust": the issuer is
# unknown, or the chain ends in a self-signed certificate. The fix is a CA, not a new server.
_UNTRUSTED_ISSUER = {2, 18, 19, 20, 21}
# Alerts a server sends when it wants a client certificate it trusts (mutual TLS).
_CLIENT_CERT_ALERTS = {"TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_BAD_CERTIFICATE",
                       "TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_CERTIFICATE_UNKNOWN"}  # fmt: skip


def tls_failure(exc: BaseException, message: str) -> TLSError:
    """A TLS failure, saying which setting fixes it when one does (``tasks/fetch/trust.py``);
    ``message`` when none does. The render step's door names its failures with it too."""
    for cause in _chain(exc):
        if isinstance(cause, ssl.SSLCertVerificationError):
            found = f"certificate verify failed: {cause.verify_message}"
            if cause.verify_code in _UNTRUSTED_ISSUER:
                found += " (set CA_BUNDLE to trust a private CA)"
            return TLSError(found)
        if isinstance(cause, ssl.SSLError) and cause.reason in _CLIENT_CERT_ALERTS:
            return TLSError(
                f"{cause.reason.lower()}: the server asks for a client certificate it trusts "
                "(set CLIENT_CERT and CLIENT_KEY)"
            )
    return TLSError(message)


def from_requests(exc: Exception) -> CrawlOutcome:
    """Map a requests (or, while reading a body, urllib3) exception onto the outcome tree."""
    message = f"{type(exc).__name__}: {exc}"[:500]
    for cause in _chain(exc):
        if isinstance(cause, http.client.LineTooLong) or "got more than 100 headers" in str(cause):
            return HeadersTooLarge(f"response headers too large: {cause}"[:500])
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return ConnectTimeout(message)
    if isinstance(exc, (requests.exceptions.ReadTimeout, urllib3.exceptions.ReadTimeoutError)):
        return ReadTimeout(message)
    if isinstance(exc, urllib3.exceptions.ProtocolError):
        return ConnectionReset(message)
    if isinstance(exc, requests.exceptions.SSLError) or (
        isinstance(exc, requests.exceptions.ProxyError)
        and any(isinstance(cause, ssl.SSLError) for cause in _chain(exc))
    ):  # the TLS handshake with an HTTPS proxy failed: requests calls it the proxy's error
        return tls_failure(exc, message)
    if isinstance(exc, requests.exceptions.ConnectionError):
        if _is_dns(exc):
            return _dns_failure(exc, message)
        text = str(exc)
        if "Read timed out" in text:
            return ReadTimeout(message)
        if isinstance(exc.args[0] if exc.args else None, urllib3.exceptions.MaxRetryError):
            reason = exc.args[0].reason
            if isinstance(reason, urllib3.exceptions.NewConnectionError):
                return _connect_failure(exc, message)
        if "reset" in text.lower() or "aborted" in text.lower() or "RemoteDisconnected" in text:
            return ConnectionReset(message)
        return _connect_failure(exc, message)
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return ConnectionReset(message)
    if isinstance(
        exc,
        (
            requests.exceptions.InvalidURL,
            requests.exceptions.MissingSchema,
            requests.exceptions.InvalidSchema,
            requests.exceptions.InvalidHeader,
        ),
    ):
        return InvalidURL(message)
    return ProtocolError(message)


def from_status(status: int, retry_after: float | None) -> CrawlOutcome | None:
    """The outcome of an HTTP status code; None for a success."""
    if status == 429:
        return TooManyRequests(f"HTTP {status}", status=status, retry_after=retry_after)
    if status == 408:
        return RequestTimeout(f"HTTP {status}", status=status, retry_after=retry_after)
    if status >= 500:
        return ServerError(f"HTTP {status}", status=status, retry_after=retry_after)
    if status >= 400:
        return ClientError(f"HTTP {status}", status=status)
    return None
