"""How a request leaves: a pooled ``requests`` session per thread whose connections resolve
the host once, through :func:`resolve`, and connect to the address they resolved.

Reads ``RESOLVE``: ``host=address`` overrides of name resolution, comma-separated, like curl's
``--resolve`` (``docs.internal=10.0.0.7``, or ``host=`` for a name that must not resolve).
Names under ``.invalid`` never resolve (RFC 6761 reserves them), without asking a resolver.
Everything else goes to the system resolver (``getaddrinfo``).

Resolution happens here, in the connection, rather than inside urllib3, so that there is one
place where an address is chosen for a request: the address guard and per-identity routes
build on it.
"""

from __future__ import annotations

import socket
import sys
import threading
import urllib.request

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util.timeout import _DEFAULT_TIMEOUT

from tasks.defaults import setting

_local = threading.local()
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


def connect(host: str, port: int, timeout, source_address=None, socket_options=None):
    """A connected socket to the first address of ``host`` that answers."""
    error: OSError | None = None
    for family, kind, proto, _, address in resolve(host, port):
        sock = socket.socket(family, kind, proto)
        try:
            for option in socket_options or ():
                sock.setsockopt(*option)
            if timeout is not _DEFAULT_TIMEOUT:
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(address)
            return sock
        except OSError as exc:
            error = exc
            sock.close()
    raise error or OSError(f"no address for {host}")


class _Connection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        try:
            sock = connect(
                self._dns_host, self.port, self.timeout, self.source_address, self.socket_options
            )
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


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Connection


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = _TLSConnection


class Adapter(HTTPAdapter):
    """requests' adapter with connection pools whose connections resolve through us."""

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}


class _Session(requests.Session):
    """A session that never follows redirects: the fetcher follows each hop itself (deadline,
    scope, loops), so requests need not parse a Location it will not use."""

    def resolve_redirects(self, *args, **kwargs):
        return iter(())


def session() -> requests.Session:
    """This thread's pooled session (requests sessions are not thread-safe)."""
    s = getattr(_local, "session", None)
    if s is None:
        s = _Session()
        # With no proxy in the environment, skip requests' per-request environment scan.
        s.trust_env = bool(urllib.request.getproxies())
        adapter = Adapter(pool_connections=64, pool_maxsize=16, max_retries=0)
        s.mount("http://", adapter)
        s.mount("https://", adapter)
        _local.session = s
    return s
