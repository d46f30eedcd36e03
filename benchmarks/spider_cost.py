"""What a spider's callback costs per page against a crawl's parse and its CSS extraction
rules, on real pages, in one process (no services):

    apt-get install python3.11-doc
    .venv/bin/python benchmarks/spider_cost.py [--docs /usr/share/doc/python3.11/html]
    .venv/bin/python benchmarks/spider_cost.py --light 1000   # gensite.py's light pages instead

For every HTML page of the Python 3.11 docs (or of ``--light`` pages of ``gensite.py``'s light
site, about 10 KB and 24 links each, as ``spider_vs_scrapy.py`` crawls), the content step of a
page (the fetch, the politeness and the commit are the same for the three and left out):

- plain: the hot path's parse (links, title, robots directives) and the links scoped and
  canonicalized (``new_links``), as a crawl without rules does;
- rules: the same, plus the extraction rule ``title=h1`` (``extraction.extract``);
- spider: what a spider job does instead: the ``Response``, a callback that yields one item
  (``{"url", "title": response.css("h1::text").get()}``) and follows every link
  (``response.follow_all(css="a")``) run through ``callbacks.call``; the item through the
  pipelines (none but the JSON check); the requests made frontier rows as the engine makes
  them (``callbacks.new_requests``: the scope, ``request_scheduled``, what this process saw
  committed, ``record``, the fingerprint key); the page's signals sent (none heard) and its
  stats kept (none changed) as a worker does. Both kinds of pages remember what they add, as
  a page's commit does.

Printed: CPU ms per page of each (best of ``--rounds``), and the ratios the spider API is held
to (a spider within 10% of rules, rules within 15% of plain).

Counted in instructions, which the machine's load does not move: one step (``--only``) on
``--pages`` pages spread over the site, under callgrind with three rounds and with one; the
difference over two rounds of those pages is a page's count, start-up left out and every
link one the process has seen committed, as in a crawl::

    PYTHONHASHSEED=0 valgrind --tool=callgrind .venv/bin/python benchmarks/spider_cost.py \
        --only spider --pages 60 --rounds 3        # and --rounds 1; then callgrind_annotate
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")

import django  # noqa: E402


def best_ms(step, pages: list[tuple[str, bytes]], rounds: int) -> float:
    """Lowest CPU ms per page over ``rounds`` passes of ``step`` over every page."""
    times = []
    for _ in range(rounds):
        started = time.process_time()
        for url, body in pages:
            step(url, body)
        times.append(1000 * (time.process_time() - started) / len(pages))
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=Path("/usr/share/doc/python3.11/html"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["plain", "rules", "spider"], help="this step only")
    parser.add_argument("--pages", type=int, help="this many pages, spread over the site")
    parser.add_argument("--light", type=int, metavar="N", help="N pages of gensite.py's light site")
    args = parser.parse_args()
    if not args.light and not (args.docs / "index.html").exists():
        sys.exit(f"{args.docs} not found: apt-get install python3.11-doc")
    django.setup()
    from crawlplatform.spiders import Spider
    from tasks.content import callbacks, extraction, items, parsing, rows, stats
    from tasks.content.links import JobCache, new_links
    from tasks.fetch import fetching
    from tasks.frontier.claims import Claim
    from tasks.rules import selectors
    from tasks.rules.urls import Scope
    from web.models import CrawlJob, FrontierURL

    if args.light:
        from gensite import page

        base, site = "http://site.local/p/0", "gensite.py's light site"
        pages = [(f"http://site.local/p/{i}", page(i, args.light, 10_000, 20))
                 for i in range(args.light)]  # fmt: skip
    else:
        base, site = "http://docs.local/3/", "the Python 3.11 docs"
        files = sorted(args.docs.rglob("*.html"))
        pages = [(base + p.relative_to(args.docs).as_posix(), p.read_bytes()) for p in files]
    if args.pages:
        pages = pages[:: max(1, len(pages) // args.pages)][: args.pages]
    header = "text/html; charset=utf-8"
    job = CrawlJob(pk=1, seeds=[base], max_depth=100, spider="docs")
    rules = selectors.rules_of([selectors.parse_rule("title=h1")])

    def cache() -> JobCache:  # a fresh one per pass: the cache's hits are the same for all
        return JobCache(Scope.for_job(job), 100_000)

    class Docs(Spider):
        name = "docs"

        def parse(self, response):
            yield {"url": response.url, "title": response.css("h1::text").get()}
            yield from response.follow_all(css="a", callback=self.parse)

    spider = Docs()
    pipes = items.Pipelines(spider)
    state = {"cache": cache()}

    def links(url: str, body: bytes) -> parsing.Parsed:
        parsed = parsing.parse_html(body, header, url, "crawlplatform")
        for link in new_links(state["cache"], parsed.base, parsed.hrefs):
            state["cache"].committed.put(link)  # as the page's commit does
        return parsed

    def plain(url: str, body: bytes) -> None:
        links(url, body)

    def with_rules(url: str, body: bytes) -> None:
        parsed = links(url, body)
        extraction.extract(rules, parsed.text, parsed.tree)  # the parse's own tree, as a crawl's

    def with_spider(url: str, body: bytes) -> None:
        resp = fetching.Response(url=url, final_url=url, status=200, content_type="text/html",
                                 content_type_header=header, body=body, truncated=False,
                                 elapsed=0.0, headers={"Content-Type": header})  # fmt: skip
        request = rows.request_of(url, None)
        response = callbacks.response_of(resp, request)
        with stats.bound(stats.Pending(job.pk)):  # as a worker's page: its stats, its signals
            pipes.received(response)
            found = callbacks.call(spider, "parse", response, {}, job)
            claimed = Claim(url=FrontierURL(pk=1, url=url, depth=0), job=job, attempt=1)
            made = callbacks.new_requests(claimed, state["cache"], spider, found.requests,
                                          pipes.scheduled)  # fmt: skip
            for item in found.items:
                pipes.process(item, response)
        for new in made:
            state["cache"].committed.put(new.key)  # as the page's commit does

    steps = {"plain": plain, "rules": with_rules, "spider": with_spider}
    results = {}
    for name in [args.only] if args.only else steps:
        state["cache"] = cache()
        results[name] = best_ms(steps[name], pages, args.rounds)
    print(f"{len(pages)} pages of {site}, CPU ms per page (best of {args.rounds})")
    labels = {"plain": "plain  (parse, links)", "rules": "rules  (parse, links, title=h1)",
              "spider": "spider (callback: 1 item, follow_all)"}  # fmt: skip
    for name, ms in results.items():
        print(f"{labels[name]:38s} {ms:6.3f}")
    if len(results) == len(steps):
        print(f"spider / rules {results['spider'] / results['rules']:.2f}; "
              f"rules / plain {results['rules'] / results['plain']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
