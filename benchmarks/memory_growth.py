"""Memory over a long crawl: worker RSS at page 5,000 and at page 50,000, and bytes per URL.

    .venv/bin/python benchmarks/memory_growth.py [--pages 50000] [--early 5000]

Crawls ``--pages`` pages of a generated site (``benchmarks/gensite.py``: every page links to
the navigation, ten children and four pages elsewhere) with ``manage.py crawl`` on
PostgreSQL (fresh database ``crawlbench_memory``) and Redis db 14, one threads-pool worker per
core. Every second it reads the pages stored and each worker's RSS; it prints the RSS of every
worker when the crawl passes ``--early`` pages and at the end, and the growth between them
(target: at most 10%). Then the storage per URL: PostgreSQL bytes per frontier URL and per
page (tables and indexes), and Redis's memory during and after the crawl.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

import psutil
import psycopg
import redis
from common import POSTGRES, ROOT, free_port, fresh_database, is_worker, migrate


def worker_rss(root: psutil.Process) -> dict[int, int]:
    out = {}
    for p in root.children(recursive=True):
        try:
            if is_worker(p) and p.status() != psutil.STATUS_ZOMBIE:  # an exited one reads 0
                out[p.pid] = p.memory_info().rss
        except psutil.Error:
            continue
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=50_000)
    parser.add_argument("--early", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    args = parser.parse_args()

    port = free_port()
    site = subprocess.Popen(
        [sys.executable, "benchmarks/gensite.py", str(port), "--pages", str(args.pages * 2)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    print(site.stdout.readline().strip(), flush=True)
    database_url = fresh_database(POSTGRES, "crawlbench_memory")
    broker = redis.Redis.from_url(args.redis)
    broker.flushdb()
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": args.redis,
           "LOG_LEVEL": "WARNING"}  # fmt: skip
    migrate(env)
    crawl = subprocess.Popen(
        [sys.executable, "manage.py", "crawl", f"http://127.0.0.1:{port}/p/0", "--max-depth",
         "100", "--max-pages", str(args.pages), "--concurrency", str(args.concurrency)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    root = psutil.Process(crawl.pid)
    early: dict[int, int] = {}
    last: dict[int, int] = {}
    redis_peak = 0
    started = time.monotonic()
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            while crawl.poll() is None:
                time.sleep(1)
                try:
                    pages = conn.execute("SELECT count(*) FROM web_page").fetchone()[0]
                except psycopg.Error:
                    continue  # tables not there yet
                rss = worker_rss(root)
                redis_peak = max(redis_peak, broker.info("memory")["used_memory"])
                last.update(rss)  # a worker that exits first keeps its last reading
                if not early and pages >= args.early and rss:
                    early = rss
                    print(f"page {pages:,}: worker RSS MB "
                          f"{[round(v / 2**20, 1) for v in rss.values()]}", flush=True)  # fmt: skip
                if int(time.monotonic() - started) % 30 == 0:
                    print(f"  {pages:,} pages, worker RSS MB "
                          f"{[round(v / 2**20, 1) for v in rss.values()]}", flush=True)  # fmt: skip
            out = crawl.stdout.read()
            sizes = conn.execute(
                "SELECT pg_total_relation_size('web_frontierurl'),"
                " pg_total_relation_size('web_page'),"
                " (SELECT count(*) FROM web_frontierurl), (SELECT count(*) FROM web_page)"
            ).fetchone()
    finally:
        if crawl.poll() is None:
            crawl.terminate()
        site.terminate()
    done = int(re.search(r"finished: (\d+) pages", out).group(1))
    print(f"\ncrawl finished: {done:,} pages in {time.monotonic() - started:.0f} s")
    print(f"{'worker':<10}{f'RSS MB @ {args.early:,}':>18}{'RSS MB @ end':>15}{'growth':>9}")
    growths = []
    for pid, before in early.items():
        after = last.get(pid)
        if after is None:
            print(f"{pid:<10}{before / 2**20:>18.1f}{'(restarted)':>15}")
            continue
        growths.append(after / before - 1)
        print(f"{pid:<10}{before / 2**20:>18.1f}{after / 2**20:>15.1f}{100 * growths[-1]:>8.1f}%")
    frontier_bytes, page_bytes, urls, stored = sizes
    print(f"\nfrontier: {urls:,} URLs, {frontier_bytes / urls:.0f} bytes/URL (table + indexes)")
    print(f"pages:    {stored:,} rows, {page_bytes / stored:.0f} bytes/page (table + indexes)")
    print(f"Redis:    peak used_memory {redis_peak / 2**20:.1f} MB during the crawl, "
          f"{broker.info('memory')['used_memory'] / 2**20:.1f} MB after")  # fmt: skip
    worst = max(growths) if growths else float("nan")
    verdict = "met" if growths and worst <= 0.10 else "NOT met"
    print(
        f"\nworst worker RSS growth page {args.early:,} -> {done:,}: {100 * worst:.1f}% "
        f"(target <= 10%: {verdict})"
    )


if __name__ == "__main__":
    main()
