"""A crawl's phases: the CPU of each process group, and the pages fetched, interval by interval
from the crawl command's start to its exit.

    .venv/bin/python benchmarks/crawl_phases.py [--pages 1000] [--size 10000] [--links 20] \
        [--interval 0.1]

Crawls a generated site (``benchmarks/gensite.py``) with ``manage.py crawl`` in full durable
form (fresh PostgreSQL database ``crawlbench``, Redis database 14, one worker per core,
concurrency 16), reads every process's CPU time each ``--interval`` seconds and prints, per
interval, the cores busy in each group (the crawl command with its scheduler, its workers,
PostgreSQL, Redis, the site's server) and the pages fetched (their ``fetched_at``). It shows
where a crawl's CPU goes over time: start-up before the first page, the ramp while the
frontier grows, the steady part, the stop after the last page.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import psutil
import psycopg
import redis
from common import ROOT, free_port, fresh_database, is_worker, machine_speed, migrate

GROUPS = ("command", "workers", "postgres", "redis", "site")


def group_of(process: psutil.Process, command: int, site: int) -> str | None:
    if process.pid == command:
        return "command"
    if process.pid == site:
        return "site"
    name = process.name()
    if name == "postgres":
        return "postgres"
    if name == "redis-server":
        return "redis"
    try:
        if process.ppid() == command and is_worker(process):
            return "workers"
    except psutil.Error:
        return None
    return None


def sample(command: int, site: int, seen: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds so far by group (a process that exited keeps its last reading)."""
    for process in psutil.process_iter():
        try:
            known = seen.get(process.pid)
            group = known[0] if known else group_of(process, command, site)
            if group is not None:
                times = process.cpu_times()
                seen[process.pid] = (group, times.user + times.system)
        except psutil.Error:
            continue
    totals = dict.fromkeys(GROUPS, 0.0)
    for group, cpu in seen.values():
        totals[group] += cpu
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--links", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    args = parser.parse_args()
    print(machine_speed(), flush=True)
    port = free_port()
    site = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks/gensite.py"), str(port), "--pages",
         str(args.pages), "--size", str(args.size), "--links", str(args.links)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    print(site.stdout.readline().strip())
    store = tempfile.mkdtemp(prefix="bench-bodies-")  # fresh, as the database
    try:
        database = fresh_database(args.postgres, "crawlbench")
        redis.Redis.from_url(args.redis).flushdb()
        env = {**os.environ, "DATABASE_URL": database, "REDIS_URL": args.redis,
               "LOG_LEVEL": "WARNING", "BODY_STORE": store}  # fmt: skip
        migrate(env)
        seen: dict[int, tuple[str, float]] = {}
        started = time.time()
        crawl = subprocess.Popen(
            [sys.executable, "manage.py", "crawl", f"http://127.0.0.1:{port}/p/0",
             "--max-depth", "100", "--concurrency", "16"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        readings = [(time.time(), sample(crawl.pid, site.pid, seen))]
        while crawl.poll() is None:
            time.sleep(args.interval)
            readings.append((time.time(), sample(crawl.pid, site.pid, seen)))
        if crawl.returncode != 0:
            sys.exit(f"the crawl failed ({crawl.returncode})")
        with psycopg.connect(database) as conn:
            fetched = [float(t) for (t,) in conn.execute(
                "SELECT extract(epoch FROM fetched_at) FROM web_page ORDER BY 1")]  # fmt: skip
    finally:
        site.terminate()
        shutil.rmtree(store, ignore_errors=True)
    ended = readings[-1][0] - started
    print(f"{len(fetched)} pages; first fetched at {fetched[0] - started:.2f} s, last at "
          f"{fetched[-1] - started:.2f} s; the command exited at {ended:.2f} s")  # fmt: skip
    print(f"{'t s':>6}{'busy':>6}" + "".join(f"{g:>10}" for g in GROUPS) + f"{'pages':>7}")
    for (t0, before), (t1, after) in zip(readings, readings[1:], strict=False):
        cores = {g: (after[g] - before[g]) / (t1 - t0) for g in GROUPS}
        pages = sum(1 for t in fetched if t0 <= t < t1)
        print(f"{t1 - started:6.2f}{sum(cores.values()):6.2f}"
              + "".join(f"{cores[g]:10.2f}" for g in GROUPS) + f"{pages:7d}")  # fmt: skip
    first, last = readings[0][1], readings[-1][1]
    print("CPU seconds by group: " + ", ".join(f"{g} {last[g] - first[g]:.2f}" for g in GROUPS))


if __name__ == "__main__":
    main()
