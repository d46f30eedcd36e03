"""Fetch one URL through the transport, bounded in every dimension, and classify the result.

Reads ``FETCH_CONNECT_TIMEOUT_S``, ``FETCH_READ_TIMEOUT_S``, ``FETCH_DEADLINE_S``,
``FETCH_MAX_BYTES`` and ``FETCH_MAX_REDIRECTS`` (see ``tasks/defaults.py``); how requests
leave (pool, name resolution) is ``tasks/fetch/transport.py``.

Redirects are followed here, not by requests, so that the deadline covers every hop, each hop
is checked against the job's scope, and a loop (a URL of the chain again, with the same
cookies) is told apart from a long chain. Bodies are
read in raw chunks and decoded here (gzip, deflate) with the size cap inside the
decompressor, so the cap bounds decompressed bytes whatever the library versions. Response
headers are bounded by http.client (100 headers, 64 KiB a line: ``headers_too_large``).
"""

from __future__ import annotations

import base64
import email.utils
import re
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC
from typing import NamedTuple
from urllib.parse import urljoin, urlsplit, urlunsplit

import requests
import urllib3
from requests.structures import CaseInsensitiveDict
from requests.utils import default_headers

from tasks.defaults import setting
from tasks.fetch import outcomes, proxies, trust
from tasks.fetch.transport import check_target, session
from tasks.rules import guard, proxy_urls
from web.models import CrawlJob

_CHUNK = 64 << 10


@dataclass(frozen=True)
class FetchLimits:
    connect_timeout: float
    read_timeout: float
    deadline: float
    max_bytes: int
    max_redirects: int
    verify: bool = True  # check certificates (``trust.verifies``)
    evidence_bytes: int = 0  # of an error answer's body (0: EVIDENCE_MAX_BYTES)


def limits_for(job: CrawlJob, whole_errors: bool = False,
               within: float | None = None) -> FetchLimits:  # fmt: skip
    """The job's bounds on one fetch; ``whole_errors``: an error answer's body is read up to
    ``FETCH_MAX_BYTES`` (a spider's callback may take it), not ``EVIDENCE_MAX_BYTES``;
    ``within``: seconds the request asks to be done in (a spider's ``download_timeout``),
    which lowers every time bound, never raises one."""
    bound = within if within is not None and within > 0 else float("inf")
    return FetchLimits(
        connect_timeout=min(setting("FETCH_CONNECT_TIMEOUT_S", job), bound),
        read_timeout=min(setting("FETCH_READ_TIMEOUT_S", job), bound),
        deadline=min(setting("FETCH_DEADLINE_S", job), bound),
        max_bytes=setting("FETCH_MAX_BYTES", job),
        max_redirects=setting("FETCH_MAX_REDIRECTS", job),
        verify=trust.verifies(job),
        evidence_bytes=setting("FETCH_MAX_BYTES", job) if whole_errors else 0,
    )


# A request's headers about its body, dropped where a redirect turns it into a GET (as Scrapy's
# RedirectMiddleware drops them)
BODY_HEADERS = ("Content-Type", "Content-Length", "Content-Encoding", "Content-Language",
                "Content-Location")  # fmt: skip


@dataclass
class Response:
    url: str  # the URL asked for
    final_url: str  # after redirects
    status: int
    content_type: str  # media type, lower case, without parameters
    content_type_header: str  # the raw header, charset included
    body: bytes
    truncated: bool
    elapsed: float  # seconds, all hops
    redirects: list[str] = field(default_factory=list)
    redirect_statuses: list[int] = field(default_factory=list)  # each hop's, when known
    method: str = "GET"  # of the last hop (a POST a 302 turned into a GET: GET)
    headers: dict[str, str] = field(default_factory=dict)  # of the final answer
    screenshot: bytes | None = None  # a rendered page's picture (PNG)
    raw_body: bytes = b""  # as received, before content decoding (what WARC records keep)
    http: dict = field(default_factory=dict)  # protocol, reason, request and response headers


class Fetched(NamedTuple):
    """One fetch attempt: its answer or the outcome it ended in, and how long it took."""

    resp: Response | None
    outcome: outcomes.CrawlOutcome | None
    elapsed: float  # seconds
    conditional: bool  # sent a recrawl's validators (a 304 keeps the previous page)


_URI = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*\Z")  # RFC 3986's characters


