"""How a request leaves: a ``requests`` session per thread, over connection pools the process's
threads share, whose connections resolve the host once, through :func:`resolve`, and connect
to the address they resolved.

Reads ``RESOLVE``: ``host=address`` overrides of name resolution, comma-separated, like curl's
``--resolve`` (``docs.internal=10.0.0.7``, or ``host=`` for a name that must not resolve).
Names under ``.invalid`` never resolve (RFC 6761 reserves them), without asking a resolver.
Everything else goes to the system resolver (``getaddrinfo``).

Resolution happens here, in the connection, rather than inside urllib3, so that there is one
place where an address is chosen for a request: the address guard (``tasks/rules/guard.py``)
checks every resolved address before a connection is tried, and the connection goes to the
address that was checked. Per-identity routes build on the same place.

A job's proxy is a connection like any other: requests builds a proxy manager per proxy URL
(``Adapter.proxy_manager_for``), whose pools are ours too, so the proxy's host is resolved here
and checked with the job's policy, and the connection goes to the checked address, for HTTP(S)
proxies and SOCKS ones (``socks5``, ``socks5h``, ``socks4``, ``socks4a``). A proxy the guard
refuses raises :class:`RefusedProxy`, naming the proxy without its credentials. Through a
SOCKS proxy that resolves nothing itself (``socks5``, ``socks4``), the site's host is resolved
here as well, checked, and its checked address is what the proxy is asked to connect to.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from urllib.parse import urlsplit

import requests
import socks
from requests.adapters import HTTPAdapter
from requests.utils import get_auth_from_url
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.contrib.socks import SOCKSConnection, SOCKSProxyManager
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.poolmanager import ProxyManager
from urllib3.util.timeout import _DEFAULT_TIMEOUT

from tasks.defaults import setting
from tasks.fetch import trust
from tasks.rules import guard, proxy_urls

_local = threading.local()
_adapters: dict[tuple[guard.Network, ...], Adapter] = {}  # per guard policy, shared by threads
_adapters_lock = threading.Lock()
# Connections kept per host: a process with more threads at one host than this closes the
# extra ones after use (and urllib3 logs "Connection pool is full").


def _forget_pools() -> None:
    """In a forked child: the parent's connections are the parent's (two processes on one
    socket would interleave their requests), and its lock may have been held by a thread the
    child does not have."""
    global _adapters_lock
    _adapters.clear()
    _adapters_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools)
_overrides_cache: tuple[str, dict[str, str]] = ("", {})


def _overrides() -> dict[str, str]:
    global _overrides_cache
    raw = setting("RESOLVE")
    if raw != _overrides_cache[0]:
        table = {}
        for item in raw.split(","):
            if "=" in item:
                name, address = item.split("=", 1)
                table[name.strip().lower().rstrip(".")] = address.strip()
        _overrides_cache = (raw, table)
    return _overrides_cache[1]


def resolve(host: str, port: int) -> list[tuple]:
    """``getaddrinfo``-style (family, type, proto, canonname, sockaddr) entries for a host."""
    name = host.strip("[]").lower().rstrip(".")
    overrides = _overrides()
    if name in overrides:
        if not overrides[name]:
            raise socket.gaierror(socket.EAI_NONAME, f"{name} does not resolve (RESOLVE)")
        name = overrides[name]
    elif name == "invalid" or name.endswith(".invalid"):
        raise socket.gaierror(socket.EAI_NONAME, f"{name} does not resolve (RFC 6761)")
    return socket.getaddrinfo(name, port, socket.AF_UNSPEC, socket.SOCK_STREAM)


class RefusedProxy(guard.BlockedAddress):
    """The guard refused the address of a proxy: no connection was tried."""

    def __init__(self, proxy: str, refused: guard.BlockedAddress) -> None:
        self.host, self.address, self.kind = refused.host, refused.address, refused.kind
        self.proxy = proxy  # scheme://host:port, credentials redacted
        Exception.__init__(self, proxy_urls.redact(f"proxy {proxy} refused: {refused}"))


def _proxy_name(scheme: str, host: str, port: object) -> str:
    return proxy_urls.redact(f"{scheme}://{host}:{port}")


def _track(sock: socket.socket) -> socket.socket:
    """Put ``sock`` under this thread's :func:`deadline`, if one runs."""
    opened = getattr(_local, "opened", None)
    if opened is not None:
        opened.append(sock)
    return sock


