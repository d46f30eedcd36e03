"""A defended site: every kind of trouble a crawler meets on one host, as one site mixes them.

``DefendedSite`` serves, on one host (127.0.0.1, a free port):

* ``/``: the home page, the cookie gate: it sets a session cookie (``sid``) and links to every
  section;
* ``/open/`` and ``/open/N``: pages anyone may have, at any pace;
* ``/account/`` and ``/account/N``: pages behind the gate: without a session the home page
  gave, 403 "Please sign in";
* ``/busy/`` and ``/busy/N``: the busy section, which bans after a burst: each *part* of a
  visitor's identity (its user agent, its address: the proxy it comes through, its session
  cookie) is counted apart, and a part that made more requests to the section within
  ``window`` seconds than its limit is banned for its ban length (``bans``: part -> signal,
  seconds, limit). A request that carries a banned part is refused with that part's signal,
  in the busy section only;
* ``/verify/N``: a CAPTCHA page (status 200, reCAPTCHA markup) whoever asks;
* ``/app/``: links to the home page and the open section in its HTML, and to ``/app/item/N``
  only once its script has run.

Signals a ban may answer with: ``"403"``,
``"429"`` (no Retry-After), ``"429ra"`` (Retry-After: the ban's remaining seconds), ``"503"``,
``"soft"`` (200 with an "Access denied" page), ``"redirect"`` (302 to ``/sorry``, a 200 block
page that names no known marker in its address) and ``"reset"`` (the connection closed
without an answer).

The site counts what it served: per path, who asked and with which status, so that a test
can tell every real page from what a crawl stored.
"""

from __future__ import annotations

import secrets
import socket
import struct
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from tests.antibot import CAPTCHA
from tests.site import LocalSite, send

PARTS = ("ua", "ip", "session")
DENIED = (
    b"<html><head><title>Access denied</title></head><body><h1>Access denied</h1>"
    b"<p>Your requests look automated. Try again later.</p></body></html>"
)
SORRY = (
    b"<html><head><title>Sorry</title></head><body><h2>We're sorry</h2><p>Access denied: "
    b"too many requests from your network.</p><a href=\"/\">Home</a></body></html>"
)
APP = """<html><head><title>Catalogue app</title></head><body>
<nav><a href="/">Home</a> <a href="/open/0">Open</a></nav>
<main id="list">Loading the catalogue...</main>
<script>
const list = document.getElementById("list");
list.textContent = "";
for (let i = 0; i < %d; i++) {
  const a = document.createElement("a");
  a.href = "/app/item/" + i;
  a.textContent = "item " + i;
  list.appendChild(a);
}
</script></body></html>"""


