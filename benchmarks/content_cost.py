"""What keeping content costs per page, on real pages, in one process (no services):

    apt-get install python3.11-doc
    .venv/bin/python benchmarks/content_cost.py [--docs /usr/share/doc/python3.11/html]

For every HTML page of the Python 3.11 docs: the hot path's parse (links, title, robots
directives; lexbor), extraction rules (``title=h1``, ``links=a[]@href``, on the tree that
parse built, as the hot path runs them), and the body store's work on a
page (SHA-256 of the raw bytes, zstd at the default level, appended to a pack in a temporary
directory; a job per round, so that every round stores every page). Printed: CPU ms per page
of each step (best of ``--rounds``), and bytes per stored page: raw, compressed, the ratio.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")

import django  # noqa: E402


def best_ms(step, pages: list[bytes], rounds: int) -> float:
    """Lowest CPU ms per page over ``rounds`` passes of ``step`` over every page."""
    times = []
    for _ in range(rounds):
        started = time.process_time()
        for body in pages:
            step(body)
        times.append(1000 * (time.process_time() - started) / len(pages))
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=Path("/usr/share/doc/python3.11/html"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not (args.docs / "index.html").exists():
        sys.exit(f"{args.docs} not found: apt-get install python3.11-doc")
    store = tempfile.mkdtemp(prefix="bodies-")
    os.environ["BODY_STORE"] = store
    django.setup()
    from tasks.content import bodies, extraction, parsing
    from tasks.rules import selectors

    pages = [p.read_bytes() for p in sorted(args.docs.rglob("*.html"))]
    header = "text/html; charset=utf-8"
    url = "http://docs.local/3/library/index.html"
    rules = selectors.rules_of(
        [selectors.parse_rule("title=h1"), selectors.parse_rule("links=a[]@href")]
    )
    parsed = {id(b): parsing.parse_html(b, header, url) for b in pages}

    parse = best_ms(lambda b: parsing.parse_html(b, header, url, "crawlplatform"), pages,
                    args.rounds)  # fmt: skip
    extract = best_ms(
        lambda b: extraction.extract(rules, parsed[id(b)].text, parsed[id(b)].tree), pages,
        args.rounds,
    )  # fmt: skip
    calls = itertools.count()
    store_ms = best_ms(lambda b: bodies.put(10**6 + next(calls) // len(pages), b), pages,
                       args.rounds)  # fmt: skip

    raw = sum(len(b) for b in pages)
    stored = sum(f.stat().st_size for f in Path(store).rglob("*") if f.is_file())
    copies = args.rounds * len(pages)
    print(f"{len(pages)} pages, {raw / len(pages) / 1024:.1f} KiB each on average")
    print(f"parse (lexbor: links, title, directives) {parse:6.2f} CPU ms/page")
    print(f"extraction rules (2, on the parse's tree)  {extract:6.2f} CPU ms/page")
    print(f"body store (sha256, zstd-1, write)      {store_ms:6.2f} CPU ms/page")
    print(f"stored: {stored / copies:,.0f} bytes/page compressed of {raw / len(pages):,.0f} "
          f"raw (ratio {raw * args.rounds / stored:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
