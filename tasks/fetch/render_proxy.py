"""The one door of the render step's browser: a small forward proxy on 127.0.0.1 that every
request Chromium makes goes through (navigations, each redirect hop, subresources,
WebSockets, workers' requests; HTTPS and WebSockets as ``CONNECT`` tunnels, plain HTTP
forwarded).

A tunnel that carries TLS (HTTPS, wss) ends here (``render_tls.py``): the door shows the
browser a certificate it minted for the host, which only this process's browser accepts, and
makes the TLS connection to the site itself with the fetcher's trust (``trust.py``: the CA
settings, the client certificate, the job's ``TLS_VERIFY``), checking the site's certificate
and host name; a site that fails that check is refused as ``tls`` with the fetcher's message.
A tunnel that does not carry TLS (a ``ws:`` WebSocket) is relayed as it is.

For each request or tunnel the target's host is resolved once by the transport's resolver
(``transport.resolve``: ``RESOLVE`` overrides, ``.invalid``), every address is checked by the
address guard with the job's policy (``tasks/rules/guard.py``: public addresses and the
job's permitted ``ALLOWED_NETWORKS``), and the connection goes to the address that was
checked. Chromium is told never to resolve a name itself (``render.py``), so a name cannot
mean one address to the check and another to the browser, and ``*.localhost`` means nothing
the guard did not see. A refusal answers 403 to the browser and is kept in
:attr:`Door.refused`, so the render's outcome can say what was refused. A service worker's
script (Chromium marks its request ``Service-Worker: script``) is refused too, where the door
can read the request (plain HTTP; the browser context blocks registration everywhere).

With a job's proxy (``http``, ``https``, ``socks5``, ``socks5h``), the door chains to it: the
proxy's own host is resolved and checked the same way and the connection goes to the checked
address; the target is checked on our resolution of its name first (as the fetcher does for
its proxies: a name only the proxy's network knows is the proxy's to resolve).

Reads the TLS settings through ``trust.py`` (the site's, and an HTTPS proxy's own certificate,
as the fetcher checks them); the policy, the timeouts and the proxy come from the caller.
"""

from __future__ import annotations

import base64
import re
import select
import socket
import socketserver
import ssl
import threading
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from tasks.fetch import outcomes, render_tls, transport, trust
from tasks.rules import guard

HEAD_MAX_BYTES = 64 << 10  # a request's or an answer's head, in bytes (as the fetcher caps them)
_SERVICE_WORKER = re.compile(rb"(?im)^service-worker:")  # Chromium's mark on a worker's script
_NO_WORKERS = "service workers are blocked"
_TLS_HANDSHAKE = b"\x16"  # the first byte of a TLS handshake record: a ClientHello begins so
_HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization",
               b"proxy-authenticate", b"te", b"trailer", b"upgrade"}  # fmt: skip


@dataclass(frozen=True)
class Refusal:
    """A request the door did not let through."""

    host: str
    port: int
    kind: str  # "blocked" (the guard), "unresolved" (no address), "unreachable", "proxy",
    # "tls" (the site's certificate or handshake), "settings" (unusable TLS settings)
    reason: str


class Refused(Exception):
    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


@dataclass
class Policy:
    """What one render may reach: the guard's allowed networks, through which proxy."""

    allow: tuple[guard.Network, ...] = ()
    upstream: str | None = None  # the job's proxy URL, credentials included (never logged)
    timeout: float = 15.0  # seconds: connect, and each read or write of a connection
    verify: bool = True  # check sites' certificates (the job's TLS_VERIFY, trust.verifies)
    refuse_all: bool = False  # a door for no render (the browser's launch default)
    refused: list[Refusal] = field(default_factory=list)