def page(title: str, links: list[str] = (), words: int = 400) -> bytes:
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    text = " ".join(f"{title} paragraph word {i}." for i in range(words // 4))
    return (f"<html><head><title>{title}</title></head><body><h1>{title}</h1><ul>{anchors}</ul>"
            f"<p>{text}</p></body></html>").encode()  # fmt: skip


class DefendedSite(LocalSite):
    def __init__(
        self,
        open_pages: int = 30,
        gated: int = 30,
        busy: int = 40,
        captchas: int = 3,
        js_items: int = 10,
        window: float = 3.0,
        bans: dict[str, tuple[str, float, int]] | None = None,
        latency: float = 0.0,
    ) -> None:
        self.sizes = {"open": open_pages, "account": gated, "busy": busy}
        self.captchas, self.js_items = captchas, js_items
        self.window, self.latency = window, latency
        self.bans = bans if bans is not None else {
            "session": ("soft", 15.0, 5), "ua": ("403", 20.0, 8), "ip": ("429", 25.0, 10),
        }  # fmt: skip
        self.lock = threading.Lock()
        self.seen: dict[tuple[str, str], list[float]] = defaultdict(list)  # part -> times
        self.banned_until: dict[tuple[str, str], float] = {}  # part -> end of its ban
        self.ban_count: dict[str, int] = defaultdict(int)  # part kind -> bans given
        self.sessions: set[str] = set()
        self.served: dict[str, list[tuple[str, str, int]]] = defaultdict(list)  # path -> who
        super().__init__(self._handler())

    # What a crawl that gets past every defence ends with.
    def sections(self) -> dict[str, set[str]]:
        """The real pages, by section (what a crawl must store)."""
        out = {
            name: {f"/{name}/", *(f"/{name}/{i}" for i in range(n))}
            for name, n in self.sizes.items()
        }
        out["home"] = {"/"}
        out["app"] = {"/app/", *(f"/app/item/{i}" for i in range(self.js_items))}
        return out

    def real_pages(self) -> set[str]:
        return set().union(*self.sections().values())

    def captcha_pages(self) -> set[str]:
        return {f"/verify/{i}" for i in range(self.captchas)}

    def answered(self, path: str, status: int) -> int:
        return sum(1 for _, _, s in self.served[path] if s == status)

    def refusals(self) -> int:
        """Requests the busy section refused."""
        return sum(self.ban_count.values())

    def _refusal(self, parts: dict[str, str]) -> tuple[str, float] | None:
        """Count a busy-section request of a visitor with these identity ``parts``; the
        signal refusing it and the seconds its ban has left (None: let in)."""
        now = time.monotonic()
        with self.lock:
            for kind, value in parts.items():
                if kind not in self.bans or not value:
                    continue
                key = (kind, value)
                until = self.banned_until.get(key)
                if until is not None and now >= until:
                    del self.banned_until[key]
                    self.seen[key] = []
                if key in self.banned_until:
                    continue
                times = [t for t in self.seen[key] if now - t < self.window] + [now]
                self.seen[key] = times
                if len(times) > self.bans[kind][2]:
                    self.banned_until[key] = now + self.bans[kind][1]
            for kind in self.bans:  # the first part banned, in the order of ``bans``
                until = self.banned_until.get((kind, parts.get(kind, "")))
                if until is not None:
                    self.ban_count[kind] += 1
                    return self.bans[kind][0], until - now
        return None

    def _answer(self, path: str, sid: str) -> tuple[int, dict[str, str], bytes]:
        if path == "/":
            new = secrets.token_hex(8)
            with self.lock:
                self.sessions.add(new)
            links = ["/open/", "/account/", "/busy/", "/app/",
                     *sorted(self.captcha_pages())]  # fmt: skip
            return 200, {"Set-Cookie": f"sid={new}; Path=/; HttpOnly"}, page("Home", links)
        if path == "/sorry":
            return 200, {}, SORRY
        if path == "/app/":
            return 200, {}, (APP % self.js_items).encode()
        if path.startswith("/verify/"):
            return 200, {}, CAPTCHA
        section, _, rest = path.strip("/").partition("/")
        if path.startswith("/app/item/") and path[10:].isdigit() and int(path[10:]) < self.js_items:
            return 200, {}, page(f"Item {path[10:]}", ["/app/"])
        if section not in self.sizes:
            return 404, {}, b"<html><title>Not found</title></html>"
        if section == "account":
            with self.lock:
                signed_in = sid in self.sessions
            if not signed_in:
                return 403, {}, b"<html><body><h1>Please sign in</h1></body></html>"
        n = self.sizes[section]
        if rest == "":
            return 200, {}, page(f"{section} index", [f"/{section}/{i}" for i in range(n)])
        if rest.isdigit() and int(rest) < n:
            i = int(rest)
            siblings = [f"/{section}/{(i + 1) % n}", f"/{section}/{(i * 7 + 3) % n}"]
            return 200, {}, page(f"{section} {i}", [f"/{section}/", *siblings])
        return 404, {}, b"<html><title>Not found</title></html>"

    def _handler(self):
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                path = urlsplit(self.path).path or "/"
                cookies = dict(
                    c.strip().split("=", 1) for c in self.headers.get("Cookie", "").split(";")
                    if "=" in c
                )  # fmt: skip
                sid = cookies.get("sid", "")
                parts = {"ua": self.headers.get("User-Agent", ""),
                         "ip": self.client_address[0], "session": sid}  # fmt: skip
                who = (parts["ip"], parts["ua"])
                if site.latency:
                    time.sleep(site.latency)
                refusal = None
                if path.startswith("/busy/"):
                    refusal = site._refusal(parts)
                if path == "/robots.txt":
                    status, headers, body = 200, {"Content-Type": "text/plain"}, b"User-agent: *\n"
                elif refusal is not None:
                    signal, left = refusal
                    if signal == "reset":
                        with site.lock:
                            site.served[path].append((*who, 0))
                        self._reset()
                        return
                    status, headers, body = self._refuse(signal, left)
                else:
                    status, headers, body = site._answer(path, sid)
                with site.lock:
                    site.served[path].append((*who, status))
                send(self, status, headers, body)

            def _refuse(self, signal: str, left: float) -> tuple[int, dict[str, str], bytes]:
                if signal == "soft":
                    return 200, {}, DENIED
                if signal == "redirect":
                    return 302, {"Location": "/sorry"}, b""
                if signal == "429ra":
                    return 429, {"Retry-After": str(max(1, round(left)))}, DENIED
                return int(signal), {}, DENIED

            def _reset(self) -> None:
                """Close the connection with a reset, no answer."""
                self.close_connection = True
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))  # fmt: skip
                self.connection.close()

        return Handler
