"""A generated site of N pages for benchmarks, served by asyncio (cheap per request, so that
hundreds of slow responses can be in flight at once without a thread each).

    python benchmarks/gensite.py PORT --pages N [--latency SECONDS] [--size BYTES] [--links N]

Page ``/p/i`` links to the navigation (``/p/0`` .. ``/p/9``), to its ten children
``/p/10i+1`` .. ``/p/10i+10`` (so every page is reachable from ``/p/0`` within log10(N)
steps) and to a few pages elsewhere on the site, most of them already seen: like a real site,
links outnumber pages many times over; ``--links`` raises the page's link count to about N
with more such cross links (a link-heavy page). Text pads each page to about ``--size`` bytes. Every
response waits ``--latency`` seconds first (a slow server, not a slow network). ``/__stats__``
returns and resets ``count first last`` (epoch seconds of the first and last page request).
"""

from __future__ import annotations

import argparse
import asyncio
import time


class Stats:
    def __init__(self) -> None:
        self.first = self.last = 0.0
        self.count = 0

    def hit(self) -> None:
        now = time.time()
        self.first = self.first or now
        self.last = now
        self.count += 1

    def reset(self) -> str:
        line = f"{self.count} {self.first:.6f} {self.last:.6f}"
        self.first = self.last = 0.0
        self.count = 0
        return line


def page(i: int, pages: int, size: int, links: int = 0) -> bytes:
    nav = "".join(f'<li><a href="/p/{j}">Section {j}</a></li>' for j in range(10))
    kids = range(10 * i + 1, min(10 * i + 11, pages))
    children = "".join(f'<li><a href="/p/{c}">Page {c}</a></li>' for c in kids)
    steps = (3, 31, 97, 331, *range(1000, 1000 + max(0, links - 24)))
    elsewhere = "".join(f'<a href="/p/{(i * k + 7) % pages}#s{k}">see also {k}</a> ' for k in steps)
    head = (
        f"<!doctype html><html><head><meta charset=utf-8><title>Page {i}</title></head><body>"
        f"<nav><ul>{nav}</ul></nav><h1>Page {i}</h1><ul>{children}</ul><p>{elsewhere}</p>"
    )
    filler = "<p>" + ("lorem ipsum dolor sit amet " * 40) + "</p>"
    body = head + filler * max(0, (size - len(head)) // len(filler)) + "</body></html>"
    return body.encode()


def respond(status: str, kind: str, body: bytes) -> bytes:
    """A whole HTTP/1.1 response."""
    head = f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def handler(answer, idle: float | None = None):
    """An asyncio connection handler serving keep-alive requests with ``answer(path, host)``
    (a coroutine returning the whole response; ``host`` is the address the client reached).
    ``idle``: seconds a kept-alive connection may wait for its next request before the server
    closes it (as web servers do; None: never)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host = writer.get_extra_info("sockname")[0]
        try:
            while True:
                request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), idle)
                writer.write(await answer(request.split(b" ", 2)[1].decode(), host))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, IndexError, TimeoutError):
            pass
        finally:
            writer.close()

    return handle


def serve(answer, names, port: int, banner: str, idle: float | None = None) -> None:
    """Serve ``answer`` (see :func:`handler`) on ``names`` (one address or several) until
    killed; ``banner`` is printed once listening (callers wait for that line)."""

    async def forever() -> None:
        server = await asyncio.start_server(handler(answer, idle), names, port, backlog=1024)
        print(banner, flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(forever())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--size", type=int, default=8_000)
    parser.add_argument("--links", type=int, default=0, help="links per page, about (24 at least)")
    args = parser.parse_args()
    stats = Stats()
    cache: dict[int, bytes] = {}

    async def answer(path: str, host: str) -> bytes:
        if path == "/__stats__":
            return respond("200 OK", "text/plain", stats.reset().encode())
        if path == "/robots.txt":
            return respond("200 OK", "text/plain", b"User-agent: *\nAllow: /\n")
        stats.hit()
        if args.latency:
            await asyncio.sleep(args.latency)
        number = path[3:] if path.startswith("/p/") else ""
        if not (number.isdigit() and int(number) < args.pages):
            return respond("404 Not Found", "text/plain", b"not found")
        i = int(number)
        body = cache.get(i) or cache.setdefault(i, page(i, args.pages, args.size, args.links))
        if len(cache) > 1000:
            cache.clear()
        return respond("200 OK", "text/html; charset=utf-8", body)

    serve(answer, "127.0.0.1", args.port, f"serving {args.pages} pages on 127.0.0.1:{args.port}")


if __name__ == "__main__":
    main()
