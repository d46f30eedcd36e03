"""An ordinary site on one host with a handful of broken pages mixed in, as real sites have.

``/`` links to ``pages`` ordinary pages (``/p/0`` .. ``/p/{n-1}``, which link on to each
other) and to the trouble:

* ``/flaky/K`` answer 503 twice, then 200; ``/limited/K`` answer 429 with ``Retry-After: 2``
  once, then 200; ``/timed-out/K`` answer 408 once, then 200; ``/broken/K`` always answer 500;
* ``/hang`` sends its headers and then nothing for ``hang_s``; ``/slow`` takes 3 s;
* ``/bad-links`` links to ``http://[x`` (not a URL) among good links; ``/bad-redirect``
  redirects to it; a link goes to a host name longer than DNS allows;
* ``extra_links``: absolute links to other hosts (a refused port, a name that does not
  resolve, ...), added by the test.

Every request is logged with its time, per path (``tests/hostile.py``, which this builds on).
"""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler

from tests.hostile import HostileSite, page

HTML = {"Content-Type": "text/html; charset=utf-8"}


class MessySite(HostileSite):
    FLAKY, LIMITED, TIMED_OUT, BROKEN = 3, 3, 2, 2

    def __init__(self, pages: int = 120, hang_s: float = 60.0) -> None:
        super().__init__(hang_s=hang_s)
        self.pages = pages
        self.with_trouble = True

    def trouble(self) -> list[str]:
        if not self.with_trouble:
            return []
        return (
            [f"/flaky/{k}" for k in range(self.FLAKY)]
            + [f"/limited/{k}" for k in range(self.LIMITED)]
            + [f"/timed-out/{k}" for k in range(self.TIMED_OUT)]
            + [f"/broken/{k}" for k in range(self.BROKEN)]
            + ["/hang", "/slow", "/bad-links", "/bad-redirect"]
        )

    def expected_done(self) -> set[str]:
        ordinary = ["/", *(f"/p/{i}" for i in range(self.pages)), "/from-bad-links"]
        fine = [f"/flaky/{k}" for k in range(self.FLAKY)]
        fine += [f"/limited/{k}" for k in range(self.LIMITED)]
        fine += [f"/timed-out/{k}" for k in range(self.TIMED_OUT)]
        return {self.url(p) for p in [*ordinary, *fine, "/slow", "/bad-links"]}

    def respond(self, path: str, count: int) -> tuple[int, dict[str, str], bytes]:
        if path == "/":
            links = [f"/p/{i}" for i in range(0, self.pages, 10)]
            return 200, HTML, page("Home", [*links, *self.trouble(), *self.extra_links])
        if path == "/robots.txt":
            return 404, HTML, b""
        if path.startswith("/p/") and path[3:].isdigit() and int(path[3:]) < self.pages:
            i = int(path[3:])
            nxt = [f"/p/{j}" for j in range(i + 1, min(i + 10, self.pages))]
            return 200, HTML, page(f"Page {i}", [*nxt, "/"])
        if path.startswith("/flaky/"):
            return (503, HTML, page("Busy")) if count <= 2 else (200, HTML, page("Flaky"))
        if path.startswith("/limited/"):
            if count == 1:
                return 429, {**HTML, "Retry-After": "2"}, page("Slow down")
            return 200, HTML, page("Limited")
        if path.startswith("/timed-out/"):
            return (408, HTML, page("Timed out")) if count == 1 else (200, HTML, page("Late"))
        if path.startswith("/broken/"):
            return 500, HTML, page("Broken")
        if path == "/slow":
            time.sleep(3)
            return 200, HTML, page("Slow")
        if path == "/bad-links":
            long_host = "http://" + "a" * 250 + ".example.test/"
            return 200, HTML, page("Bad links", ["http://[x", long_host, "/from-bad-links"])
        if path == "/from-bad-links":
            return 200, HTML, page("After bad links")
        if path == "/bad-redirect":
            return 302, {"Location": "http://[x"}, b""
        return 404, HTML, page("Not found")

    def hang(self, handler: BaseHTTPRequestHandler) -> None:
        """Headers, then silence: a read timeout, not a deadline."""
        handler.send_response(200)
        handler.send_header("Content-Type", "text/html")
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        handler.wfile.flush()
        time.sleep(self.hang_s)
        handler.close_connection = True
