"""A local site that defends itself as real ones do, and forwarding proxies to reach it by.

``AntiBotSite`` knows a visitor by its *identity*: the address a request comes from and its
User-Agent. It

* bans an identity after ``limit`` requests within ``window`` seconds: each later request
  from it answers 403 "Access denied" until the test ends, or, with ``ban_s``, for that many
  seconds: 429 without ``Retry-After`` for the first half of the ban, then 403 (robots.txt is
  never counted);
* sets a session cookie on ``/`` and gates ``/members/`` behind it (no valid cookie: 403);
* answers ``/offers/N`` with a CAPTCHA page (status 200, reCAPTCHA markup), whoever asks, and
  the paths in ``forbidden`` with 403, whoever asks;
* serves ``/app/``, whose links to ``/app/item/N`` exist only once its script has run.

``ForwardProxy`` is an HTTP forward proxy (absolute-URI GETs; ``Proxy-Authorization`` basic
when it has credentials; a 502 when the site resets or refuses it) or a SOCKS5 proxy (no
authentication). Each connects to the site
from its own loopback address (127.0.0.2, 127.0.0.3, ...), so the site tells proxies apart by
address, as it would on the internet; a direct request comes from 127.0.0.1.
"""

from __future__ import annotations

import base64
import secrets
import socket
import ssl
import struct
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler
from socketserver import StreamRequestHandler, ThreadingTCPServer
from urllib.parse import urlsplit

from tests.site import LocalSite, send

CAPTCHA = (
    b"<html><head><title>Just a moment</title></head><body><h1>Verify you are human</h1>"
    b'<div class="g-recaptcha" data-sitekey="6Lc-test"></div>'
    b'<script src="https://www.google.com/recaptcha/api.js"></script></body></html>'
)
DENIED = b"<html><body><h1>Access denied</h1><p>Your requests look automated.</p></body></html>"
APP = b"""<html><head><title>App</title></head><body><div id="list">Loading...</div>
<noscript>This page needs JavaScript.</noscript>
<script>
const list = document.getElementById("list");
list.innerHTML = "";
for (let i = 0; i < %d; i++) {
  const a = document.createElement("a");
  a.href = "/app/item/" + i;
  a.textContent = "item " + i;
  list.appendChild(a);
}
</script></body></html>"""


