"""Crawl local sites of different shape with crawlplatform and with Scrapy, same run.

    apt-get install python3.11-doc
    .venv/bin/pip install -r benchmarks/requirements.txt
    .venv/bin/python benchmarks/crawl_vs_scrapy.py [--sites docs,light,heavy] [--concurrency 16]
        [--extract 'title=h1' --extract 'links=a[]@href']  # the platform also extracts these
        [--spider titles]  # the platform crawls with that spider of bench_spiders.py instead
        [--private]  # on a PostgreSQL and a Redis of the run's own (a shared machine)
        [--pages 1000]  # pages of the generated sites (1: what a crawl costs besides its pages)

Sites: ``docs``, the Python 3.11 HTML docs (527 pages, link-heavy, 93 KiB on average);
``docs-dead``, the same pages, each also linking to two URLs on a port of 127.0.0.1 where
nothing listens (a development server that is not running);
``light``, 1,000 generated pages of about 10 KB with about 24 links; ``heavy``, 1,000
generated pages of about 150 KB with about 300 links (``benchmarks/gensite.py``).

The platform runs in full durable form: PostgreSQL (a fresh database, ``crawlbench`` unless
``--database`` names another) and Redis (database 14 unless ``--redis`` names another),
worker processes on both cores, every page and URL state committed.
Both crawlers get the same concurrency. Printed per crawler: pages, wall seconds (first to
last request as seen by the server; from the first request to the command's exit, which
counts the time a crawler spends on URLs that are not pages; and the whole command), pages/s
(over the first of these), pages/s to the end (over the second), CPU seconds per page
over every process involved (the crawler's process tree; for the platform also PostgreSQL
and Redis) and split by group (workers, the crawl command with its scheduler, PostgreSQL,
Redis), peak RSS of the crawler's process tree; then the ratios, per site.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import redis
from common import (
    ROOT,
    Sampler,
    django_shell,
    free_port,
    fresh_database,
    listener,
    machine_speed,
    migrate,
    private_servers,
    service_cpu,
)


@dataclass
class Result:
    name: str
    pages: int
    server_wall: float
    command_wall: float
    to_end: float  # seconds from the server's first request to the command's exit
    cpu: float
    peak_rss: int
    parts: dict[str, float]

    @property
    def rate(self) -> float:
        return self.pages / self.server_wall

    @property
    def end_rate(self) -> float:
        return self.pages / self.to_end

    @property
    def cpu_per_page_ms(self) -> float:
        return 1000 * self.cpu / self.pages


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(
    name: str,
    cmd: list[str],
    env: dict,
    stats_url: str,
    services: dict[str, tuple[int, ...]],
    pages_from,
) -> Result:
    """Run ``cmd`` and measure it, with the CPU of ``services`` (a server's process name ->
    the servers of that name the crawl uses, by pid: ``servers``); ``pages_from(stdout)``
    counts its pages (None: the pages the server served)."""
    urllib.request.urlopen(stats_url).read()  # reset the server's counters
    svc0_each = {s: service_cpu((s,), pids) for s, pids in services.items()}
    sys0_each = {s: service_cpu((s,), pids, kernel=True) for s, pids in services.items()}
    cpu0, t0 = children_cpu(), time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    sampler = Sampler(proc.pid)
    sampler.start()
    out, err = proc.communicate()
    ended = time.time()  # the server's clock (docserver.py, gensite.py)
    sampler.done.set()
    wall = time.monotonic() - t0
    services_cpu = {s: service_cpu((s,), pids) - svc0_each[s] for s, pids in services.items()}
    cpu = children_cpu() - cpu0 + sum(services_cpu.values())
    parts = {**sampler.by_role(), **services_cpu}
    kernel = {**sampler.by_role(kernel=True),
              **{s: service_cpu((s,), pids, kernel=True) - sys0_each[s]
                 for s, pids in services.items()}}  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"{name} failed ({proc.returncode}):\n{out}\n{err[-3000:]}")
    counts = urllib.request.urlopen(stats_url).read().decode().splitlines()
    served, first, last = counts[0].split()
    if len(counts) > 1:
        print(f"{name}: the server also counted {counts[1]}")
    pages = pages_from(out) if pages_from else int(served)
    print(
        f"{name}: {pages} pages; CPU ms/page by group (sampled): "
        + ", ".join(f"{k} {1000 * v / pages:.2f}" for k, v in parts.items())
        + "; of which in the kernel: "
        + ", ".join(f"{k} {1000 * v / pages:.2f}" for k, v in kernel.items()),
        flush=True,
    )
    return Result(name, pages, float(last) - float(first), wall, ended - float(first), cpu,
                  sampler.peak, parts)  # fmt: skip


_PAGE_BYTES = """
from django.db import connection
with connection.cursor() as c:
    c.execute("SELECT count(*), sum(pg_column_size(http)), sum(pg_column_size(data)), "
              "pg_total_relation_size('web_page'), count(DISTINCT body_key) FROM web_page")
    print(*c.fetchone())