def as_given(prepared: str, url: str) -> str:
    """The URL a request goes to: requests' ``prepared`` one (its host made ASCII, ...) with
    the path and query of ``url`` as they were given, when that needs no escaping; requests
    would decode ``%7E`` to ``~`` and drop ``./`` segments, where Scrapy and browsers send
    them as the page wrote them (a signed query may depend on it)."""
    if prepared == url:
        return prepared
    given = urlsplit(url)
    if not _URI.match(given.path) or not _URI.match(given.query):
        return prepared
    made = urlsplit(prepared)
    return urlunsplit((made.scheme, made.netloc, given.path or "/", given.query, made.fragment))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date); None if absent."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now_ts = time.time() if now is None else now
    return max(0.0, when.timestamp() - now_ts)


class _Decoder:
    """The body's Content-Encoding undone by the platform, never past ``limit`` decoded bytes.

    A 20 KiB gzip can hold 20 MiB of zeros: the cap must hold inside the decompressor, whatever
    the urllib3 version, so each step may produce at most what is still allowed (zlib's
    ``max_length``). gzip (several members too) and deflate (zlib-wrapped or raw, as servers
    send both) are undone; a name no compression has (``identity``, ``none``, ``UTF-8``, as
    servers send them) is passed over, the body read as it came, as browsers and Scrapy read
    it; a compression that was not asked for (brotli, zstd), or two, fails the fetch: the body
    cannot be read.
    """

    def __init__(self, encoding: str, limit: int) -> None:
        codings = [c for c in _codings(encoding) if c != "identity"]
        undone = []
        while codings and codings[-1] in _CODINGS:
            undone.append(codings.pop())
        if len(undone) > 1 or _COMPRESSIONS.intersection(codings):
            raise outcomes.ProtocolError(f"unsupported Content-Encoding {encoding[:100]!r}")
        self.kind = _CODINGS[undone[0]] if undone else ""
        self.limit = limit
        self.size = 0
        self.raw_deflate = False
        self.zlib = self._start()

    def _start(self):
        if self.kind == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        if self.kind == "deflate":
            return zlib.decompressobj(-zlib.MAX_WBITS if self.raw_deflate else zlib.MAX_WBITS)
        return None

    def feed(self, data: bytes) -> bytes:
        """Decoded bytes of ``data``: at most one byte past the limit (which marks the cut)."""
        room = self.limit - self.size + 1
        if self.zlib is None:
            out = data[:room]
        else:
            out = b""
            while data and len(out) < room:
                try:
                    out += self.zlib.decompress(data, room - len(out))
                except zlib.error as exc:
                    if self.kind == "deflate" and not self.raw_deflate and not self.size + len(out):
                        self.raw_deflate = True  # no zlib header: raw deflate
                        self.zlib = self._start()
                        continue
                    failure = outcomes.ProtocolError(f"{self.kind} body cannot be decoded: {exc}")
                    raise failure from None
                if self.zlib.eof:  # another gzip member may follow
                    data = self.zlib.unused_data
                    if data:
                        self.zlib = self._start()
                else:
                    data = self.zlib.unconsumed_tail
        self.size += len(out)
        return out


_CODINGS = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}
_COMPRESSIONS = frozenset({*_CODINGS, "br", "zstd", "compress", "x-compress"})


def _codings(content_encoding: str) -> list[str]:
    return [c for c in (c.strip().lower() for c in content_encoding.split(",")) if c]


def left_encoded(content_encoding: str) -> list[str]:
    """The codings of a ``Content-Encoding`` that a spider's response still carries, as
    Scrapy's ``HttpCompressionMiddleware`` leaves them: those from the last one it does not
    undo on (gzip and deflate undone from the last; ``identity`` or an unknown name stops)."""
    codings = _codings(content_encoding)
    while codings and codings[-1] in _CODINGS:
        codings.pop()
    return codings


def decode(raw: bytes, content_encoding: str, limit: int) -> bytes:
    """A stored body as received, decoded as the fetch did (at most ``limit`` bytes)."""
    return _Decoder(content_encoding, limit).feed(raw)[:limit]


