"""A static file server for benchmarks: every file held in memory, HTTP/1.1 keep-alive,
threaded; it logs the time of its first and last request, so both crawlers are timed by the
same clock at the server.

    python benchmarks/docserver.py DIRECTORY PORT [LINK ...]

``LINK``: absolute links every HTML page also carries at the end of its body, as a footer
would (a docs site's links to a development server that is not running, say).
"""

from __future__ import annotations

import mimetypes
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


def load(root: Path, links: list[str]) -> dict[str, tuple[bytes, str]]:
    footer = "".join(f'<a href="{href}">{href}</a> ' for href in links).encode()
    files = {}
    for path in root.rglob("*"):
        if path.is_file():
            rel = "/" + path.relative_to(root).as_posix()
            kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            body = path.read_bytes()
            if kind == "text/html":
                kind += "; charset=utf-8"
                if footer:
                    body = body.replace(b"</body>", footer + b"</body>", 1)
            files[rel] = (body, kind)
            if rel.endswith("/index.html"):
                files[rel[: -len("index.html")]] = files[rel]
    return files


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first = self.last = 0.0
        self.count = 0

    def hit(self) -> None:
        now = time.time()
        with self.lock:
            self.first = self.first or now
            self.last = now
            self.count += 1

    def reset(self) -> str:
        with self.lock:
            line = f"{self.count} {self.first:.6f} {self.last:.6f}"
            self.first = self.last = 0.0
            self.count = 0
        return line


def main() -> None:
    root, port = Path(sys.argv[1]), int(sys.argv[2])
    files = load(root, sys.argv[3:])
    stats = Stats()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # as production servers do

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            path = unquote(urlsplit(self.path).path)
            if path == "/__stats__":  # read and reset the counters between two crawls
                body, kind = stats.reset().encode(), "text/plain"
                status = 200
            else:
                stats.hit()
                found = files.get(path)
                status, (body, kind) = (
                    (200, found) if found else (404, (b"not found", "text/plain"))
                )
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(f"serving {len(files)} files on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