"""


def stored_bytes(env: dict, store: Path) -> None:
    """What the platform's crawl kept per page: the body store and the page rows."""
    pages, http, data, table, kept = (int(v) for v in django_shell(env, _PAGE_BYTES).split())
    size = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
    print(
        f"crawlplatform kept {pages} pages: body store {size / pages:,.0f} bytes/page "
        f"({kept} distinct bodies, zstd); page rows {table / pages:,.0f} bytes/page "
        f"with indexes, of which headers {http / pages:,.0f}, data {data / pages:,.0f}"
    )
    shutil.rmtree(store, ignore_errors=True)


def serve(site: str, docs: Path, pages: int) -> tuple[subprocess.Popen, str, str]:
    """Start the local site; its base URL and start path."""
    port = free_port()
    if site in ("docs", "docs-dead"):
        cmd = [str(ROOT / "benchmarks/docserver.py"), str(docs), str(port)]
        if site == "docs-dead":
            dead = free_port()  # nothing listens there: connections are refused
            cmd += [f"http://127.0.0.1:{dead}/", f"http://127.0.0.1:{dead}/api/"]
        start = "/index.html"
    else:
        size, links = SHAPES[site]
        cmd = [str(ROOT / "benchmarks/gensite.py"), str(port), "--pages", str(pages),
               "--size", str(size), "--links", str(links)]  # fmt: skip
        start = "/p/0"
    server = subprocess.Popen([sys.executable, *cmd], stdout=subprocess.PIPE, text=True)
    print(server.stdout.readline().strip())
    return server, f"http://127.0.0.1:{port}", start


def servers(postgres: str, redis_url: str) -> dict[str, tuple[int, ...]]:
    """The PostgreSQL and Redis servers the crawl uses, by the pid listening on each URL's
    port: on a shared machine, other servers' CPU is not the crawl's (a server whose pid
    cannot be read counts every server of its name)."""
    found = {"postgres": listener(postgres), "redis-server": listener(redis_url)}
    return {name: (pid,) if pid else () for name, pid in found.items()}


SHAPES = {"light": (10_000, 20), "heavy": (150_000, 300)}  # bytes and links per page


