"""Dispatch latency: a burst of 10,000 ready URLs, from release to task start.

    .venv/bin/python benchmarks/dispatch_latency.py [--urls 10000] [--workers 2] [--concurrency 8]

Seeds a job with ``--urls`` pages of a local generated site (all due at once; depth 0, so no
links are followed), starts the workers and waits until they consume, then starts the job
and the scheduler: the whole burst is ready at that moment. The latency of each URL is the
time from its release by the scheduler (the commit that makes it SCHEDULED, ``scheduled_at``)
to the claim at the start of its task, as every worker counts it in its
``crawlplatform_dispatch_seconds`` histogram; the script sums the workers' histograms and
prints the distribution, the mean and the interpolated p50/p90/p99, and the burst's
throughput. PostgreSQL (fresh database ``crawlbench_dispatch``) and Redis database 14.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

import psycopg
import redis
from common import (
    POSTGRES,
    ROOT,
    django_shell,
    free_port,
    fresh_database,
    histogram,
    migrate,
    quantile,
    start_workers,
    stop,
)


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.05)


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1).read()
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--urls", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--concurrency", type=int, default=8, help="threads per worker")
    parser.add_argument("--postgres", default=POSTGRES)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    args = parser.parse_args()

    port = free_port()
    metrics_ports = [free_port() for _ in range(args.workers)]
    site = subprocess.Popen(
        [sys.executable, "benchmarks/gensite.py", str(port), "--pages", str(args.urls)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    print(site.stdout.readline().strip())
    base = f"http://127.0.0.1:{port}"
    database_url = fresh_database(args.postgres, "crawlbench_dispatch")
    redis.Redis.from_url(args.redis).flushdb()
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": args.redis,
           "LOG_LEVEL": "WARNING"}  # fmt: skip
    migrate(env)
    job_id = int(django_shell(env, (
        "from tasks.frontier.jobs import create_job;"
        f"print(create_job(['{base}/p/0'], name='dispatch', max_depth=0).pk)"
    )))  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as seeds:
        seeds.writelines(f"{base}/p/{i}\n" for i in range(args.urls))
        seeds.flush()
        subprocess.run(
            [sys.executable, "manage.py", "seed", str(job_id), seeds.name, "--no-start"],
            cwd=ROOT, env=env, check=True, capture_output=True,
        )  # fmt: skip

    workers = start_workers(args.workers, args.concurrency, env, metrics_ports)
    scheduler = None
    metric_urls = [f"http://127.0.0.1:{p}/metrics" for p in metrics_ports]
    try:
        wait_until(lambda: all(answers(u) for u in metric_urls), 60, "workers to start")
        django_shell(env, f"from tasks.frontier import jobs;from web.models import CrawlJob;"
                          f"jobs.start(CrawlJob.objects.get(pk={job_id}))")  # fmt: skip
        scheduler = subprocess.Popen([sys.executable, "manage.py", "scheduler"], cwd=ROOT, env=env)
        with psycopg.connect(database_url, autocommit=True) as conn:

            def finished() -> bool:
                q = "SELECT state FROM web_crawljob WHERE id = %s"
                return conn.execute(q, [job_id]).fetchone()[0] == "finished"

            wait_until(finished, 600, "the burst to finish")
            first, last, done = conn.execute(
                "SELECT min(fetched_at), max(fetched_at), count(*) FROM web_page WHERE job_id = %s",
                [job_id],
            ).fetchone()
        buckets, total, count = histogram(metric_urls, "crawlplatform_dispatch_seconds")
    finally:
        stop([p for p in (scheduler, *workers) if p is not None])
        site.terminate()

    span = (last - first).total_seconds()
    print(
        f"\n{done:,} pages in {span:.1f} s ({done / span:.0f} pages/s); {args.workers} workers"
        f" x {args.concurrency} threads; {int(count):,} dispatches"
    )
    print(f"\n{'latency <=':>12}{'dispatches':>12}{'cumulative %':>14}")
    below = 0.0
    for bound, cumulative in buckets:
        label = "inf" if bound == float("inf") else f"{bound * 1000:.0f} ms"
        print(f"{label:>12}{int(cumulative - below):>12,}{100 * cumulative / count:>14.1f}")
        below = cumulative
    p50, p90, p99 = (quantile(buckets, q) for q in (0.5, 0.9, 0.99))
    print(f"\nmean {1000 * total / count:.1f} ms   p50 {1000 * p50:.1f} ms   "
          f"p90 {1000 * p90:.1f} ms   p99 {1000 * p99:.1f} ms")  # fmt: skip
    met = p50 <= 0.05 and p99 <= 0.5
    print(f"target (p50 <= 50 ms, p99 <= 500 ms): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
