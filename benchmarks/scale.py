"""A broad crawl at scale: many hosts, two pages each, on the embedded defaults and on
PostgreSQL + Redis, with every process's memory sampled over time, then Scrapy on the same site.

    .venv/bin/python benchmarks/scale.py [--hosts 10000] [--pages 2] [--delay 0.5]
        [--concurrency 32] [--modes embedded,postgres] [--scrapy-limit 900] [--out DIR]

The site (``broadsite.py``) gives each host its own loopback address, a robots.txt forbidding
``/private/`` (which every page links to), a home page and ``--pages - 1`` more, and logs every
request with its arrival time; it closes connections idle for 5 s, as web servers do (a
crawler that keeps one open to each of 10,000 hosts would run it out of file descriptors,
a listening socket per host already taking one each). From that log each crawl is checked:
every page requested once, no ``/private/`` URL requested, no two requests to one host closer
than ``--delay``. Every
``--every`` seconds the RSS of each process is sampled (the crawl command, each worker, the
redis-server, the database's PostgreSQL backends) with the hosts reached so far; Redis's memory
is read (``INFO memory``) and, every ``--census`` seconds, its keys are grouped by pattern
with ``MEMORY USAGE``. The series go to ``DIR/MODE.csv``, the figures to ``DIR/summary.json``.
Memory slope: RSS against hosts reached (least squares) once a fifth of them are reached.
The PostgreSQL run uses a fresh database ``--database`` and a redis-server of its own (so its
memory is the crawl's alone); the embedded run a fresh data directory.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import psutil
import redis
from common import ROOT, django_shell, free_port, fresh_database, is_worker, machine_speed

MB = 1 << 20
_HOST = re.compile(r"127\.\d+\.\d+\.\d+(:\d+)?")
_NUMBER = re.compile(r"\d+")
_COUNTS = """
from web.models import FrontierURL, Page
print(Page.objects.count(), Page.objects.values("url__url").distinct().count(),
      FrontierURL.objects.count())