def _read_body(
    resp: requests.Response, limits: FetchLimits, started: float
) -> tuple[bytes, bool, bytes]:
    """The decoded body, whether it was cut at the cap, and the bytes as received (the same
    object when nothing was encoded). The cap holds for the bytes received as well as for the
    decoded ones: a compressed stream that decodes to little or nothing is cut all the same."""
    # read1 returns what one socket read brings, so the deadline is checked between reads: a
    # fetch ends at most one read timeout after its deadline, however slowly bytes trickle in.
    decoder = _Decoder(resp.headers.get("content-encoding", ""), limits.max_bytes)
    chunks: list[bytes] = []
    received: list[bytes] | None = [] if decoder.kind else None
    size = received_size = 0
    truncated = False
    while raw := resp.raw.read1(_CHUNK, decode_content=False):
        if time.monotonic() - started > limits.deadline:
            raise outcomes.DeadlineExceeded(f"body not complete after {limits.deadline:g} s")
        chunk = decoder.feed(raw)
        chunks.append(chunk)
        if received is not None:
            received.append(raw)
        size += len(chunk)
        received_size += len(raw)
        if size > limits.max_bytes or received_size > limits.max_bytes:
            truncated = True
            break
    body = b"".join(chunks)[: limits.max_bytes] if truncated else b"".join(chunks)
    if received is None:
        return body, truncated, body
    return body, truncated, b"".join(received)[: limits.max_bytes]


_SECRET_HEADERS = {"cookie", "authorization", "proxy-authorization"}  # never recorded


def _exchange(resp: requests.Response, sent: dict[str, str], peer: str | None) -> dict:
    """The request as sent (without credentials and cookies), the response's status line and
    headers, in order, and the address that answered (for WARC)."""
    version = getattr(resp.raw, "version", 11)
    exchange = {
        "protocol": "HTTP/1.0" if version == 10 else "HTTP/1.1",
        "reason": resp.reason or "",
        "request": [[k, v] for k, v in sent.items() if k.lower() not in _SECRET_HEADERS],
        "response": [[k, v] for k, v in resp.raw.headers.items()],
    }
    if peer:
        exchange["ip"] = peer
    return exchange


def _peer(resp: requests.Response) -> str | None:
    """The address the answer comes from (a proxy's, through one), read while its connection
    is open: Scrapy's ``response.ip_address``, WARC's ``WARC-IP-Address``."""
    try:
        return resp.raw.connection.sock.getpeername()[0]
    except (AttributeError, OSError, IndexError, TypeError):
        return None


_DEFAULT_PORTS = {"http": 80, "https": 443}


def credentials_for(headers: CaseInsensitiveDict, source: str, target: str) -> None:
    """Credentials given as headers go on through a redirect only where they were meant for,
    as browsers and Scrapy's ``RedirectMiddleware`` send them: ``Authorization`` to the same
    scheme, host and port; a ``Cookie`` header to the same host, not from https to http. (The
    cookie jar's own cookies go where their domains say.)"""
    if "Authorization" not in headers and "Cookie" not in headers:
        return
    was, now = urlsplit(source), urlsplit(target)
    if (was.scheme, was.hostname, was.port or _DEFAULT_PORTS.get(was.scheme)) != (
            now.scheme, now.hostname, now.port or _DEFAULT_PORTS.get(now.scheme)):  # fmt: skip
        headers.pop("Authorization", None)
    if was.hostname != now.hostname or now.scheme not in (was.scheme, "https"):
        headers.pop("Cookie", None)


def _redirect_target(current: str, location: str) -> str:
    try:
        return urljoin(current, location.strip())
    except ValueError as exc:  # e.g. "http://[x": not a URL at all
        raise outcomes.InvalidURL(
            f"redirect to {location[:200]!r} is not a valid URL: {exc}"
        ) from None


def _a_request_url(url: str) -> bool:
    """Whether Scrapy makes a request of a redirect's ``url`` that is no http(s) URL (its
    ``RedirectMiddleware`` then leaves the 3xx as the answer); one with no ``://``, as a
    ``mailto:``, it cannot make (a ``ValueError``, "Missing scheme")."""
    return "://" in url or url.startswith(("data:", "about:"))


@dataclass
class Visitor:
    """Who asks, beyond the user agent: through which proxy, with which extra headers and
    cookies. The cookies the answers set (every hop) are collected in ``set_cookies``."""

    proxy: str | None = None  # URL with credentials (never logged)
    headers: dict[str, str] = field(default_factory=dict)
    cookies: requests.cookies.RequestsCookieJar = field(
        default_factory=requests.cookies.RequestsCookieJar
    )
    set_cookies: requests.cookies.RequestsCookieJar = field(
        default_factory=requests.cookies.RequestsCookieJar
    )


