"""A local site with every bad case a crawler meets, logging each request with its time.

``/`` links to every case; ``robots.txt`` disallows ``/private/`` and names a sitemap index
whose gzip sitemap lists a page nothing links to.
"""

from __future__ import annotations

import email.utils
import gzip
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from tests.site import LocalSite

BOMB = gzip.compress(b"\0" * (20 << 20))
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x00" * 200
LINKS = [
    "/private/secret", "/flaky", "/ratelimited", "/gone", "/broken", "/slow", "/hang",
    "/redirect/3", "/deeper", "/loop/a", "/huge", "/binary.html", "/latin1", "/malformed",
    "/calendar/2026-01", "/q?b=2&a=1", "/q?a=1&b=2#frag", "/doc.pdf", "/redirect/12",
    "/bomb", "/ratelimited-date", "/excluded/page", "/long",
    "http://external.invalid/page", "mailto:someone@example.com", "javascript:alert(1)",
    "tel:+1555", "data:text/html,hi",
]  # fmt: skip


def page(title: str, links: list[str] = (), charset: str = "utf-8") -> bytes:
    anchors = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    return f"<html><head><title>{title}</title></head><body>{anchors}</body></html>".encode(charset)


class HostileSite(LocalSite):
    def __init__(
        self,
        robots: str | None = None,
        hang_s: float = 8.0,
        overrides: dict[str, Callable[[int], tuple[int, dict[str, str], bytes]]] | None = None,
    ) -> None:
        self.overrides = overrides or {}  # path -> f(request count) -> (status, headers, body)
        self.extra_links: list[str] = []  # absolute links the home page also carries
        self.requests: dict[str, list[float]] = defaultdict(list)  # path -> request times
        self.lock = threading.Lock()
        self.robots = robots
        self.hang_s = hang_s
        super().__init__(self._handler())

    def hits(self, path: str) -> int:
        return len(self.requests.get(path, []))

    def _after_landing(self, at_most: float = 2.5) -> None:
        """Wait until /landing was requested, below the tests' read timeout (3 s)."""
        deadline = time.monotonic() + at_most
        while not self.hits("/landing") and time.monotonic() < deadline:
            time.sleep(0.05)

    def robots_txt(self) -> str:
        if self.robots is not None:
            return self.robots
        return f"User-agent: *\nDisallow: /private/\n\nSitemap: {self.base}/sitemap.xml\n"

    def respond(self, path: str, count: int) -> tuple[int, dict[str, str], bytes]:
        if path in self.overrides:
            return self.overrides[path](count)
        html = {"Content-Type": "text/html; charset=utf-8"}
        if path == "/":
            return 200, html, page("Home", [*LINKS, *self.extra_links])
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, self.robots_txt().encode()
        if path == "/sitemap.xml":
            body = (
                '<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/'
                f'sitemap/0.9"><sitemap><loc>{self.base}/sitemap-pages.xml.gz</loc></sitemap>'
                "</sitemapindex>"
            ).encode()
            return 200, {"Content-Type": "application/xml"}, body
        if path == "/sitemap-pages.xml.gz":
            body = (
                '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/'
                f'0.9"><url><loc>{self.base}/only-in-sitemap</loc></url></urlset>'
            ).encode()
            return 200, {"Content-Type": "application/gzip"}, gzip.compress(body)
        if path == "/flaky":
            return (503, html, page("Busy")) if count <= 2 else (200, html, page("Flaky"))
        if path == "/ratelimited":
            if count == 1:
                return 429, {**html, "Retry-After": "2"}, page("Slow down")
            return 200, html, page("Rate limited")
        if path == "/ratelimited-date":
            if count == 1:
                when = email.utils.formatdate(time.time() + 3, usegmt=True)
                return 429, {**html, "Retry-After": when}, page("Slow down")
            return 200, html, page("Rate limited by date")
        if path == "/bomb":  # 20 MiB of zeros in 20 KiB of gzip
            return 200, {**html, "Content-Encoding": "gzip"}, BOMB
        if path == "/broken":
            return 500, html, page("Broken")
        if path == "/slow":
            time.sleep(0.5)
            return 200, html, page("Slow")
        if path.startswith("/redirect/"):
            n = int(path.rsplit("/", 1)[1])
            target = f"/redirect/{n - 1}" if n > 1 else "/landing"
            return 302, {"Location": target}, b""
        if path == "/landing":
            return 200, html, page("Landing")
        if path == "/deeper":  # /landing is linked two levels down, each answered only once the
            self._after_landing()  # redirect chain reached it (or, at most, after 2.5 s)
            return 200, html, page("Deeper", ["/deeper2"])
        if path == "/deeper2":
            self._after_landing()
            return 200, html, page("Deeper 2", ["/landing"])
        if path in ("/loop/a", "/loop/b"):
            return 301, {"Location": "/loop/b" if path == "/loop/a" else "/loop/a"}, b""
        if path == "/huge":
            return 200, html, page("Huge", ["/after-huge"]) + b" " * (3 << 20)
        if path == "/binary.html":
            return 200, html, PNG
        if path == "/latin1":
            body = page("Caf\u00e9 cr\u00e8me", ["/from-latin1"], charset="latin-1")
            return 200, {"Content-Type": "text/html; charset=iso-8859-1"}, body
        if path == "/malformed":
            body = (
                b"<html><title>Broken</title><div><a href='/from-malformed-a'>a<table>"
                b'<tr><td><a href=/from-malformed-b>b</p></div></td><a href="/from-malf'
            )
            return 200, html, body
        if path.startswith("/calendar/"):
            year, month = (int(x) for x in path.rsplit("/", 1)[1].split("-"))
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
            return 200, html, page(path, [f"/calendar/{year}-{month:02d}"])
        if path == "/q":
            return 200, html, page("Query")
        if path == "/doc.pdf":
            return 200, {"Content-Type": "application/pdf"}, b"%PDF-1.4 " + b"x" * 100
        if path in ("/only-in-sitemap", "/from-latin1", "/from-malformed-a",
                    "/from-malformed-b", "/after-huge", "/private/secret"):  # fmt: skip
            return 200, html, page(path)
        if path.startswith("/p/"):
            return 200, html, page(path)
        return 404, html, page("Not found")

    def _handler(self):
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                key = self.path if "?" in self.path else urlsplit(self.path).path
                with site.lock:
                    site.requests[key].append(time.monotonic())
                    count = len(site.requests[key])
                if key == "/hang":
                    return site.hang(self)
                if key == "/long":  # longer than the suite's lease (3 s), within its deadline
                    return site.trickle(self, page("Long"), seconds=4.5)
                status, headers, body = site.respond(urlsplit(self.path).path, count)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def trickle(self, handler: BaseHTTPRequestHandler, body: bytes, seconds: float) -> None:
        """A complete page sent in ten parts over ``seconds``: slow, never silent for long."""
        handler.send_response(200)
        handler.send_header("Content-Type", "text/html")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        step = -(-len(body) // 10)
        for start in range(0, len(body), step):
            handler.wfile.write(body[start : start + step])
            handler.wfile.flush()
            time.sleep(seconds / 10)

    def hang(self, handler: BaseHTTPRequestHandler) -> None:
        """A page that never finishes: a byte every half second, past any deadline."""
        handler.send_response(200)
        handler.send_header("Content-Type", "text/html")
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        end = time.monotonic() + self.hang_s
        try:
            while time.monotonic() < end:
                handler.wfile.write(b"x")
                handler.wfile.flush()
                time.sleep(0.5)
        except OSError:
            pass
        handler.close_connection = True
