"""What the platform costs when it has little or nothing to do.

    .venv/bin/python benchmarks/idle_cpu.py [--idle 60] [--pages 200] [--delay 0.5]

1. **Idle**: a scheduler (``manage.py scheduler``) and two worker processes (the README's
   worker command, threads pool, 8 slots each) on PostgreSQL and Redis, no job. After they
   have started, CPU seconds over ``--idle`` seconds: of the scheduler, of the workers, of
   PostgreSQL and of Redis.
2. **Polite crawl**: the same processes crawl ``--pages`` pages of a local generated site
   (``benchmarks/gensite.py``) at ``--delay`` seconds between requests (the job's delay: one
   host, so the crawl takes about pages x delay). CPU seconds from the job's start to its end,
   by the same parts, and per page.

Every figure is CPU time (user + system) read from the processes (PostgreSQL backends
included), not wall time. A fresh database (``crawlbench_idle``) and Redis db 13.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import psutil
import psycopg
import redis
from common import POSTGRES, ROOT, django_shell, free_port, fresh_database, migrate, service_cpu


def tree_cpu(procs: list[subprocess.Popen]) -> float:
    total = 0.0
    for p in procs:
        try:
            for proc in [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]:
                t = proc.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            continue
    return total


def snapshot(scheduler: subprocess.Popen, workers: list[subprocess.Popen]) -> dict[str, float]:
    return {
        "scheduler": tree_cpu([scheduler]),
        "workers": tree_cpu(workers),
        "postgres": service_cpu(("postgres", "postgresql")),
        "redis": service_cpu(("redis-server",)),
    }


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before}


def line(label: str, cpu: dict[str, float], seconds: float, pages: int | None = None) -> str:
    total = sum(cpu.values())
    parts = ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
    per_page = f", {total / pages * 1000:.1f} ms/page" if pages else ""
    return (f"{label}: {total:.2f} CPU s in {seconds:.1f} s "
            f"({total / seconds * 100:.1f}% of one core{per_page}) [{parts}]")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle", type=float, default=60.0, help="seconds measured idle")
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.5)
    args = parser.parse_args()

    env = {
        **os.environ,
        "DATABASE_URL": fresh_database(POSTGRES, "crawlbench_idle"),
        "REDIS_URL": "redis://127.0.0.1:6379/13",
        "LOG_LEVEL": "WARNING",
        "CRAWL_RESOLVE": "",
    }
    redis.Redis.from_url(env["REDIS_URL"]).flushdb()
    migrate(env)
    port = free_port()
    site = subprocess.Popen(
        [sys.executable, "benchmarks/gensite.py", str(port), "--pages", str(args.pages * 10)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    site.stdout.readline()
    scheduler = subprocess.Popen([sys.executable, "manage.py", "scheduler"], cwd=ROOT, env=env,
                                 stderr=subprocess.DEVNULL)  # fmt: skip
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "crawlplatform",
                "worker",
                "--pool",
                "threads",
                "--concurrency",
                "8",
                "--queues",
                "crawl",
                "--hostname",
                f"idle{i}@%h",
                "--loglevel",
                "WARNING",
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        for i in range(2)
    ]
    try:
        time.sleep(10)  # start-up is not idling
        before, t0 = snapshot(scheduler, workers), time.monotonic()
        time.sleep(args.idle)
        idle = delta(before, snapshot(scheduler, workers))
        print(line("idle (scheduler + 2 workers, no job)", idle, time.monotonic() - t0),
              flush=True)  # fmt: skip

        before, t0 = snapshot(scheduler, workers), time.monotonic()
        job = django_shell(env, (
            "from tasks.frontier import jobs;"
            f"j = jobs.create_job(['http://127.0.0.1:{port}/p/0'], max_pages={args.pages},"
            f" delay={args.delay}, max_depth=100); jobs.start(j); print(j.pk)"
        ))  # fmt: skip
        with psycopg.connect(env["DATABASE_URL"], autocommit=True) as db:
            query = "SELECT state FROM web_crawljob WHERE id = %s"
            while db.execute(query, (job,)).fetchone()[0] != "finished":
                time.sleep(0.5)
            seconds = time.monotonic() - t0
            crawl = delta(before, snapshot(scheduler, workers))
            query = "SELECT count(*) FROM web_page WHERE job_id = %s"
            pages = db.execute(query, (job,)).fetchone()[0]
        print(line(f"polite crawl ({pages} pages, delay {args.delay:g} s)", crawl, seconds, pages))
    finally:
        for p in [scheduler, *workers]:
            p.terminate()
        for p in [scheduler, *workers]:
            p.wait(60)
        site.terminate()


if __name__ == "__main__":
    main()
