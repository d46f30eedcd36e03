"""The same spider under Scrapy 2.19 and on the platform, its imports changed as a user ports
it, so that a test compares the items of both.

A spider is written as Scrapy's docs write it (``import scrapy``, ``from scrapy.spiders import
CrawlSpider, Rule``, ...). ``port`` changes only its imports; ``under_scrapy`` runs the
original with ``scrapy runspider`` and ``on_platform`` the port with ``manage.py crawl
--spider`` and real workers, each in a process of its own, and each gives the items written
to its ``-O``/``--output`` file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from django.conf import settings

# Scrapy's import lines, as spiders write them, and the platform's equivalent.
_IMPORTS = [
    (re.compile(r"^(\s*)import scrapy\s*$", re.M), r"\1import crawlplatform.spiders as scrapy"),
    (re.compile(r"^(\s*)from scrapy(?:\.[\w.]+)? import ", re.M),
     r"\1from crawlplatform.spiders import "),
]  # fmt: skip


def port(source: str) -> str:
    """``source`` with its Scrapy imports made the platform's, nothing else changed."""
    for pattern, replacement in _IMPORTS:
        source = pattern.sub(replacement, source)
    left = re.search(r"(?m)^\s*(from|import) scrapy\b.*$", source)
    assert left is None, f"an import this port does not know: {left.group().strip()}"
    return source


class LoopbackOnly:
    """Scrapy's side of the address guard: a request to a host off the loopback is ignored
    before Scrapy resolves its name (no test queries a real resolver). Scrapy's cookie
    middleware asks tldextract whether a cookie's domain is a public suffix, which would fetch
    the list from the internet: it is given the copy tldextract ships instead."""

    def __init__(self) -> None:
        from scrapy.downloadermiddlewares import cookies
        from tldextract import TLDExtract

        cookies._split_domain = TLDExtract(suffix_list_urls=(), include_psl_private_domains=True)

    def process_request(self, request: Any) -> None:
        from scrapy.exceptions import IgnoreRequest

        if urlsplit(request.url).hostname not in ("127.0.0.1", "localhost", "::1"):
            raise IgnoreRequest(f"off the loopback: {request.url}")


class Run(NamedTuple):
    items: list[dict]
    process: subprocess.CompletedProcess


def _items(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _args(args: dict[str, Any]) -> list[str]:
    return [part for name, value in args.items() for part in ("-a", f"{name}={value}")]


def under_scrapy(source: str, tmp_path: Path, args: dict[str, Any] | None = None,
                 settings_: dict[str, Any] | None = None, timeout: float = 180,
                 output: bool = True) -> Run:  # fmt: skip
    """Run the spider in ``source`` with Scrapy 2.19 (``scrapy runspider -O items.jsonl``;
    without ``output``, no ``-O``, which would replace the spider's own ``FEEDS``)."""
    where = tmp_path / "scrapy"
    where.mkdir(exist_ok=True)
    (where / "twin_spider.py").write_text(source)
    out = where / "items.jsonl"
    options = {"LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": "False",
               "DOWNLOADER_MIDDLEWARES": json.dumps({"tests.twins.LoopbackOnly": 1}),
               **(settings_ or {})}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", "runspider", "twin_spider.py",
         *(["-O", str(out)] if output else []),
         *_args(args or {}), *[p for k, v in options.items() for p in ("-s", f"{k}={v}")]],
        cwd=where, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(settings.BASE_DIR)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return Run(_items(out), done)


def on_platform(source: str, name: str, env: dict[str, str], tmp_path: Path,
                args: dict[str, Any] | None = None, options: list[str] | None = None,
                timeout: float = 240, output: bool = True) -> Run:  # fmt: skip
    """Run spider ``name`` of ``source``, ported, with ``manage.py crawl --spider`` (its
    module installed by ``CRAWL_SPIDER_MODULES``, as an operator installs one; ``--output
    items.jsonl`` unless not ``output``, as it replaces the spider's ``FEEDS``, as ``-O``
    does)."""
    where = tmp_path / "platform"
    where.mkdir(exist_ok=True)
    (where / "twin_ported.py").write_text(port(source))
    out = where / "items.jsonl"
    done = subprocess.run(
        [sys.executable, "manage.py", "crawl", "--spider", name, *_args(args or {}),
         *(["--output", str(out)] if output else []), *(options or [])],
        cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=timeout,
        env={**env, "PYTHONPATH": f"{where}:{settings.BASE_DIR}",
             "CRAWL_SPIDER_MODULES": "twin_ported"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return Run(_items(out), done)


def same(items: list[dict]) -> list[str]:
    """Items in an order-free form, for comparing two runs exactly."""
    return sorted(json.dumps(item, sort_keys=True) for item in items)
