"""What ``LinkExtractor.extract_links`` costs per page, ours against Scrapy 2.19's, on
generated link-heavy pages (no services, one process):

    .venv/bin/python benchmarks/link_extractor.py [--links 300] [--pages 200] [--rounds 5]

Each page is a shop listing of ``--links`` links of every common shape (relative, absolute,
other hosts, fragments, ``mailto:``, images, queries with non-ASCII text, nofollow, repeats).
Two sets of pages: *site*, pages of one site whose navigation and many items repeat from page
to page, as a crawl meets them; *fresh*, pages whose every link is new to the process (what
the caches cannot help with). The responses are built and parsed before the clock starts, as
a CrawlSpider's rules get them; the extractors use their defaults (``a`` and ``area``,
``href``, unique, ``IGNORED_EXTENSIONS``). Printed: µs of CPU per page for each, best of
``--rounds`` passes, and the ratio; the links found are checked to be the same.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scrapy.http import HtmlResponse as ScrapyHtmlResponse  # noqa: E402
from scrapy.linkextractors import LinkExtractor as ScrapyLinkExtractor  # noqa: E402

from crawlplatform.spiders import HtmlResponse, LinkExtractor  # noqa: E402

SHAPES = [
    "/category/{c}/",
    "http://shop.test/item/{i}.html",
    "item/{i}?ref=nav&amp;p={k}",
    "#section-{i}",
    "https://other{k}.test/p/{i}",
    "/static/img{i}.jpg",
    " ../up/{i}/ ",
    "mailto:info@shop.test",
    "/search?q=caf\u00e9+{i}",
    "/item/{i}.html",
]


def page(number: int, links: int, fresh: bool) -> bytes:
    """One listing page: ``fresh`` pages share no link with any other page."""
    parts = ['<!DOCTYPE html><html><head><meta charset="utf-8"><title>Shop</title></head>'
             "<body><nav>"]  # fmt: skip
    for n in range(links):
        item = number * links + n if fresh else (number * 7 + n) % 400
        href = SHAPES[n % len(SHAPES)].format(c=n % 17, i=item, k=n % 5)
        rel = ' rel="nofollow"' if n % 13 == 0 else ""
        parts.append(f'<div class="c"><a href="{href}"{rel} class="l">Link <b>{n}</b></a>'
                     f"<span>{n}</span></div>")  # fmt: skip
    parts.append("</nav></body></html>")
    return "".join(parts).encode()


def best_us(extractor, make, pages: int, rounds: int) -> float:
    """Lowest CPU µs per page over ``rounds`` passes, each over the ``pages`` responses
    ``make(round)`` builds (their trees parsed before the clock starts)."""
    best = float("inf")
    for round_ in range(rounds):
        responses = make(round_)
        for response in responses:
            response.selector  # noqa: B018 (parsed before the clock starts)
        start = time.process_time()
        for response in responses:
            extractor.extract_links(response)
        best = min(best, (time.process_time() - start) / pages * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--links", type=int, default=300)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    url = "http://shop.test/list/{}.html"
    for fresh in (False, True):

        def make(cls, round_: int, fresh: bool = fresh) -> list:
            first = (round_ + 1) * args.pages if fresh else 0  # fresh: new links each round
            return [cls(url.format(n), body=page(first + n, args.links, fresh))
                    for n in range(args.pages)]  # fmt: skip

        ours, scrapys = LinkExtractor(), ScrapyLinkExtractor()
        for a, b in zip(make(HtmlResponse, -1), make(ScrapyHtmlResponse, -1), strict=True):
            found = [(x.url, x.text, x.nofollow) for x in ours.extract_links(a)]
            assert found == [(x.url, x.text, x.nofollow) for x in scrapys.extract_links(b)]
        scrapy_us = best_us(scrapys, lambda r: make(ScrapyHtmlResponse, r), args.pages, args.rounds)
        ours_us = best_us(ours, lambda r: make(HtmlResponse, r), args.pages, args.rounds)
        print(
            f"{'fresh' if fresh else 'site'}: {args.links} links a page, Scrapy "
            f"{scrapy_us:.0f} µs, ours {ours_us:.0f} µs a page ({ours_us / scrapy_us:.2f})"
        )


if __name__ == "__main__":
    main()
