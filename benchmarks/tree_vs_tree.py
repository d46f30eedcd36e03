"""Throughput of two checkouts of the platform on the same generated site, same run: what a
change costs on the hot path (e.g. the anti-bot layer on a crawl with no bans).

    git worktree add /tmp/before <commit-before-the-change>
    .venv/bin/python benchmarks/tree_vs_tree.py /tmp/before . [--pages 1000] [--rounds 3] \
        [--size 150000 --links 300]

Each round crawls the site once with each tree (alternating which goes first), through
``manage.py crawl`` in full durable form: a fresh PostgreSQL database per crawl (each tree
migrates its own schema), Redis database 14, two worker processes, concurrency 16. Printed:
pages/s per crawl (first to last page request as the server saw them), CPU seconds per page
of the whole process tree plus PostgreSQL and Redis, then the median of each tree and the
ratio of the second to the first.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import redis
from common import POSTGRES, compile_tree, free_port, fresh_database, machine_speed, service_cpu
from crawl_vs_scrapy import children_cpu


def crawl(tree: Path, base: str, args) -> tuple[float, float, int]:
    """(pages/s, CPU ms per page, pages) of one crawl by the checkout at ``tree``."""
    database = fresh_database(POSTGRES, "crawlbench")
    redis.Redis.from_url(args.redis).flushdb()
    store = tempfile.mkdtemp(prefix="bench-bodies-")  # a fresh body store, as the database
    env = {**os.environ, "DATABASE_URL": database, "REDIS_URL": args.redis, "LOG_LEVEL": "WARNING",
           "PYTHONPATH": str(tree), "BODY_STORE": store}  # fmt: skip
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=tree, env=env, check=True)
    urllib.request.urlopen(f"{base}/__stats__").read()  # reset the server's counters
    services = ("postgres", "redis-server")
    cpu0, svc0 = children_cpu(), service_cpu(services)
    out = subprocess.run(
        [sys.executable, "manage.py", "crawl", f"{base}/p/0", "--max-depth", "100",
         "--concurrency", str(args.concurrency), "--workers", "2"],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        sys.exit(f"{tree}: crawl failed ({out.returncode}):\n{out.stderr[-3000:]}")
    cpu = children_cpu() - cpu0 + service_cpu(services) - svc0
    _, first, last = urllib.request.urlopen(f"{base}/__stats__").read().decode().split()
    pages = int(re.search(r"finished: (\d+) pages", out.stdout).group(1))
    shutil.rmtree(store, ignore_errors=True)
    return pages / (float(last) - float(first)), 1000 * cpu / pages, pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--size", type=int, default=8_000, help="bytes per page, about")
    parser.add_argument("--links", type=int, default=0, help="links per page (gensite.py)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    args = parser.parse_args()
    print(machine_speed(), flush=True)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    for tree in trees.values():
        compile_tree(tree)
    port = free_port()
    site = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "gensite.py"), str(port),
         "--pages", str(args.pages), "--size", str(args.size), "--links", str(args.links)],
    )  # fmt: skip
    time.sleep(1.0)
    results: dict[str, list[tuple[float, float, int]]] = {"before": [], "after": []}
    try:
        for round_ in range(args.rounds):
            order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
            for name in order:
                rate, cpu_ms, pages = crawl(trees[name], f"http://127.0.0.1:{port}", args)
                results[name].append((rate, cpu_ms, pages))
                print(f"round {round_ + 1} {name:<6}: {pages} pages, {rate:6.1f} pages/s, "
                      f"{cpu_ms:5.1f} CPU ms/page", flush=True)  # fmt: skip
    finally:
        site.terminate()
    medians = {n: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
               for n, rs in results.items()}  # fmt: skip
    for name, (rate, cpu_ms) in medians.items():
        print(f"median {name:<6}: {rate:6.1f} pages/s, {cpu_ms:5.1f} CPU ms/page ({trees[name]})")
    (rate_b, cpu_b), (rate_a, cpu_a) = medians["before"], medians["after"]
    print(f"after / before: throughput {rate_a / rate_b:.3f}, CPU per page {cpu_a / cpu_b:.3f}")


if __name__ == "__main__":
    main()