"""


class Site:
    """``broadsite.py`` in a process of its own, logging every request to ``log``."""

    def __init__(self, hosts: int, pages: int, log: Path) -> None:
        self.port, self.log, self.pages = free_port(), log, pages
        self.seeds = log.with_suffix(".seeds")
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks/broadsite.py"), str(self.port), "--hosts",
             str(hosts), "--pages", str(pages), "--list", str(self.seeds), "--log", str(log),
             "--idle", "5"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        print(self.proc.stdout.readline().strip(), flush=True)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


class Progress:
    """Hosts reached (any request, robots.txt included) and pages requested so far, read from
    the site's log as it grows. Crawls go breadth first (every home page, then the second
    pages), so hosts reached is what the per-host state follows."""

    def __init__(self, log: Path) -> None:
        self.file = log.open()
        self.hosts: set[str] = set()
        self.pages = 0

    def read(self) -> tuple[int, int]:
        for line in self.file.readlines():
            _, host, path = line.split()
            self.hosts.add(host)
            self.pages += path == "/" or path.startswith("/p/")
        return len(self.hosts), self.pages


class Sampler(threading.Thread):
    """Every ``every`` seconds: RSS by process kind, hosts done, Redis memory and keys."""

    def __init__(self, root: int, progress: Progress, redis_url: str | None, database: str,
                 own_redis: int | None, every: float, census: float) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.root, self.progress, self.redis_url = psutil.Process(root), progress, redis_url
        self.database, self.own_redis, self.every, self.census_every = (
            database,
            own_redis,
            every,
            census,
        )
        self.rows: list[dict] = []
        self.census: dict = {}
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def processes(self) -> dict[str, list[psutil.Process]]:
        kinds: dict[str, list[psutil.Process]] = defaultdict(list)
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return kinds
        for p in tree:
            try:
                if p.pid == self.root.pid:
                    kinds["command"].append(p)
                elif p.name() == "redis-server":
                    kinds["redis"].append(p)
                elif is_worker(p):
                    kinds["worker"].append(p)
                else:
                    kinds["other"].append(p)
            except psutil.Error:
                pass
        if self.own_redis:
            kinds["redis"].append(psutil.Process(self.own_redis))
        if self.database:
            for p in psutil.process_iter(["name"]):
                try:
                    if p.info["name"] == "postgres" and f" {self.database} " in p.cmdline()[0]:
                        kinds["postgres"].append(p)
                except (psutil.Error, IndexError):
                    pass
        return kinds

    def redis(self) -> redis.Redis | None:
        return redis.Redis.from_url(self.redis_url, socket_timeout=5) if self.redis_url else None

    def sample(self, census: bool) -> None:
        hosts, pages = self.progress.read()
        row: dict = {"s": round(time.monotonic() - self.t0, 2), "hosts": hosts, "pages": pages}
        for kind, procs in self.processes().items():
            rss = []
            for p in procs:
                try:
                    rss.append(p.memory_info().rss / MB)
                except psutil.Error:
                    pass
            row[f"{kind}_n"], row[f"{kind}_mb"] = len(rss), round(sum(rss), 1)
            row[f"{kind}_max_mb"] = round(max(rss, default=0), 1)
        try:
            client = self.redis()
            if client is not None:
                row["redis_used_mb"] = round(client.info("memory")["used_memory"] / MB, 2)
                row["redis_keys"] = client.dbsize()
                if census:
                    self.take_census(client, hosts)
        except (redis.RedisError, OSError):
            pass
        self.rows.append(row)

    def take_census(self, client: redis.Redis, done: int) -> None:
        """Redis's keys grouped by pattern (host and numbers abstracted), their bytes; the
        census with the most per-host bytes is kept."""
        keys = [k.decode() for k in client.scan_iter(count=5000)]
        sizes: list[int] = []
        for i in range(0, len(keys), 2000):
            pipe = client.pipeline(transaction=False)
            for k in keys[i : i + 2000]:
                pipe.memory_usage(k, samples=0)
            sizes.extend(s or 0 for s in pipe.execute())
        patterns: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        hosts = set()
        for k, size in zip(keys, sizes, strict=True):
            found = _HOST.search(k)
            if found:
                hosts.add(found.group())
            name = _NUMBER.sub("N", _HOST.sub("{host}", k)) if found else _NUMBER.sub("N", k)
            patterns[name][0] += 1
            patterns[name][1] += size
        per_host = sum(b for n, (_, b) in patterns.items() if "{host}" in n)
        if per_host >= self.census.get("host_keyed_bytes", -1):
            self.census = {"s": round(time.monotonic() - self.t0, 1), "hosts_reached": done,
                           "hosts_with_keys": len(hosts), "keys": len(keys),
                           "bytes": sum(sizes), "host_keyed_bytes": per_host,
                           "patterns": dict(sorted(patterns.items(), key=lambda kv: -kv[1][1])),
                           }  # fmt: skip

    def run(self) -> None:
        last_census = 0.0
        while not self.stop.wait(self.every):
            now = time.monotonic()
            census = bool(self.census_every) and now - last_census >= self.census_every
            if census:
                last_census = now
            self.sample(census)


def check_log(log: Path, hosts: int, pages: int, delay: float) -> dict:
    """What the site saw: pages requested (and how often), robots.txt and forbidden requests,
    and the closest two requests to one host."""
    times: dict[str, list[float]] = defaultdict(list)
    page_times: dict[str, list[float]] = defaultdict(list)
    counts: Counter[tuple[str, str]] = Counter()
    private = robots = 0
    first = last = 0.0
    for line in log.open():
        stamp, host, path = line.split()
        if path == "/__stats__":
            continue
        t = float(stamp)
        times[host].append(t)
        if path == "/robots.txt":
            robots += 1
        elif path.startswith("/private/"):
            private += 1
        else:
            counts[(host, path)] += 1
            page_times[host].append(t)
            first, last = first or t, t

    def gaps(series: dict[str, list[float]]) -> tuple[int, float]:
        closer, least = 0, float("inf")
        for ts in series.values():
            ts.sort()
            for a, b in zip(ts, ts[1:], strict=False):
                least = min(least, b - a)
                closer += b - a < delay
        return closer, least

    closer_all, least_all = gaps(times)
    closer_pages, least_pages = gaps(page_times)
    return {
        "page_requests": sum(counts.values()), "distinct_pages": len(counts),
        "expected_pages": hosts * pages, "repeated": sum(c - 1 for c in counts.values()),
        "robots_requests": robots, "robots_violations": private,
        "closer_than_delay": closer_all, "min_gap_s": round(least_all, 4),
        "closer_than_delay_pages": closer_pages, "min_gap_pages_s": round(least_pages, 4),
        "first_to_last_page_s": round(last - first, 2),
    }  # fmt: skip


def slope(rows: list[dict], column: str, start: int) -> float | None:
    """MB per 1,000 hosts reached, least squares over the rows from ``start`` hosts on."""
    pts = [(r["hosts"], r[column]) for r in rows if r["hosts"] >= start and column in r]
    if len(pts) < 3 or pts[-1][0] == pts[0][0]:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return round(1000 * sum((x - mx) * (y - my) for x, y in pts) / sxx, 3)


def memory_summary(rows: list[dict], hosts: int) -> dict:
    columns = sorted({c for r in rows for c in r if c.endswith("_mb")})
    out = {}
    for c in columns:
        values = [r[c] for r in rows if c in r]
        out[c] = {"peak": max(values), "final": values[-1],
                  "slope_per_1000_hosts": slope(rows, c, hosts // 5)}  # fmt: skip
    return out


def run(name: str, cmd: list[str], env: dict, args, out: Path, redis_url: str | None,
        database: str, own_redis: int | None, limit: float | None = None) -> dict:  # fmt: skip
    log = out / f"{name}.log"
    log.touch()
    site = Site(args.hosts, args.pages, log)
    cmd = [part.replace("{seeds}", str(site.seeds)) for part in cmd]
    baseline = None
    if own_redis:
        baseline = redis.Redis.from_url(redis_url).info("memory")["used_memory"]
    t0 = time.monotonic()
    with (out / f"{name}.out").open("w") as stdout:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=stdout, stderr=subprocess.STDOUT)
        sampler = Sampler(proc.pid, Progress(log), redis_url, database, own_redis,
                          args.every, args.census)  # fmt: skip
        sampler.start()
        finished = True
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            finished = False
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    wall = time.monotonic() - t0
    sampler.stop.set()
    sampler.join()
    site.stop()
    if not finished or proc.returncode:
        print(f"{name}: exit {proc.returncode}, finished {finished}", flush=True)
    result = {"name": name, "finished": finished, "exit": proc.returncode,
              "command_s": round(wall, 2), **check_log(log, args.hosts, args.pages, args.delay),
              "memory": memory_summary(sampler.rows, args.hosts),
              "redis_census": sampler.census}  # fmt: skip
    result["pages_per_s"] = round(
        result["distinct_pages"] / max(result["first_to_last_page_s"], 1e-9), 1
    )
    used = [r["redis_used_mb"] for r in sampler.rows if "redis_used_mb" in r]
    if used:
        base = baseline / MB if baseline is not None else min(used)
        result["redis_used_peak_mb"] = max(used)
        result["redis_bytes_per_host"] = round((max(used) - base) * MB / args.hosts, 1)
    if sampler.census:
        c = sampler.census
        result["redis_host_keyed_bytes_per_host"] = round(
            c["host_keyed_bytes"] / max(c["hosts_with_keys"], 1), 1
        )
    with (out / f"{name}.csv").open("w", newline="") as f:
        columns = sorted(
            {c for r in sampler.rows for c in r},
            key=lambda c: (c != "s", c != "hosts", c != "pages", c),
        )
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(sampler.rows)
    print(
        json.dumps({k: v for k, v in result.items() if k != "redis_census"}, indent=1), flush=True
    )
    return result


def platform_cmd(args) -> list[str]:
    return [sys.executable, "manage.py", "crawl", "--seeds", "{seeds}", "--max-depth", "10",
            "--concurrency", str(args.concurrency), "--workers", str(args.workers),
            "--delay", str(args.delay), "--host-concurrency", "1",
            "--allow-network", "127.0.0.0/8"]  # fmt: skip


def own_redis(out: Path) -> tuple[subprocess.Popen, str]:
    """A redis-server for the PostgreSQL run alone, nothing persisted."""
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(out)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        try:
            redis.Redis.from_url(url).ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    return proc, url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--pages", type=int, default=2)
    parser.add_argument("--delay", type=float, default=0.5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--modes", default="embedded,postgres,scrapy")
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--database", default="h6")
    parser.add_argument("--scrapy-limit", type=float, default=900.0)
    parser.add_argument("--every", type=float, default=3.0)
    parser.add_argument("--census", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="scale-"))
    out.mkdir(parents=True, exist_ok=True)
    print(machine_speed(), f"; series in {out}", flush=True)
    base_env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    base_env["LOG_LEVEL"] = "WARNING"
    results = []
    for mode in args.modes.split(","):
        if mode == "embedded":
            data = Path(tempfile.mkdtemp(prefix="cp-scale-"))
            env = {**base_env, "CRAWL_DATA_DIR": str(data)}
            sock = f"unix://{data}/redis.sock"  # the private redis-server, while it runs
            results.append(run(mode, platform_cmd(args), env, args, out, sock, "", None))
            shutil.rmtree(data, ignore_errors=True)
        elif mode == "postgres":
            database_url = fresh_database(args.postgres, args.database)
            server, redis_url = own_redis(out)
            data = Path(tempfile.mkdtemp(prefix="cp-scale-"))
            env = {**base_env, "DATABASE_URL": database_url, "REDIS_URL": redis_url,
                   "CRAWL_DATA_DIR": str(data), "BODY_STORE": str(data / "bodies")}  # fmt: skip
            subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env,
                           check=True)  # fmt: skip
            try:
                results.append(run(mode, platform_cmd(args), env, args, out, redis_url,
                                   args.database, server.pid))  # fmt: skip
                counts = django_shell(env, _COUNTS).split()
                results[-1]["stored"] = dict(
                    zip(("pages", "distinct", "frontier"), counts, strict=True)
                )
                print(f"postgres: stored pages, distinct URLs, frontier URLs: {counts}", flush=True)
            finally:
                server.terminate()
                server.wait()
                shutil.rmtree(data, ignore_errors=True)
        elif mode == "scrapy":
            results.append(run(mode, [sys.executable, "benchmarks/scrapy_spider.py", "@{seeds}",
                                      str(args.concurrency), "--delay", str(args.delay),
                                      "--robots", "--per-host", "1"],
                               base_env, args, out, None, "", None, args.scrapy_limit))  # fmt: skip
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    print(f"\n{args.hosts} hosts x {args.pages} pages, {args.delay} s per host, concurrency "
          f"{args.concurrency}; {os.cpu_count()} cores")  # fmt: skip
    for r in results:
        print(f"{r['name']:<10} pages {r['distinct_pages']}/{r['expected_pages']} "
              f"(repeats {r['repeated']}), {r['first_to_last_page_s']} s, {r['pages_per_s']} "
              f"pages/s, command {r['command_s']} s, finished {r['finished']}, robots "
              f"violations {r['robots_violations']}, closer than delay {r['closer_than_delay']} "
              f"(min gap {r['min_gap_s']} s)")  # fmt: skip


if __name__ == "__main__":
    main()