def page(title: str, links: list[str] = (), filler: int = 2000) -> bytes:
    anchors = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    text = "Lorem ipsum dolor sit amet. " * (filler // 28)
    return f"<html><head><title>{title}</title></head><body>{anchors}<p>{text}</p></body></html>"\
        .encode()  # fmt: skip


class AntiBotSite(LocalSite):
    def __init__(
        self, pages: int = 40, members: int = 8, offers: int = 3, items: int = 5,
        limit: int = 20, window: float = 60.0, ban_s: float | None = None,
        forbidden: frozenset[str] = frozenset(),
    ) -> None:  # fmt: skip
        self.forbidden = forbidden
        self.pages, self.members, self.offers, self.items = pages, members, offers, items
        self.limit, self.window, self.ban_s = limit, window, ban_s
        self.lock = threading.Lock()
        self.seen: dict[tuple[str, str], list[float]] = defaultdict(list)  # identity -> times
        self.banned: dict[tuple[str, str], float] = {}  # identity -> when its ban began
        self.sessions: set[str] = set()
        self.log: list = []
        self.served: dict[str, list[tuple[str, str, int]]] = defaultdict(list)  # path -> who
        super().__init__(self._handler())

    def content_paths(self) -> set[str]:
        """Every page a crawl that gets past the defences stores (CAPTCHA pages excluded)."""
        return {
            "/", "/members/", "/app/",
            *(f"/p/{i}" for i in range(self.pages)),
            *(f"/members/{i}" for i in range(self.members)),
            *(f"/app/item/{i}" for i in range(self.items)),
        }  # fmt: skip

    def offer_paths(self) -> set[str]:
        return {f"/offers/{i}" for i in range(self.offers)}

    def answered(self, path: str, status: int) -> int:
        """How many requests for ``path`` got ``status``."""
        return sum(1 for _, _, s in self.served[path] if s == status)

    def identities(self) -> set[tuple[str, str]]:
        return set(self.seen)

    def _refusal(self, who: tuple[str, str]) -> int:
        """Count a request of ``who``; the status refusing it (0: admitted): 403 once it has
        made too many in the window, or with ``ban_s`` 429 for the first half of its ban."""
        now = time.monotonic()
        with self.lock:
            began = self.banned.get(who)
            if began is not None and self.ban_s is not None and now - began >= self.ban_s:
                del self.banned[who]  # the ban is over: a new window
                self.seen[who], began = [], None
            if began is None:
                times = [t for t in self.seen[who] if now - t < self.window] + [now]
                self.seen[who] = times
                if len(times) <= self.limit:
                    return 0
                began = self.banned[who] = now
            return 429 if self.ban_s is not None and now - began < self.ban_s / 2 else 403

    def _answer(self, path: str, cookie: str) -> tuple[int, dict[str, str], bytes]:
        if path in self.forbidden:
            return 403, {}, b"<html><body>Forbidden.</body></html>"
        if path == "/":
            sid = secrets.token_hex(8)
            with self.lock:
                self.sessions.add(sid)
            links = ["/members/", "/app/", *(f"/p/{i}" for i in range(self.pages)),
                     *sorted(self.offer_paths())]  # fmt: skip
            return 200, {"Set-Cookie": f"sid={sid}; Path=/; HttpOnly"}, page("home", links)
        if path.startswith("/members/"):
            sids = {p.strip()[4:] for p in cookie.split(";") if p.strip().startswith("sid=")}
            with self.lock:
                valid = bool(sids & self.sessions)
            if not valid:
                return 403, {}, b"<html><body>Session required: visit the home page.</body></html>"
            rest = path[len("/members/") :]
            if rest == "":
                return 200, {}, page("members", [f"/members/{i}" for i in range(self.members)])
            if rest.isdigit() and int(rest) < self.members:
                return 200, {}, page(f"member {rest}")
        if path.startswith("/offers/"):
            return 200, {}, CAPTCHA
        if path == "/app/":
            return 200, {}, APP % self.items
        if path.startswith("/app/item/") and path[len("/app/item/") :].isdigit():
            return 200, {}, page(f"item {path[len('/app/item/') :]}")
        if path.startswith("/p/") and path[3:].isdigit() and int(path[3:]) < self.pages:
            return 200, {}, page(f"page {path[3:]}")
        return 404, {}, b"not found"

    def _handler(self):
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                path = urlsplit(self.path).path or "/"
                who = (self.client_address[0], self.headers.get("User-Agent", ""))
                if path == "/robots.txt":
                    status, headers, body = 200, {}, b"User-agent: *\nDisallow: /private/\n"
                elif refused := site._refusal(who):
                    status, headers, body = refused, {}, DENIED
                else:
                    status, headers, body = site._answer(path, self.headers.get("Cookie", ""))
                with site.lock:
                    site.served[path].append((*who, status))
                    site.log.append((time.monotonic(), path, *who, status))
                send(self, status, headers, body)

        return Handler


class ForwardProxy:
    """A forward proxy on ``listen`` (127.0.0.1) that reaches sites from ``source`` (a loopback
    address). An HTTP one tunnels ``CONNECT`` too, and with ``tls`` (a server context) it is
    an HTTPS proxy."""

    def __init__(
        self, source: str, kind: str = "http", credentials: str = "", listen: str = "127.0.0.1",
        tls: ssl.SSLContext | None = None,
    ) -> None:  # fmt: skip
        self.source, self.kind, self.credentials, self.listen = source, kind, credentials, listen
        self.tls = tls
        self.requests = 0
        self.refused = 0  # requests without the right credentials
        self.targets: list[str] = []  # the hosts it was asked to reach, as it was told them
        self.lock = threading.Lock()
        ThreadingTCPServer.allow_reuse_address = True
        self.server = ThreadingTCPServer((listen, 0), self._handler())
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def url(self, userinfo: str = "") -> str:
        scheme = "socks5" if self.kind == "socks5" else "https" if self.tls else "http"
        return f"{scheme}://{userinfo + '@' if userinfo else ''}{self.listen}:{self.port}"

    def __enter__(self) -> ForwardProxy:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _connect(self, host: str, port: int) -> socket.socket:
        upstream = socket.socket()
        upstream.settimeout(10)
        upstream.bind((self.source, 0))
        upstream.connect((host, port))
        return upstream

    def _handler(self):
        proxy = self

        class Handler(StreamRequestHandler):
            def handle(self) -> None:
                with proxy.lock:
                    proxy.requests += 1
                if proxy.kind == "socks5":
                    self._socks()
                else:
                    self._http()

            def _http(self) -> None:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = self.rfile.readline(65537)
                    if not line:
                        return
                    head += line
                lines = head.decode("latin-1").split("\r\n")
                method, target, version = lines[0].split(" ", 2)
                headers = [h for h in lines[1:] if h]
                auth = [h for h in headers if h.lower().startswith("proxy-authorization:")]
                wanted = "Basic " + base64.b64encode(proxy.credentials.encode()).decode()
                if proxy.credentials and (not auth or auth[0].split(":", 1)[1].strip() != wanted):
                    with proxy.lock:
                        proxy.refused += 1
                    self.wfile.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                                     b'Proxy-Authenticate: Basic realm="proxy"\r\n'
                                     b"Content-Length: 0\r\nConnection: close\r\n\r\n")  # fmt: skip
                    return
                if method == "CONNECT":
                    self._tunnel(*target.rsplit(":", 1))
                    return
                parts = urlsplit(target)
                proxy.targets.append(parts.hostname)
                kept = [h for h in headers if not h.lower().startswith(("proxy-", "connection:"))]
                request = "\r\n".join([
                    f"{method} {parts.path or '/'}{'?' + parts.query if parts.query else ''} "
                    f"{version}", *kept, "Connection: close", "", "",
                ])  # fmt: skip
                try:
                    with proxy._connect(parts.hostname, parts.port or 80) as upstream:
                        upstream.sendall(request.encode("latin-1"))
                        answer = upstream.makefile("rb")
                        status = answer.readline()
                        if not status:
                            raise ConnectionResetError("the site closed without an answer")
                        while (line := answer.readline()) not in (b"\r\n", b""):
                            if not line.lower().startswith(b"connection:"):
                                status += line
                        body = answer.read()
                except OSError:  # as a real proxy answers when the site refused it
                    self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n"
                                     b"Connection: close\r\n\r\n")  # fmt: skip
                    return
                self.wfile.write(status + b"Connection: close\r\n\r\n" + body)

            def _socks(self) -> None:
                greeting = self.rfile.read(2)
                self.rfile.read(greeting[1])
                self.wfile.write(b"\x05\x00")  # no authentication
                _, cmd, _, atyp = self.rfile.read(4)
                if atyp == 1:
                    host = socket.inet_ntoa(self.rfile.read(4))
                elif atyp == 3:
                    host = self.rfile.read(self.rfile.read(1)[0]).decode()
                else:
                    host = socket.inet_ntop(socket.AF_INET6, self.rfile.read(16))
                (port,) = struct.unpack("!H", self.rfile.read(2))
                proxy.targets.append(host)
                if cmd != 1:
                    self.wfile.write(b"\x05\x07\x00\x01" + b"\0" * 6)
                    return
                with proxy._connect(host, port) as upstream:
                    self.wfile.write(b"\x05\x00\x00\x01" + socket.inet_aton(proxy.source) + b"\0\0")
                    threading.Thread(target=self._forward, args=(upstream,), daemon=True).start()
                    self._pipe(upstream)

            def _tunnel(self, host: str, port: str) -> None:
                proxy.targets.append(host)
                with proxy._connect(host, int(port)) as upstream:
                    self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    threading.Thread(target=self._forward, args=(upstream,), daemon=True).start()
                    self._pipe(upstream)

            def _forward(self, upstream: socket.socket) -> None:
                try:
                    while data := self.connection.recv(65536):
                        upstream.sendall(data)
                except OSError:
                    pass

            def _pipe(self, upstream: socket.socket) -> None:
                try:
                    while data := upstream.recv(65536):
                        self.wfile.write(data)
                except OSError:
                    pass

        return Handler