class Door:
    """A forward proxy on 127.0.0.1 for one policy, ending TLS tunnels with ``interception``'s
    certificates (those the browser was told to accept); ``close`` ends every connection it
    holds."""

    def __init__(self, policy: Policy, interception: render_tls.Interception) -> None:
        self.policy = policy
        self.interception = interception
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.door = self
        self._thread = threading.Thread(  # polls every 50 ms: close() waits for the poll
            target=self._server.serve_forever, args=(0.05,), name="render-door", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def refused(self) -> list[Refusal]:
        return list(self.policy.refused)

    def refuse(self, host: str, port: int, kind: str, reason: str) -> None:
        self.policy.refused.append(Refusal(host, port, kind, reason))

    def refusal_for(self, url: str) -> Refusal | None:
        """The refusal of ``url``'s host and port, if the door refused it."""
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
        host = (parts.hostname or "").lower()
        return next((r for r in self.refused if (r.host, r.port) == (host, port)), None)

    def track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._server.closing:
                return False
            self._sockets.add(sock)
            return True

    def forget(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)
        sock.close()

    def close(self) -> None:
        with self._lock:
            self._server.closing = True
            held = list(self._sockets)
        for sock in held:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Door:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    door: Door
    closing = False


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """An HTTP head (up to and with its blank line) and the bytes read past it."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > HEAD_MAX_BYTES:
            raise Refused("unreachable", "a head above 64 KiB")
        chunk = sock.recv(16384)
        if not chunk:
            raise ConnectionError("closed before the end of the head")
        data += chunk
    end = data.index(b"\r\n\r\n") + 4
    return data[:end], data[end:]


def _answer(sock: socket.socket, status: int, text: str) -> None:
    body = text.encode("utf-8", "replace")
    reason = {403: "Forbidden", 502: "Bad Gateway", 400: "Bad Request"}.get(status, "Error")
    sock.sendall(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


_End = socket.socket | render_tls.TLSEnd  # one side of a relay: as it came, or TLS ended here


def _pipe(a: _End, b: _End, idle: float) -> None:
    """Copy bytes both ways until either side closes or nothing moves for ``idle`` seconds."""
    while True:
        readable, _, _ = select.select([a, b], [], [], idle)
        if not readable:
            return
        for src in readable:
            data = _read(src)
            if data is None:
                return
            if data:  # a TLS record may carry no data (a session ticket)
                (b if src is a else a).sendall(data)


def _read(end: _End) -> bytes | None:
    """What arrived on ``end`` (b'' if nothing for the other side), None once it closed."""
    if isinstance(end, render_tls.TLSEnd):
        return end.read()
    return render_tls.receive(end) or None


def _intercept(
    door: Door, host: str, port: int, client: socket.socket, upstream: socket.socket,
    received: bytes,
) -> None:  # fmt: skip
    """Relay a tunnel that carries TLS: the handshake with the site first, with the fetcher's
    trust (a failure is refused, named as the fetcher names it), then the browser's, with a
    certificate minted for ``host``, then the plaintext both ways. ``received``: the start of
    the browser's handshake, if it came with the ``CONNECT``."""
    try:
        site = render_tls.TLSEnd(upstream, _tls(door.policy.verify), server_hostname=host)
        site.handshake()
    except Refused as exc:
        door.refuse(host, port, exc.kind, str(exc))
        return
    except ssl.SSLError as exc:
        door.refuse(host, port, "tls", _tls_reason(exc))
        return
    browser = render_tls.TLSEnd(client, door.interception.for_browser(host), received=received)
    browser.handshake()
    try:
        if early := browser.pending():
            site.sendall(early)
        _pipe(browser, site, door.policy.timeout)
    except ssl.SSLError as exc:
        if site.failure is not exc:
            raise
        door.refuse(host, port, "tls", _tls_reason(exc))  # a client certificate refused late


def _tls(verify: bool) -> ssl.SSLContext:
    """The fetcher's client-side context; Refused if the TLS settings cannot be used."""
    try:
        return render_tls.for_site(verify)
    except trust.Misconfigured as exc:
        raise Refused("settings", f"TLS settings: {exc}") from None


def _tls_reason(exc: ssl.SSLError) -> str:
    return str(outcomes.tls_failure(exc, f"{type(exc).__name__}: {exc}"))


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        door: Door = self.server.door
        client = self.request
        if not door.track(client):
            return
        client.settimeout(door.policy.timeout)
        upstream = None
        try:
            head, rest = _read_head(client)
            line, _, headers = head.partition(b"\r\n")
            method, target, _version = line.decode("latin-1").split(" ", 2)
            if method == "CONNECT":
                host, port = _host_port(target, 443)
            else:
                parts = urlsplit(target)
                if parts.scheme != "http" or not parts.hostname:
                    _answer(client, 400, f"not a proxy request: {target[:200]}")
                    return
                host, port = parts.hostname, parts.port or 80
                if _SERVICE_WORKER.search(headers):
                    door.refuse(host.lower(), port, "blocked", _NO_WORKERS)
                    _answer(client, 403, _NO_WORKERS)
                    return
            try:
                upstream, absolute = _open(door.policy, host.lower(), port, method != "CONNECT")
            except Refused as exc:
                door.refuse(host.lower(), port, exc.kind, str(exc))
                _answer(client, 403 if exc.kind == "blocked" else 502, str(exc))
                return
            if not door.track(upstream):
                return
            if method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if (rest[:1] or client.recv(1, socket.MSG_PEEK)) == _TLS_HANDSHAKE:
                    _intercept(door, host.lower(), port, client, upstream, rest)
                    return
                upstream.sendall(rest)
            else:
                upstream.sendall(_request_head(method, target, headers, absolute, door.policy))
                upstream.sendall(rest)
                answer, more = _read_head(upstream)
                client.sendall(_closing(answer) + more)
            _pipe(client, upstream, door.policy.timeout)
        except (OSError, ValueError, Refused):
            return  # the browser sees the connection end; the page's load records it
        finally:
            if upstream is not None:
                door.forget(upstream)
            door.forget(client)


def _host_port(target: str, default: int) -> tuple[str, int]:
    host, _, port = target.rpartition(":")
    if not host:
        return target.strip("[]"), default
    return host.strip("[]"), int(port)


def _request_head(method: str, target: str, headers: bytes, absolute: bool, policy: Policy):
    """The browser's request head for the next hop: origin-form to a server, absolute-form
    with the job's credentials to a proxy; one request per connection either way."""
    parts = urlsplit(target)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    lines = [f"{method} {target if absolute else path} HTTP/1.1".encode("latin-1")]
    lines += [h for h in headers.split(b"\r\n") if h and h.split(b":", 1)[0].strip().lower()
              not in _HOP_BY_HOP]  # fmt: skip
    if absolute and (auth := _proxy_auth(policy.upstream or "")):
        lines.append(auth)
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _closing(head: bytes) -> bytes:
    """An answer's head telling the browser that its connection ends with the answer."""
    lines = [h for h in head.split(b"\r\n") if h and h.split(b":", 1)[0].strip().lower()
             not in (b"connection", b"keep-alive", b"proxy-connection")]  # fmt: skip
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n"


def _proxy_auth(proxy: str) -> bytes:
    parts = urlsplit(proxy)
    if not parts.username:
        return b""
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return b"Proxy-Authorization: Basic " + base64.b64encode(pair)


def _connect(host: str, port: int, policy: Policy) -> socket.socket:
    """A connection to an address of ``host`` that the guard let through."""
    try:
        sock = transport.connect(host, port, policy.timeout, policy.allow)
    except guard.BlockedAddress as exc:
        raise Refused("blocked", str(exc)) from None
    except socket.gaierror as exc:
        raise Refused("unresolved", f"{host} does not resolve: {exc}") from None
    except OSError as exc:
        raise Refused("unreachable", f"{host}:{port}: {exc}") from None
    sock.settimeout(policy.timeout)
    return sock


def _open(policy: Policy, host: str, port: int, plain: bool) -> tuple[socket.socket, bool]:
    """A connection that carries the browser's bytes to ``host:port`` (direct, or a tunnel
    through the job's proxy), and whether requests on it take the absolute form (``plain``
    HTTP, to an HTTP proxy that forwards it)."""
    if policy.refuse_all:
        raise Refused("blocked", "no render is in progress")
    if not policy.upstream:
        return _connect(host, port, policy), False
    try:
        transport.check_target(f"http://{host}:{port}/", policy.allow)
    except guard.BlockedAddress as exc:
        raise Refused("blocked", str(exc)) from None
    proxy = urlsplit(policy.upstream)
    proxy_port = proxy.port or {"https": 443, "http": 80}.get(proxy.scheme, 1080)
    sock = _connect(proxy.hostname or "", proxy_port, policy)
    try:
        if proxy.scheme.startswith("socks"):
            _socks5(sock, host, port, policy, proxy.scheme == "socks5h")
            return sock, False
        if proxy.scheme == "https":  # the proxy's own certificate: checked as the fetcher does
            sock = _tls(True).wrap_socket(sock, server_hostname=proxy.hostname)
        if plain:
            return sock, True  # the proxy forwards plain HTTP (many refuse CONNECT but to 443)
        sock.sendall(
            f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n".encode()
            + (_proxy_auth(policy.upstream) + b"\r\n" if proxy.username else b"")
            + b"\r\n"
        )
        answer, _ = _read_head(sock)
        status = answer.split(b" ", 2)[1:2]
        if status != [b"200"]:
            raise Refused("proxy", f"the job's proxy answered {answer[:40]!r} to CONNECT")
        return sock, False
    except ssl.SSLError as exc:
        sock.close()
        raise Refused("proxy", f"the job's proxy failed: {_tls_reason(exc)}") from None
    except (OSError, ValueError) as exc:
        sock.close()
        raise Refused("proxy", f"the job's proxy failed: {type(exc).__name__}") from None
    except Refused:
        sock.close()
        raise


def _socks5(sock: socket.socket, host: str, port: int, policy: Policy, remote_dns: bool):
    """RFC 1928's CONNECT (with RFC 1929's user and password), on a checked connection."""
    proxy = urlsplit(policy.upstream or "")
    user, password = unquote(proxy.username or ""), unquote(proxy.password or "")
    sock.sendall(b"\x05\x02\x00\x02" if user else b"\x05\x01\x00")
    reply = _exactly(sock, 2)
    if reply[1] == 2 and user:
        sock.sendall(bytes([1, len(user)]) + user.encode() + bytes([len(password)])
                     + password.encode())  # fmt: skip
        if _exactly(sock, 2)[1] != 0:
            raise Refused("proxy", "the job's SOCKS proxy refused its credentials")
    elif reply[1] != 0:
        raise Refused("proxy", "the job's SOCKS proxy offers no method we can use")
    if remote_dns:
        address = b"\x03" + bytes([len(host)]) + host.encode("idna")
    else:
        family, ip = _checked_address(host, port, policy)
        packed = socket.inet_pton(family, ip)
        address = (b"\x01" if len(packed) == 4 else b"\x04") + packed
    sock.sendall(b"\x05\x01\x00" + address + port.to_bytes(2, "big"))
    head = _exactly(sock, 4)
    if head[1] != 0:
        raise Refused("unreachable", f"the job's SOCKS proxy could not connect ({head[1]})")
    size = {1: 4, 4: 16}.get(head[3]) or _exactly(sock, 1)[0]
    _exactly(sock, size + 2)


def _checked_address(host: str, port: int, policy: Policy) -> tuple[int, str]:
    """The first address of ``host`` (our resolution) that the guard lets through."""
    try:
        entries = transport.resolve(host, port)
    except socket.gaierror as exc:
        raise Refused("unresolved", f"{host} does not resolve: {exc}") from None
    refusal = None
    for family, _, _, _, address in entries:
        try:
            guard.check(host, address[0], policy.allow)
            return family, address[0]
        except guard.BlockedAddress as exc:
            refusal = refusal or exc
    raise Refused("blocked", str(refusal or f"no address for {host}"))


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the proxy closed the connection")
        data += chunk
    return data