# What a request carries besides its visitor's headers, as requests' sessions send them. The
# request is prepared here and sent as it is (requests' prepared-request flow): the session's
# merging of its own headers, cookies, parameters and proxies into every request (a fifth of
# a fetch's CPU) is left out, the session holding none of its own (``transport.py``).
_SESSION_HEADERS = default_headers()


def _evidence(
    failure: outcomes.CrawlOutcome,
    resp: requests.Response,
    limits: FetchLimits,
    started: float,
    hops: tuple[list[str], list[int], str],
) -> outcomes.CrawlOutcome:
    """Attach what the server answered (headers, the start of the body) to an HTTP failure,
    and the redirects followed before it (``hops``: their URLs, statuses, the last method)."""
    failure.headers = dict(resp.headers)
    failure.redirects, failure.redirect_statuses, failure.method = hops
    try:
        small = FetchLimits(limits.connect_timeout, limits.read_timeout, limits.deadline,
                            limits.evidence_bytes or setting("EVIDENCE_MAX_BYTES"),
                            limits.max_redirects)  # fmt: skip
        failure.body, failure.truncated = _read_body(resp, small, started)[:2]
    except (outcomes.CrawlOutcome, requests.RequestException, urllib3.exceptions.HTTPError):
        failure.body, failure.truncated = b"", True
    return failure


class _Unkept(requests.cookies.RequestsCookieJar):
    """A jar that keeps nothing (a request with ``dont_merge_cookies``)."""

    def set_cookie(self, cookie, *args, **kwargs) -> None:
        pass


@dataclass(frozen=True)
class Asked:
    """What a spider's request asks beyond a GET: its method, body and headers (its cookies
    join the visitor's jar for this request), and the redirect statuses it takes as its
    answer instead of following them (``RedirectNotFollowed``)."""

    method: str = "GET"
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    kept_redirects: tuple[int, ...] = ()

    @classmethod
    def of(cls, kept: dict | None, visitor: Visitor, kept_redirects: tuple[int, ...], *,
           cookies: bool = True, proxies: list[str] | None = None) -> Asked:  # fmt: skip
        """From a stored request (``tasks/content/rows.py``; None: a plain GET), its cookies
        put in the visitor's jar and kept in the job's, for its host, as a cookie the site
        set would be (Scrapy's cookie middleware keeps them so), and a ``Cookie`` header of
        its own left out for the jar's, as that middleware replaces it. Its ``meta`` as
        Scrapy's middlewares read it: ``dont_merge_cookies`` sends none of the jar's cookies
        nor of its own ``cookies`` (only a ``Cookie`` header of its own) and keeps none the
        answer sets; ``proxy`` names one of the job's ``proxies`` (``tasks/fetch/proxies.py``:
        ``BlockedAddress`` if it is none of them; ``ProxyFailed`` if its credentials are not
        in this worker's environment). ``cookies`` off (the spider's ``COOKIES_ENABLED``): as
        ``dont_merge_cookies`` on every request, Scrapy's cookie middleware being off."""
        meta = (kept or {}).get("meta") or {}
        unkept = not cookies or meta.get("dont_merge_cookies")
        if unkept:  # Scrapy's cookie middleware steps aside
            visitor.cookies, visitor.set_cookies = _Unkept(), _Unkept()
        if not kept:
            return cls(kept_redirects=kept_redirects)
        if "proxy" in meta:
            visitor.proxy = _proxy(meta["proxy"], list(proxies or []))
        for name, value, domain, path in _given_cookies(kept.get("cookies"), kept.get("url")):
            for jar in (visitor.cookies, visitor.set_cookies):  # replacing the jar's own
                jar.set(name, value, domain=domain, path=path)
        body = base64.b64decode(kept.get("body") or "")
        headers = tuple(map(tuple, kept.get("headers") or ()))
        if not unkept:  # the jar's cookies go, not a header of its own
            headers = tuple(h for h in headers if h[0].lower() != "cookie")
        return cls(kept.get("method", "GET"), body, headers, kept_redirects)


