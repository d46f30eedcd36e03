"""A local site for content tests: validators (ETag, Last-Modified) and 304s, gzip, identical
bodies, robots directives in meta tags and headers, rel=nofollow links, and pages that change
or disappear between two crawls.

``/`` links to the articles ``/a/0`` .. ``/a/{n-1}``, to ``/dup/1`` and ``/dup/2`` (the same
bytes), to ``/noindex`` (meta noindex; its link ``/behind-noindex`` is followed), to
``/nofollow`` (meta nofollow; its link ``/never/1`` is not), to ``/header-noindex``
(``X-Robots-Tag: noindex``), to ``/header-other-bot`` (noindex for another crawler only)
and, with ``rel="nofollow"``, to ``/sponsored``. Articles ``/a/i`` with ``i % 3 == 0`` are
sent gzip-encoded. ``change(i)`` gives an article new content (and validators),
``remove(i)`` makes it answer 404. ``full[path]`` and ``not_modified[path]`` count the 200s
and 304s sent.
"""

from __future__ import annotations

import gzip
import hashlib
import threading
from collections import Counter
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler

from tests.site import LocalSite, send


class ContentSite(LocalSite):
    def __init__(self, articles: int = 12) -> None:
        self.articles = articles
        self.version = dict.fromkeys(range(articles), 1)
        self.removed: set[int] = set()
        self.full: Counter[str] = Counter()
        self.not_modified: Counter[str] = Counter()
        self.conditional: Counter[str] = Counter()  # requests that carried a validator
        self._lock = threading.Lock()
        super().__init__(self._handler())

    def change(self, i: int) -> None:
        self.version[i] += 1

    def remove(self, i: int) -> None:
        self.removed.add(i)

    def article(self, i: int) -> bytes:
        v = self.version[i]
        return (
            f"<!doctype html><html><head><title>Article {i}</title></head><body>"
            f"<h1> Article  {i} </h1><p class=v>version {v}</p>"
            f'<span class="price" content="{i}.99">{i}.99 EUR</span>'
            f'<a href="/a/{(i + 1) % self.articles}">next</a> <a href="/">home</a>'
            f"</body></html>"
        ).encode()

    def index(self) -> bytes:
        links = "".join(f'<a href="/a/{i}">a{i}</a>' for i in range(self.articles))
        return (
            "<html><head><title>Home</title></head><body><h1>Home</h1>" + links +
            '<a href="/dup/1">d1</a><a href="/dup/2">d2</a><a href="/noindex">n</a>'
            '<a href="/nofollow">f</a><a href="/header-noindex">h</a>'
            '<a href="/header-other-bot">o</a><a rel="nofollow sponsored" href="/sponsored">s</a>'
            "</body></html>"
        ).encode()  # fmt: skip

    def answer(self, path: str) -> tuple[int, bytes, dict[str, str]]:
        html = {"Content-Type": "text/html; charset=utf-8"}
        if path == "/":
            return 200, self.index(), html
        if path.startswith("/a/") and path[3:].isdigit() and int(path[3:]) < self.articles:
            i = int(path[3:])
            if i in self.removed:
                return 404, b"<html><title>gone</title></html>", html
            body = self.article(i)
            changed_at = formatdate(1_700_000_000 + self.version[i], usegmt=True)
            headers = {**html, "ETag": f'"{i}-{self.version[i]}"', "Last-Modified": changed_at}
            if i % 3 == 0:
                body, headers["Content-Encoding"] = gzip.compress(body, mtime=0), "gzip"
            return 200, body, headers
        if path.startswith("/dup/"):
            return 200, b"<html><title>Same</title><h1>same bytes</h1></html>", html
        if path == "/noindex":
            body = (b'<html><head><meta name="robots" content="NoIndex"></head>'
                    b'<h1>hidden</h1><a href="/behind-noindex">b</a></html>')  # fmt: skip
            return 200, body, html
        if path == "/nofollow":
            return 200, (b'<html><head><meta name="robots" content="nofollow"></head>'
                         b'<h1>shown</h1><a href="/never/1">x</a></html>'), html  # fmt: skip
        if path == "/header-noindex":
            return 200, b"<html><h1>by header</h1></html>", {**html, "X-Robots-Tag": "noindex"}
        if path == "/header-other-bot":
            headers = {**html, "X-Robots-Tag": "otherbot: noindex, nofollow"}
            return 200, b"<html><h1>for others</h1></html>", headers
        if path in ("/behind-noindex", "/sponsored"):
            return 200, f"<html><h1>{path}</h1></html>".encode(), html
        return 404, b"<html><title>Not found</title></html>", html

    def _handler(self):
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                status, body, headers = site.answer(self.path)
                etag = headers.get("ETag")
                asked = self.headers.get("If-None-Match")
                since = self.headers.get("If-Modified-Since")
                with site._lock:
                    if asked or since:
                        site.conditional[self.path] += 1
                    fresh = etag is not None and (
                        asked == etag or (not asked and since == headers.get("Last-Modified"))
                    )
                    (site.not_modified if fresh else site.full)[self.path] += 1
                if fresh:
                    self.send_response(304)
                    self.send_header("ETag", etag)
                    self.end_headers()
                    return
                send(self, status, headers, body)

        return Handler


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()
