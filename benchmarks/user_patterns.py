"""What a user pattern costs per URL with each engine that bounds it, against Python's ``re``.

    .venv/bin/python benchmarks/user_patterns.py [--urls 20000]

Typical scope patterns (include/exclude, path caps) are searched in generated URLs with
``re`` (unbounded: the baseline), RE2 (``google-re2``, linear time: a plain search, and the
set of patterns the platform searches in one pass) and the ``regex`` module with a timeout.
Then ``(a+)+$`` against URLs of growing length shows what each engine does with a pattern
that backtracks exponentially. Prints microseconds (or seconds) per search.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
import time

import re2
import regex

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tasks.rules.patterns import Patterns  # noqa: E402

PATTERNS = [r"/docs/\d+/", r"\.(pdf|zip|tar\.gz)$", r"^https?://[^/]+/(en|de)/", r"[?&]page=\d+"]


def _per_search(search, urls: list[str]) -> float:
    started = time.perf_counter()
    for url in urls:
        search(url)
    return (time.perf_counter() - started) / len(urls) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--urls", type=int, default=20_000)
    urls = [f"https://site{i % 97}.example/en/docs/{i}/page.html?page={i % 13}"
            for i in range(ap.parse_args().urls)]  # fmt: skip
    options = re2.Options()
    options.log_errors = False
    print("pattern | re µs | re2 search µs | re2 set (the platform's) µs | regex (timeout) µs")
    for pattern in PATTERNS:
        plain, linear = re.compile(pattern), re2.compile(pattern, options)
        bounded = regex.compile(pattern)
        one = Patterns([pattern])
        timed = functools.partial(bounded.search, timeout=0.1)
        print(f"{pattern} | {_per_search(plain.search, urls):.2f} | "
              f"{_per_search(linear.search, urls):.2f} | {_per_search(one.any, urls):.2f} | "
              f"{_per_search(timed, urls):.2f}")  # fmt: skip
    every = Patterns(PATTERNS)
    print(f"all {len(PATTERNS)} in one set | | | {_per_search(every.any, urls):.2f} |")
    evil = "(a+)+$"
    print(f"\n{evil} against 'a' * n + 'b': seconds per search")
    print("n | re | re2 | regex (timeout 1 s)")
    for n in (16, 20, 22, 24, 26):
        text = "a" * n + "b"
        times = []
        for search in (re.compile(evil).search, re2.compile(evil, options).search):
            started = time.perf_counter()
            search(text)
            times.append(time.perf_counter() - started)
        started = time.perf_counter()
        try:
            regex.compile(evil).search(text, timeout=1.0)
        except TimeoutError:
            pass
        times.append(time.perf_counter() - started)
        print(f"{n} | " + " | ".join(f"{t:.6f}" for t in times))


if __name__ == "__main__":
    main()
