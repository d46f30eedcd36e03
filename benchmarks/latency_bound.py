"""Latency-bound crawling: a site that answers every page after 100 ms.

    .venv/bin/python benchmarks/latency_bound.py [--pages 3000] [--latency 0.1]
        [--concurrency 16 64 256] [--processes 1 2 4] [--cpu-rate PAGES_PER_S]

Serves a generated site (``benchmarks/gensite.py``) and crawls ``--pages`` pages of it with
``manage.py crawl`` on PostgreSQL and Redis, every page committed, in these configurations:

1. no latency, concurrency 16 over one worker process per core: the CPU-bound rate;
2. ``--latency`` seconds per page at concurrency 16, 64 and 256 (one process per core): the
   rate against ``min(concurrency / latency, CPU-bound rate)``, target at least 80%;
3. ``--latency`` at 8 threads per process with 1, 2 and 4 processes: how throughput grows
   with processes until the machine is CPU-bound.

Throughput is pages over the time between the first and the last page request at the
server. Each configuration gets a fresh database (``crawlbench_latency``) and Redis db 14.
Every process uses a pool of at most ``--db-pool`` PostgreSQL connections
(``DB_POOL_MAX_SIZE``): 256 threads cannot each hold one of PostgreSQL's 100.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import urllib.request

import psutil
import redis
from common import POSTGRES, ROOT, free_port, fresh_database, migrate


def crawl(base: str, pages: int, concurrency: int, workers: int, env: dict) -> tuple[int, float]:
    """Crawl ``pages`` pages; returns (pages stored, seconds first to last request)."""
    stats = f"{base}/__stats__"
    urllib.request.urlopen(stats).read()
    env = {**env, "DATABASE_URL": fresh_database(POSTGRES, "crawlbench_latency")}
    redis.Redis.from_url(env["REDIS_URL"]).flushdb()
    migrate(env)
    out = subprocess.run(
        [sys.executable, "manage.py", "crawl", f"{base}/p/0", "--max-depth", "100",
         "--max-pages", str(pages), "--concurrency", str(concurrency),
         "--workers", str(workers)],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    if out.returncode:
        sys.exit(f"crawl failed ({out.returncode}):\n{out.stderr[-3000:]}")
    done = int(re.search(r"finished: (\d+) pages", out.stdout).group(1))
    count, first, last = urllib.request.urlopen(stats).read().decode().split()
    return done, float(last) - float(first)


def site(port: int, pages: int, latency: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "benchmarks/gensite.py", str(port), "--pages", str(pages * 2),
         "--latency", str(latency)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    proc.stdout.readline()
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--db-pool", type=int, default=16, help="DB_POOL_MAX_SIZE")
    parser.add_argument(
        "--cpu-rate", type=float, default=None, help="skip run 1 and take this CPU-bound rate"
    )
    parser.add_argument("--concurrency", type=int, nargs="*", default=[16, 64, 256])
    parser.add_argument("--processes", type=int, nargs="*", default=[1, 2, 4])
    args = parser.parse_args()
    cores = os.cpu_count() or 2
    env = {**os.environ, "REDIS_URL": args.redis, "LOG_LEVEL": "WARNING",
           "DB_POOL_MAX_SIZE": str(args.db_pool)}  # fmt: skip
    rows = []

    def run(label: str, latency: float, concurrency: int, workers: int) -> float:
        port = free_port()
        server = site(port, args.pages, latency)
        try:
            cpu0, t0 = psutil.cpu_times(), time.monotonic()
            done, wall = crawl(f"http://127.0.0.1:{port}", args.pages, concurrency, workers, env)
            busy = 1 - (psutil.cpu_times().idle - cpu0.idle) / ((time.monotonic() - t0) * cores)
        finally:
            server.terminate()
        rate = done / wall
        rows.append((label, latency, concurrency, workers, done, wall, rate, busy))
        print(f"{label}: {done} pages in {wall:.1f} s, {rate:.1f} pages/s, "
              f"machine CPU {100 * busy:.0f}% busy", flush=True)  # fmt: skip
        return rate

    cpu_rate = args.cpu_rate or run("cpu-bound", 0.0, 16, cores)
    bounds = {}
    for c in args.concurrency:
        rate = run(f"latency c={c}", args.latency, c, cores)
        bounds[c] = (rate, min(c / args.latency, cpu_rate))
    scaling = {p: run(f"processes={p}", args.latency, 8 * p, p) for p in args.processes}

    print(f"\n{'run':<18}{'latency s':>10}{'conc.':>7}{'procs':>7}{'pages':>7}{'wall s':>8}"
          f"{'pages/s':>9}{'CPU busy':>10}")  # fmt: skip
    for label, latency, c, w, done, wall, rate, busy in rows:
        print(f"{label:<18}{latency:>10.2f}{c:>7}{w:>7}{done:>7}{wall:>8.1f}{rate:>9.1f}"
              f"{100 * busy:>9.0f}%")  # fmt: skip
    print(
        f"\nCPU-bound rate: {cpu_rate:.1f} pages/s; DB_POOL_MAX_SIZE={args.db_pool}; {cores} cores"
    )
    for c, (rate, bound) in bounds.items():
        share = rate / bound
        verdict = "met" if share >= 0.8 else "NOT met"
        print(
            f"concurrency {c:>3}: {rate:6.1f} pages/s = {100 * share:5.1f}% of "
            f"min({c}/{args.latency:g} s, {cpu_rate:.0f}) = {bound:.0f}  (target 80%: {verdict})"
        )
    if not scaling:
        return
    base = next(iter(scaling.values()))
    print("processes (8 threads each): " + ", ".join(
        f"{p} -> {rate:.1f} pages/s ({rate / base:.2f}x)" for p, rate in scaling.items()
    ))  # fmt: skip


if __name__ == "__main__":
    main()