def _given_cookies(given: dict | list | None, url: str | None) -> Iterator[tuple[str, ...]]:
    """A request's cookies as Scrapy's cookie middleware keeps them: for the domain (and its
    subdomains) and path each names, else for the request's host and the directory of its
    URL's path (``http.cookiejar``'s default, as for a cookie the site set there)."""
    parts = urlsplit(url or "")
    path = parts.path or "/"
    here = path[: path.rfind("/")] or "/"
    if isinstance(given, dict):
        given = [{"name": name, "value": value} for name, value in given.items()]
    for cookie in given or []:
        domain = cookie.get("domain")
        domain = ("." + domain.lstrip(".")) if domain else (parts.hostname or "")
        yield str(cookie["name"]), str(cookie["value"]), domain, cookie.get("path") or here


def _joined(pairs: tuple[tuple[str, str], ...]) -> CaseInsensitiveDict:
    """A request's headers with a repeated name's values on one line, as HTTP reads them
    (Scrapy sends a line each; a ``Cookie``'s joined by ``; ``)."""
    joined: dict[str, tuple[str, str]] = {}  # by lower-cased name: the first name given, values
    for name, value in pairs:
        key = name.lower()
        if key in joined:
            first, before = joined[key]
            name, value = first, before + ("; " if key == "cookie" else ", ") + value
        joined[key] = (name, value)
    return CaseInsensitiveDict(joined.values())


def _proxy(asked: str | None, pool: list[str]) -> str | None:
    """The proxy URL (credentials filled) of the job's proxy a request's meta names."""
    template = proxies.requested(asked, pool)
    try:
        return proxy_urls.expand(template) if template else None
    except KeyError as exc:
        raise outcomes.ProxyFailed(f"proxy {proxies.label(template)} needs ${{{exc.args[0]}}}, "
                                   "not set here") from None  # fmt: skip


def _jar_state(jar: requests.cookies.RequestsCookieJar) -> frozenset:
    """A jar's cookies (a fetch's own jar, of its host and the hosts it was sent to): a
    redirect back to a URL is a loop only if they did not change on the way (a site's cookie
    check sets one and redirects to the page itself)."""
    return frozenset((c.domain, c.path, c.name, c.value) for c in jar)


# A 301, 302 or 303 to a request other than GET or HEAD is followed with a GET without body,
# as browsers and Scrapy do; 307 and 308 repeat the request.
_BECOMES_GET = (301, 302, 303)


