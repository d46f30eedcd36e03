"""A broad site for benchmarks: HOSTS web hosts, each on its own loopback address
(127.1.x.y), one asyncio server listening on all of them: a socket per address, or, when that
many would not fit in the process's file descriptors, one socket on every address of the
machine (``0.0.0.0``) answering only connections that reached one of the hosts' addresses.

    python benchmarks/broadsite.py PORT --hosts 1000 [--pages 5] [--size 4000]

Every host serves ``/robots.txt`` (``Disallow: /private/``), a home page ``/`` and pages
``/p/1`` .. ``/p/{pages-1}``; each page links to every page of its host and to a
``/private/`` page that robots.txt forbids. ``/__stats__`` (on any host) returns and resets
``count first last`` over page requests (robots.txt and forbidden pages apart, which it
counts as ``robots=N private=N`` on a second line). The first line printed names the port;
``--list FILE`` writes the hosts' home URLs, one per line; ``--log FILE`` appends a line
``TIME ADDRESS PATH`` for every request as it arrives (politeness and robots.txt checks).
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from gensite import Stats, respond, serve

_CONNECTIONS = 4096  # descriptors kept for the crawlers' connections


def addresses(hosts: int) -> list[str]:
    """Distinct loopback addresses, none of them 127.0.0.1 (62,500 per second octet)."""
    return [f"127.{1 + i // 62_500}.{i // 250 % 250}.{i % 250 + 1}" for i in range(hosts)]


def _is_host(address: str, hosts: int) -> bool:
    """Is ``address`` one of the first ``hosts`` of :func:`addresses`?"""
    parts = address.split(".")
    if len(parts) != 4 or parts[0] != "127" or not all(p.isdigit() for p in parts):
        return False
    second, third, fourth = (int(p) for p in parts[1:])
    index = (second - 1) * 62_500 + third * 250 + fourth - 1
    return 1 <= fourth <= 250 and third < 250 and 0 <= index < hosts


def page(host: str, path: str, pages: int, size: int) -> bytes:
    links = "".join(f'<li><a href="/p/{j}">Page {j}</a></li>' for j in range(1, pages))
    head = (
        f"<!doctype html><html><head><meta charset=utf-8><title>{host}{path}</title></head>"
        f'<body><nav><a href="/">Home</a><ul>{links}</ul><a href="/private/x">Account</a>'
        f"</nav><h1>{path}</h1>"
    )
    filler = "<p>" + ("lorem ipsum dolor sit amet " * 20) + "</p>"
    return (head + filler * max(0, (size - len(head)) // len(filler)) + "</body></html>").encode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--pages", type=int, default=5)
    parser.add_argument("--size", type=int, default=4000)
    parser.add_argument("--list", type=Path)
    parser.add_argument("--log", type=Path)
    parser.add_argument("--idle", type=float, default=None, help="keep-alive timeout, s")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a listening socket per host
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    one_socket = args.hosts + _CONNECTIONS > hard
    log = args.log.open("a", buffering=1) if args.log else None
    stats, extra = Stats(), {"robots": 0, "private": 0}
    names = addresses(args.hosts)
    if args.list:
        args.list.write_text("".join(f"http://{h}:{args.port}/\n" for h in names))
    pages = {"/", *(f"/p/{j}" for j in range(1, args.pages))}

    async def answer(path: str, host: str) -> bytes:
        if one_socket and not _is_host(host, args.hosts):
            return respond("403 Forbidden", "text/plain", b"not a host of this site")
        if log:
            log.write(f"{time.time():.6f} {host} {path}\n")
        if path == "/__stats__":
            counted = f"robots={extra['robots']} private={extra['private']}"
            line = stats.reset() + "\n" + counted
            extra.update(robots=0, private=0)
            return respond("200 OK", "text/plain", line.encode())
        if path == "/robots.txt":
            extra["robots"] += 1
            return respond("200 OK", "text/plain", b"User-agent: *\nDisallow: /private/\n")
        if path.startswith("/private/"):
            extra["private"] += 1
            return respond("403 Forbidden", "text/plain", b"robots.txt said no")
        if path in pages:
            stats.hit()
            return respond(
                "200 OK", "text/html; charset=utf-8", page(host, path, args.pages, args.size)
            )
        return respond("404 Not Found", "text/plain", b"not found")

    banner = f"serving {args.hosts} hosts x {args.pages} pages on port {args.port}"
    # one socket on every address answers only the hosts' loopback ones (``answer``)
    listen = ["0.0.0.0"] if one_socket else names  # noqa: S104
    serve(answer, listen, args.port, banner, args.idle)


if __name__ == "__main__":
    main()