def _permitted(host: str, entries: list, allow: tuple[guard.Network, ...]) -> list:
    """The resolved ``entries`` of ``host`` the guard lets through; BlockedAddress (the first
    refusal) if it lets none through."""
    permitted, refused = [], None
    for entry in entries:
        try:
            guard.check(host, entry[4][0], allow)
            permitted.append(entry)
        except guard.BlockedAddress as exc:
            refused = refused or exc
    if not permitted:
        raise refused or OSError(f"no address for {host}")
    return permitted


def connect(
    host: str,
    port: int,
    timeout,
    allow: tuple[guard.Network, ...],
    source_address=None,
    socket_options=None,
) -> socket.socket:
    """A connected socket to the first address of ``host`` that the guard lets through and
    that answers; BlockedAddress if the guard lets none through (no connection is tried)."""
    error: Exception | None = None
    for family, kind, proto, _, address in _permitted(host, resolve(host, port), allow):
        sock = socket.socket(family, kind, proto)
        try:
            for option in socket_options or ():
                sock.setsockopt(*option)
            if timeout is not _DEFAULT_TIMEOUT:
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(address)
            return _track(sock)
        except OSError as exc:
            error = exc
            sock.close()
    raise error


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Connections this thread opens inside the block are shut down once ``seconds`` have
    passed, wherever their exchange stands. Timeouts bound each read, not their sum: without
    this a server could hold a call for ever with headers or a body that trickle in. A pooled
    connection opened before the block is not covered (ask for ``Connection: close``)."""
    opened: list[socket.socket] = []

    def expire() -> None:
        for sock in list(opened):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    _local.opened = opened
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        _local.opened = None


def check_target(url: str, allow: tuple[guard.Network, ...]) -> None:
    """For a request through a proxy: the guard on our own resolution of the URL's host
    (BlockedAddress if every address is refused); the proxy resolves again to connect."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        entries = resolve(host, port)
    except socket.gaierror:
        return  # the proxy may know names we do not (a private zone of its own network)
    _permitted(host, entries, allow)


class _Connection(HTTPConnection):
    """A connection to a site, or to the HTTP(S) proxy in ``self.proxy`` (urllib3 gives a
    proxy's pools their proxy, and their connections go to it)."""

    allow: tuple[guard.Network, ...] = ()  # set on the per-policy subclasses below

    def _new_conn(self) -> socket.socket:
        try:
            sock = connect(
                self._dns_host, self.port, self.timeout, self.allow, self.source_address,
                self.socket_options,
            )  # fmt: skip
        except guard.BlockedAddress as exc:
            if self.proxy is None:
                raise
            proxy = _proxy_name(self.proxy.scheme, self.proxy.host, self.proxy.port)
            raise RefusedProxy(proxy, exc) from None
        except socket.gaierror as exc:
            raise NameResolutionError(self.host, self, exc) from exc
        except TimeoutError as exc:
            raise ConnectTimeoutError(
                self, f"Connection to {self.host} timed out. (connect timeout={self.timeout})"
            ) from exc
        except OSError as exc:
            raise NewConnectionError(self, f"Failed to establish a new connection: {exc}") from exc
        sys.audit("http.client.connect", self, self.host, self.port)
        return sock


class _TLSConnection(_Connection, HTTPSConnection):
    pass


_SOCKS_SCHEMES = {1: ("socks4", "socks4a"), 2: ("socks5", "socks5h")}  # by PySocks' type, rdns


