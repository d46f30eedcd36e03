"""A generated web site on 127.0.0.1 for end-to-end tests, counting every request it serves.

Pages ``/p/0`` .. ``/p/{n-1}`` link to each other in cycles (every page is reachable from
``/p/0`` through ``/p/i -> /p/i+1``), and also to: an off-site host, a ``mailto:`` and a
fragment of themselves (none of which may be fetched), ``/missing/i`` (404) on every 25th page,
``/error`` (always 500) from page 10, and on every 40th page two spellings of one query URL
(``?b=2&a=1`` and ``?a=1&b=2#x``) that canonicalize to one frontier entry.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import urlsplit


def send(handler: BaseHTTPRequestHandler, status: int, headers: dict, body: bytes) -> None:
    """Answer a request: status, headers (HTML unless they say otherwise), length and body."""
    handler.send_response(status)
    for name, value in {"Content-Type": "text/html; charset=utf-8", **headers}.items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class LocalSite:
    """An HTTP server on 127.0.0.1 (or another loopback ``address``: another host to a
    crawl's scope), on a free port, serving while its ``with`` block runs."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], address: str = "127.0.0.1") -> None:
        self.server = ThreadingHTTPServer((address, 0), handler)
        self.server.daemon_threads = True

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, path: str) -> str:
        return self.base + path

    def __enter__(self) -> Self:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class Site(LocalSite):
    def __init__(self, pages: int = 300, delay: float = 0.0) -> None:
        self.pages = pages
        self.delay = delay
        self.hits: Counter[str] = Counter()
        self.times: list[float] = []  # when each request arrived (monotonic)
        self.in_flight = 0
        self.max_in_flight = 0  # most requests being served at once
        self._lock = threading.Lock()
        super().__init__(self._handler())

    # What a correct crawl from /p/0 must end with.
    def expected_done(self) -> set[str]:
        done = {self.url(f"/p/{i}") for i in range(self.pages)}
        done |= {self.url(f"/p/{i}?a=1&b=2") for i in range(0, self.pages, 40)}
        return done

    def expected_failed(self) -> set[str]:
        failed = {self.url(f"/missing/{i}") for i in range(0, self.pages, 25)}
        if self.pages > 10:
            failed.add(self.url("/error"))
        return failed

    def links(self, i: int) -> list[str]:
        n = self.pages
        out = [
            f"/p/{(i * 7 + 3) % n}",
            f"/p/{i // 2}",
            "#top",
            "mailto:someone@example.com",
            f"http://external.invalid/{i}",
        ]
        if i + 1 < n:
            out.append(f"/p/{i + 1}")
        if i % 25 == 0:
            out.append(f"/missing/{i}")
        if i == 10:
            out.append("/error")
        if i % 40 == 0:
            out += [f"/p/{i}?b=2&a=1", f"/p/{i}?a=1&b=2#x"]
        return out

    def page(self, i: int) -> bytes:
        anchors = "".join(f'<li><a href="{href}">link</a></li>' for href in self.links(i))
        return (
            f"<!doctype html><html><head><title>Page {i}</title></head>"
            f"<body><h1 id=top>Page {i}</h1><ul>{anchors}</ul></body></html>"
        ).encode()

    def _handler(self):
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as production servers do

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                with site._lock:
                    site.hits[site.url(self.path)] += 1
                    site.times.append(time.monotonic())
                    site.in_flight += 1
                    site.max_in_flight = max(site.max_in_flight, site.in_flight)
                try:
                    self._serve()
                finally:
                    with site._lock:
                        site.in_flight -= 1

            def _serve(self) -> None:
                if site.delay:
                    time.sleep(site.delay)
                path = urlsplit(self.path).path
                status, body = 404, b"<html><title>Not found</title></html>"
                if path.startswith("/p/") and path[3:].isdigit() and int(path[3:]) < site.pages:
                    status, body = 200, site.page(int(path[3:]))
                elif path == "/error":
                    status, body = 500, b"<html><title>Server error</title></html>"
                send(self, status, {}, body)

        return Handler