def fetch(
    url: str,
    *,
    user_agent: str,
    limits: FetchLimits,
    allow: tuple[guard.Network, ...] = (),
    in_scope: Callable[[str], bool] = lambda u: True,
    visitor: Visitor | None = None,
    conditional: dict[str, str] | None = None,
    request: Asked | None = None,
) -> Response:
    """GET ``url`` (or make a spider's ``request``) and return the response; raise a
    :mod:`tasks.fetch.outcomes` type on failure.

    ``allow``: networks that may be connected to besides public addresses (the guard).
    ``visitor``: proxy, extra headers and cookies (none by default). ``conditional``:
    ``If-None-Match`` / ``If-Modified-Since`` of a recrawl (a 304 then comes back as a
    response with an empty body). Through a proxy, the proxy's own address passes the guard
    like a site's (``transport.py``; refused: ``blocked_address`` naming the proxy); a proxy
    that resolves the site's host itself is trusted with its own network, after the guard
    checked our own resolution of each hop's host."""
    visitor = visitor or Visitor()
    started = time.monotonic()
    headers = CaseInsensitiveDict(_SESSION_HEADERS)
    if request is not None:  # a spider's: the Accept its DEFAULT_REQUEST_HEADERS give, if any
        del headers["Accept"]
    headers.update(visitor.headers)
    asked = request or Asked()
    if asked.headers:  # a spider's headers, its identity's user agent kept
        headers.update(_joined(asked.headers))
    headers.update({"User-Agent": user_agent, "Accept-Encoding": "gzip, deflate"})
    headers.update(conditional or {})
    method, body = asked.method, asked.body or None
    proxies = {"http": visitor.proxy, "https": visitor.proxy} if visitor.proxy else {}
    current = url
    seen = {(url, _jar_state(visitor.cookies))}
    redirects: list[str] = []
    statuses: list[int] = []
    s = session(allow)
    while True:
        remaining = limits.deadline - (time.monotonic() - started)
        if remaining <= 0:
            raise outcomes.DeadlineExceeded(f"no response after {limits.deadline:g} s")
        timeout = (min(limits.connect_timeout, remaining), min(limits.read_timeout, remaining))
        try:
            if proxies:
                check_target(current, allow)
            prepared = requests.PreparedRequest()
            prepared.prepare(method=method, url=current, headers=headers, data=body,
                             cookies=visitor.cookies)  # fmt: skip
            prepared.url = as_given(prepared.url, current)
            resp = s.send(prepared, timeout=timeout, allow_redirects=False, stream=True,
                          proxies=proxies, verify=limits.verify, cert=None)  # fmt: skip
        except requests.RequestException as exc:
            failure = outcomes.from_requests(exc)
            if proxies:
                failure = outcomes.through_proxy(failure, exc)
            failure.url = current  # a redirect hop may have failed on another host
            failure.redirects, failure.redirect_statuses = list(redirects), list(statuses)
            failure.method = method
            raise failure from None
        except trust.Misconfigured as exc:  # the operator's TLS settings: retried once fixed
            raise outcomes.InternalError(f"TLS settings: {exc}"[:500]) from None
        except guard.BlockedAddress as exc:  # refused before any connection was tried
            failure = outcomes.BlockedAddress(str(exc))
            failure.url = current
            raise failure from None
        except (ValueError, UnicodeError) as exc:  # a URL urllib3 cannot even split
            where = f"redirect to {current[:200]!r}" if redirects else f"{current[:200]!r}"
            raise outcomes.InvalidURL(f"{where} is not a valid URL: {exc}"[:500]) from None
        with resp:
            peer = _peer(resp)
            visitor.cookies.update(resp.cookies)
            visitor.set_cookies.update(resp.cookies)
            target = None
            if resp.is_redirect and resp.status_code not in asked.kept_redirects:
                target = _redirect_target(current, resp.headers["location"])
                if not target.lower().startswith(("http://", "https://")):
                    if request is None or not _a_request_url(target):
                        raise outcomes.InvalidURL(f"redirect to a non-HTTP URL {target[:200]!r}")
                    target = None  # a spider's answer as it came, as Scrapy's leaves it
            if resp.is_redirect and target is None:
                failure = outcomes.RedirectNotFollowed(f"HTTP {resp.status_code}",
                                                       status=resp.status_code)  # fmt: skip
                failure.url = current
                raise _evidence(failure, resp, limits, started, (redirects, statuses, method))
            if target is not None:
                visit = (target, _jar_state(visitor.cookies))
                if visit in seen:
                    raise outcomes.RedirectLoop(f"{current} redirects back to {target}")
                if len(redirects) >= limits.max_redirects:
                    failure = outcomes.TooManyRedirects(
                        f"max redirections reached: more than {limits.max_redirects}")
                    failure.url, failure.method = current, method  # the last hop's
                    failure.redirects, failure.redirect_statuses = redirects, statuses
                    raise failure
                if not in_scope(target):
                    raise outcomes.OutOfScope(f"redirect to {target} leaves the job's scope")
                seen.add(visit)
                redirects.append(target)
                statuses.append(resp.status_code)
                credentials_for(headers, current, target)
                current = target
                if resp.status_code in _BECOMES_GET and method not in ("GET", "HEAD"):
                    method, body = "GET", None
                    for name in BODY_HEADERS:
                        headers.pop(name, None)
                continue
            failure = outcomes.from_status(
                resp.status_code, parse_retry_after(resp.headers.get("retry-after"))
            )
            if proxies and resp.status_code == 407:
                failure = outcomes.ProxyFailed("the proxy refused its credentials (HTTP 407)")
            if failure is not None:
                failure.url = current
                raise _evidence(failure, resp, limits, started, (redirects, statuses, method))
            try:
                body, truncated, raw_body = _read_body(resp, limits, started)
            except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
                raise outcomes.from_requests(exc) from None
            header = resp.headers.get("content-type", "")
            return Response(
                url=url,
                final_url=current,
                status=resp.status_code,
                content_type=header.split(";", 1)[0].strip().lower(),
                content_type_header=header,
                body=body,
                truncated=truncated,
                elapsed=time.monotonic() - started,
                redirects=redirects,
                redirect_statuses=statuses,
                method=method,
                headers=dict(resp.headers),
                raw_body=raw_body,
                http=_exchange(resp, resp.request.headers, peer),
            )