class _SOCKSConnection(SOCKSConnection):
    """A connection through a SOCKS proxy whose address passed the guard. PySocks is handed
    the checked address of the proxy (and, when the proxy resolves nothing itself, of the
    site): it has no name left to resolve."""

    allow: tuple[guard.Network, ...] = ()  # set on the per-policy subclasses below

    def _new_conn(self) -> socket.socket:
        named, site = self._socks_options, self._dns_host
        host, port = named["proxy_host"] or "", int(named["proxy_port"] or 1080)
        scheme = _SOCKS_SCHEMES.get(named["socks_version"], ("socks",) * 2)[named["rdns"]]
        try:
            entries = _permitted(host, resolve(host, port), self.allow)
        except guard.BlockedAddress as exc:
            raise RefusedProxy(_proxy_name(scheme, host, port), exc) from None
        except socket.gaierror as exc:
            raise NameResolutionError(host, self, exc) from exc
        try:
            if not named["rdns"]:  # the proxy resolves nothing: it gets the checked address
                self._dns_host = _permitted(site, resolve(site, self.port), self.allow)[0][4][0]
        except socket.gaierror as exc:
            raise NameResolutionError(site, self, exc) from exc
        try:
            for entry in entries[:-1]:
                self._socks_options = {**named, "proxy_host": entry[4][0], "proxy_port": port}
                try:
                    return _track(super()._new_conn())
                except NewConnectionError as exc:  # the proxy's next address, if this one
                    if not _unreachable(exc):  # did not answer
                        raise
            self._socks_options = {**named, "proxy_host": entries[-1][4][0], "proxy_port": port}
            return _track(super()._new_conn())
        finally:
            self._socks_options, self._dns_host = named, site


def _unreachable(exc: BaseException) -> bool:
    """Did a SOCKS connection fail to reach the proxy itself (not a site behind it)?"""
    return isinstance(exc.__cause__ or exc.__context__, socks.ProxyConnectionError)


class _SOCKSTLSConnection(_SOCKSConnection, HTTPSConnection):
    pass


@lru_cache(maxsize=32)
def _pools(allow: tuple[guard.Network, ...], through: str = "") -> dict[str, type]:
    """Connection pool classes whose connections apply the guard with ``allow``: direct or
    through an HTTP(S) proxy (``through`` ""), or through a SOCKS proxy (``"socks"``)."""
    bases = (_SOCKSConnection, _SOCKSTLSConnection) if through else (_Connection, _TLSConnection)
    plain = type("Connection", (bases[0],), {"allow": allow})
    tls = type("TLSConnection", (bases[1],), {"allow": allow})
    return {
        "http": type("Pool", (HTTPConnectionPool,), {"ConnectionCls": plain}),
        "https": type("TLSPool", (HTTPSConnectionPool,), {"ConnectionCls": tls}),
    }