def compare(site: str, args: argparse.Namespace) -> list[Result]:
    """Scrapy, then the platform, on ``site``."""
    server, base, start = serve(site, args.docs, args.pages)
    start_url, stats_url = base + start, base + "/__stats__"
    results = []
    try:
        if not args.skip_scrapy:
            results.append(measure(
                "scrapy",
                [sys.executable, "benchmarks/scrapy_spider.py", start_url, str(args.concurrency)],
                dict(os.environ), stats_url, {},
                lambda out: int(re.search(r"scrapy pages=(\d+)", out).group(1)),
            ))  # fmt: skip
        database_url = fresh_database(args.postgres, args.database)
        redis.Redis.from_url(args.redis).flushdb()
        store = tempfile.mkdtemp(prefix="bench-bodies-")  # fresh, as the database
        env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": args.redis,
               "LOG_LEVEL": "WARNING", "BODY_STORE": store}  # fmt: skip
        if args.spider:
            env["CRAWL_SPIDER_MODULES"] = "bench_spiders"
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "benchmarks"),
                                                              env.get("PYTHONPATH")]))  # fmt: skip
        migrate(env)
        results.append(measure(
            "crawlplatform",
            [sys.executable, "manage.py", "crawl", start_url, "--max-depth", "100",
             "--concurrency", str(args.concurrency), "--workers", str(args.workers),
             "--pool", args.pool, *(f"--extract={rule}" for rule in args.extract),
             *(["--spider", args.spider] if args.spider else [])],
            env, stats_url, servers(args.postgres, args.redis),
            lambda out: int(re.search(r"finished: (\d+) pages", out).group(1)),
        ))  # fmt: skip
        stored_bytes(env, Path(store))
    finally:
        server.terminate()
    return results


def report(site: str, results: list[Result], args: argparse.Namespace) -> None:
    print(
        f"\n== {site}: concurrency {args.concurrency}; crawlplatform: {args.workers} workers "
        f"({args.pool}), PostgreSQL + Redis; {os.cpu_count()} cores"
    )
    print(
        f"{'crawler':<14}{'pages':>7}{'wall s':>9}{'to end s':>9}{'cmd s':>8}{'pages/s':>9}"
        f"{'to end':>8}{'CPU ms/page':>13}{'peak RSS MB':>13}  CPU ms/page by group"
    )
    for r in results:
        groups = ", ".join(f"{k} {1000 * v / r.pages:.2f}" for k, v in r.parts.items())
        print(
            f"{r.name:<14}{r.pages:>7}{r.server_wall:>9.2f}{r.to_end:>9.2f}{r.command_wall:>8.2f}"
            f"{r.rate:>9.1f}{r.end_rate:>8.1f}{r.cpu_per_page_ms:>13.1f}"
            f"{r.peak_rss / 2**20:>13.0f}  {groups}"
        )
    if len(results) == 2:
        scrapy, ours = results
        print(
            f"{site}: throughput ratio (crawlplatform / scrapy) {ours.rate / scrapy.rate:.2f}x, "
            f"to the end {ours.end_rate / scrapy.end_rate:.2f}x, "
            f"CPU per page ratio {ours.cpu_per_page_ms / scrapy.cpu_per_page_ms:.2f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", default="docs,light,heavy")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--pages", type=int, default=1000,
                        help="pages of the generated sites (light, heavy)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--pool", default="threads")
    parser.add_argument("--docs", type=Path, default=Path("/usr/share/doc/python3.11/html"))
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--database", default="crawlbench", help="created afresh each run")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--skip-scrapy", action="store_true")
    parser.add_argument(
        "--private",
        action="store_true",
        help="a PostgreSQL and a Redis of the run's own, not --postgres and --redis",
    )
    parser.add_argument(
        "--extract",
        action="append",
        default=[],
        metavar="RULE",
        help="the platform's crawl also applies this rule (NAME=SELECTOR...)",
    )
    parser.add_argument("--spider", help="the platform's crawl runs this spider of "
                        "benchmarks/bench_spiders.py (e.g. titles)")  # fmt: skip
    args = parser.parse_args()
    print(machine_speed(), flush=True)
    sites = args.sites.split(",")
    if {"docs", "docs-dead"} & set(sites) and not (args.docs / "index.html").exists():
        sys.exit(f"{args.docs} not found: apt-get install python3.11-doc")
    with private_servers() if args.private else contextlib.nullcontext() as found:
        if found:
            args.postgres, args.redis = found
        done = {site: compare(site, args) for site in sites}
    for site, results in done.items():
        report(site, results, args)


if __name__ == "__main__":
    main()
