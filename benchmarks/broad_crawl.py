"""A broad crawl, Scrapy and the platform in the same run with the same politeness: many
hosts on distinct loopback addresses, a few pages each, robots.txt per host, a per-host delay.

    .venv/bin/python benchmarks/broad_crawl.py [--hosts 1000] [--pages 5] [--delay 0.2]
                                               [--concurrency 32] [--private]

Both crawlers start from every host's home page, obey robots.txt (each host forbids
``/private/``, which every page links to), keep ``--delay`` seconds between two requests to
one host and one request in flight per host. Throughput is pages served (robots.txt and
forbidden pages apart) over the server's first-to-last page request; CPU per request counts
every request the crawler made (pages and robots.txt), over the crawler's process tree plus,
for the platform, PostgreSQL and Redis.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import redis
from common import ROOT, free_port, fresh_database, machine_speed, migrate, private_servers
from crawl_vs_scrapy import Result, measure, servers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--pages", type=int, default=5)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--database", default="crawlbench", help="created afresh each run")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--skip-scrapy", action="store_true")
    parser.add_argument(
        "--private",
        action="store_true",
        help="a PostgreSQL and a Redis of the run's own, not --postgres and --redis",
    )
    args = parser.parse_args()
    with private_servers() if args.private else contextlib.nullcontext() as found:
        if found:
            args.postgres, args.redis = found
        run(args)


def run(args: argparse.Namespace) -> None:
    """Scrapy, then the platform, on the generated hosts; the table and the ratios."""
    print(machine_speed(), flush=True)

    port = free_port()
    seeds = Path(tempfile.mkstemp(prefix="broad-seeds-", suffix=".txt")[1])
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks/broadsite.py"), str(port), "--hosts",
         str(args.hosts), "--pages", str(args.pages), "--list", str(seeds)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    print(server.stdout.readline().strip(), flush=True)
    stats_url = f"http://127.1.0.1:{port}/__stats__"
    urls = seeds.read_text().split()
    results: list[Result] = []
    store = tempfile.mkdtemp(prefix="bench-bodies-")
    try:
        if not args.skip_scrapy:
            results.append(measure(
                "scrapy",
                [sys.executable, "benchmarks/scrapy_spider.py", f"@{seeds}",
                 str(args.concurrency), "--delay", str(args.delay), "--robots", "--per-host", "1"],
                dict(os.environ), stats_url, {}, None,
            ))  # fmt: skip
        database_url = fresh_database(args.postgres, args.database)
        redis.Redis.from_url(args.redis).flushdb()
        env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": args.redis,
               "LOG_LEVEL": "WARNING", "BODY_STORE": store}  # fmt: skip
        migrate(env)
        results.append(measure(
            "crawlplatform",
            [sys.executable, "manage.py", "crawl", *urls, "--max-depth", "10",
             "--concurrency", str(args.concurrency), "--workers", str(args.workers),
             "--delay", str(args.delay), "--host-concurrency", "1",
             "--allow-network", "127.0.0.0/8"],
            env, stats_url, servers(args.postgres, args.redis), None,
        ))  # fmt: skip
    finally:
        server.terminate()
        seeds.unlink()
        shutil.rmtree(store, ignore_errors=True)  # the crawl's bodies: a file each

    requests = args.hosts * (args.pages + 1)  # pages and robots.txt
    print(
        f"\n{args.hosts} hosts x {args.pages} pages, robots.txt each, {args.delay} s per host, "
        f"concurrency {args.concurrency}; {os.cpu_count()} cores"
    )
    print(f"{'crawler':<14}{'pages':>7}{'wall s':>9}{'cmd s':>8}{'pages/s':>9}{'CPU ms/req':>12}")
    for r in results:
        print(
            f"{r.name:<14}{r.pages:>7}{r.server_wall:>9.2f}{r.command_wall:>8.2f}"
            f"{r.rate:>9.1f}{1000 * r.cpu / requests:>12.2f}"
        )
    if len(results) == 2:
        scrapy, ours = results
        print(
            f"throughput ratio (crawlplatform / scrapy): {ours.rate / scrapy.rate:.2f}x, "
            f"CPU per request ratio {ours.cpu / scrapy.cpu:.2f}"
        )


if __name__ == "__main__":
    main()