class Adapter(HTTPAdapter):
    """requests' adapter whose connections resolve through us and pass the address guard,
    and whose TLS connections trust and present what ``tasks/fetch/trust.py`` says."""

    def __init__(self, allow: tuple[guard.Network, ...], **kwargs) -> None:
        self.allow = allow
        super().__init__(**kwargs)

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _pools(self.allow)

    def build_connection_pool_key_attributes(self, request, verify, cert=None) -> tuple:
        """The pool of a verified HTTPS request is keyed by, and connects with, the trust's
        SSL context (``trust.Misconfigured`` if the trust settings cannot be used). A plain
        request does without: no context is made, nor refused, for it."""
        host, pool = super().build_connection_pool_key_attributes(request, verify, cert)
        if host["scheme"] == "https" and verify is True and cert is None:
            pool["ssl_context"] = trust.context()
        return host, pool

    def cert_verify(self, conn, url: str, verify, cert) -> None:
        """requests would load certifi's bundle into every new connection's context: with
        ours, the context holds the whole trust (and the client certificate)."""
        super().cert_verify(conn, url, verify, cert)
        if verify is True and cert is None:
            conn.ca_certs = conn.ca_cert_dir = None

    def proxy_manager_for(self, proxy: str, **proxy_kwargs) -> ProxyManager:
        """The pools through ``proxy`` (a URL with its credentials), guarded like the direct
        ones; a manager is shared with other threads only once its pools are ours. An HTTPS
        proxy's own certificate is checked with the trust's context, whether it tunnels or
        forwards a plain request (a manager made under other trust settings is replaced)."""
        tls = trust.context() if proxy.lower().startswith("https:") else None
        manager = self.proxy_manager.get(proxy)
        if manager is not None and getattr(manager, "proxy_ssl_context", None) is tls:
            return manager
        sizes = {"num_pools": self._pool_connections, "maxsize": self._pool_maxsize,
                 "block": self._pool_block}  # fmt: skip
        if proxy.lower().startswith("socks"):
            username, password = get_auth_from_url(proxy)
            manager = SOCKSProxyManager(
                proxy, username=username, password=password, **sizes, **proxy_kwargs
            )
            manager.pool_classes_by_scheme = _pools(self.allow, "socks")
        else:
            tls_kwargs = {"proxy_ssl_context": tls, "ssl_context": tls} if tls else {}
            manager = ProxyManager(
                proxy, proxy_headers=self.proxy_headers(proxy), **tls_kwargs, **sizes,
                **proxy_kwargs,
            )  # fmt: skip
            manager.pool_classes_by_scheme = _pools(self.allow)
        self.proxy_manager[proxy] = manager
        return manager


class _NoCookies(requests.cookies.RequestsCookieJar):
    """A session's jar that keeps nothing. The pooled session of a thread serves every job
    and identity: the cookies a request sends are its visitor's alone, and those an answer
    sets go to its visitor (``fetching.Visitor``), never to whoever asks next."""

    def set_cookie(self, cookie, *args, **kwargs) -> None:
        pass

    def extract_cookies(self, response, request) -> None:
        pass


class _Session(requests.Session):
    """A session that never follows redirects (the fetcher follows each hop itself: deadline,
    scope, loops, so requests need not parse a Location it will not use), keeps no cookies of
    its own, and leaves its pools open when closed (the process's other threads use them)."""

    def __init__(self) -> None:
        super().__init__()
        self.cookies = _NoCookies()

    def resolve_redirects(self, *args, **kwargs):
        return iter(())

    def close(self) -> None:
        pass


def _adapter(allow: tuple[guard.Network, ...]) -> Adapter:
    """The process's pools for one guard policy. urllib3's pool manager is thread-safe, and a
    pool shared by the threads lets a host's kept-alive connection serve whichever thread
    fetches from the host next: on a broad crawl a host's next URL seldom comes back to the
    thread that fetched its last one."""
    found = _adapters.get(allow)  # every fetch asks: the lock only to make one
    if found is not None:
        return found
    with _adapters_lock:
        found = _adapters.get(allow)
        if found is None:
            if len(_adapters) >= setting("POOL_POLICIES"):
                _adapters.pop(next(iter(_adapters))).close()
            found = _adapters[allow] = Adapter(
                allow,
                pool_connections=setting("POOL_HOSTS"),
                pool_maxsize=setting("POOL_PER_HOST"),
                max_retries=0,
            )
        return found


def session(allow: tuple[guard.Network, ...] = ()) -> requests.Session:
    """This thread's session for one guard policy (requests sessions are not thread-safe),
    over the process's pools for that policy (a pooled connection is reused only under the
    policy that checked it).

    Proxies from the environment are not used: a request goes to the address the guard
    checked, or nowhere."""
    adapter = _adapter(allow)
    sessions = _local.__dict__.setdefault("sessions", {})
    s = sessions.get(allow)
    if s is None or s.adapters.get("http://") is not adapter:  # a new one since
        if len(sessions) >= setting("POOL_POLICIES"):
            sessions.clear()
        s = sessions[allow] = _Session()
        s.trust_env = False
        s.mount("http://", adapter)
        s.mount("https://", adapter)
    return s
