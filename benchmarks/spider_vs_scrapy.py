"""One spider's source under Scrapy 2.19 and as a spider job on the platform, on the same local
site in the same run; and the spider job against a crawl with the equivalent CSS rules.

    .venv/bin/python benchmarks/spider_vs_scrapy.py [--runs 3] [--pages 1000] [--concurrency 16]
        [--modes postgres,embedded] [--workers 2]

The site is ``gensite.py``'s light one (``--pages`` pages of about 10 KB with about 24 links,
robots.txt allowing all). The spider (``SPIDER`` below) yields one item a page with two
``css(...).get()`` fields and follows every link. Scrapy runs it as written (``scrapy
runspider -O items.jsonl``: ``CONCURRENT_REQUESTS`` and ``CONCURRENT_REQUESTS_PER_DOMAIN`` at
``--concurrency``, AutoThrottle off, robots.txt obeyed, ``LOG_LEVEL=INFO``); the platform runs
it ported as ``tests/twins.py`` ports (its imports changed) with ``manage.py crawl --spider
pages --output items.jsonl`` at the same concurrency over ``--workers`` worker processes,
robots.txt obeyed, ``LOG_LEVEL=INFO``. The rules crawl is ``manage.py crawl START --extract
title=title --extract heading=h1 --output pages.jsonl``, the same otherwise.

Modes of the platform: ``postgres`` (a fresh PostgreSQL database, and a private redis-server
this script starts, so that its CPU is the crawl's alone on a shared machine) and
``embedded`` (no ``DATABASE_URL`` or ``REDIS_URL``: SQLite and the command's own
redis-server in a fresh data directory). Counted for each crawl: pages (the site's page
requests, robots.txt left out), items (the output file's lines), wall seconds from the site's
first to last page request and from the command's start to its exit, and CPU seconds of every
process from start to exit (the command's process tree, waited for; in ``postgres`` mode also
the backends of the crawl's database, sampled every 50 ms, and the private redis-server),
split by group, and the crawler's kernel time apart. Both sides fetch the start page twice (a
start URL's request is ``dont_filter``, as Scrapy's): 1,001 pages and items for 1,000 URLs.
Each run runs every crawl once, in an order rotated from run to run; the items of Scrapy and
of the spider job must be the same set, and the rules' fields the same values. Printed: each
run's table and ratios (throughput: pages/s over the site's window and over the command's
whole run; CPU a page), the load average before each run, then the medians over the runs.

Where a spider page's CPU goes: the same crawl under py-spy (GIL-held samples of the command
and its workers)::

    py-spy record --gil --subprocesses --rate 250 --format raw -o spider.raw -- \
        .venv/bin/python manage.py crawl --spider pages --concurrency 16 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis
from common import ROOT, Sampler, free_port, fresh_database, machine_speed, migrate

sys.path.insert(0, str(ROOT))
from tests.twins import port  # noqa: E402  (the port the twin tests run)

SPIDER = """\
import scrapy


class PagesSpider(scrapy.Spider):
    name = "pages"
    start_urls = [{start!r}]

    def parse(self, response):
        yield {{
            "url": response.url,
            "title": response.css("title::text").get(),
            "heading": response.css("h1::text").get(),
        }}
        yield from response.follow_all(css="a", callback=self.parse)
"""
RULES = ("title=title", "heading=h1")  # the fields of the spider's item, as extraction rules


@dataclass
class Result:
    name: str
    pages: int
    items: int
    window: float  # the site's first to last page request, seconds
    wall: float  # the command's start to its exit
    cpu: float  # every process, seconds
    system: float  # of which the crawler's processes spent in the kernel
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.pages / self.window

    @property
    def end_rate(self) -> float:
        return self.pages / self.wall

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu / self.pages


def children_cpu() -> tuple[float, float]:
    """User and system CPU seconds of the children waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime, usage.ru_stime


class Backends(threading.Thread):
    """CPU seconds of the PostgreSQL processes serving one database (backends, autovacuum),
    the last seen of each, sampled until ``done`` is set."""

    def __init__(self, database: str, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.mark, self.interval = f" {database} ", interval
        self.cpu: dict[int, float] = {}
        self.done = threading.Event()

    def sample(self) -> None:
        for proc in psutil.process_iter(["name"]):
            if proc.info["name"] != "postgres":
                continue
            try:
                if self.mark in " ".join(proc.cmdline()) + " ":
                    t = proc.cpu_times()
                    self.cpu[proc.pid] = t.user + t.system
            except psutil.Error:
                continue

    def run(self) -> None:
        while not self.done.wait(self.interval):
            self.sample()

    def stop(self) -> float:
        self.sample()
        self.done.set()
        return sum(self.cpu.values())


def process_cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def measure(name: str, cmd: list[str], env: dict, cwd: Path, stats_url: str, items: Path,
            database: str | None = None, redis_pid: int | None = None) -> Result:  # fmt: skip
    """Run ``cmd`` to its end; what it fetched from the site, kept and spent."""
    urllib.request.urlopen(stats_url).read()  # resets the site's counters
    backends = Backends(database) if database else None
    redis0 = process_cpu(redis_pid) if redis_pid else 0.0
    if backends:
        backends.start()
    cpu0, t0 = children_cpu(), time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    sampler = Sampler(proc.pid, interval=0.05)
    sampler.start()
    out, err = proc.communicate()
    wall = time.monotonic() - t0
    sampler.done.set()
    user, system = (after - before for after, before in zip(children_cpu(), cpu0, strict=True))
    cpu = user + system
    if proc.returncode != 0:
        sys.exit(f"{name} failed ({proc.returncode}):\n{out[-2000:]}\n{err[-4000:]}")
    served, first, last = urllib.request.urlopen(stats_url).read().decode().split()[:3]
    parts = sampler.by_role()
    if backends:
        parts["postgres"] = backends.stop()
        cpu += parts["postgres"]
    if redis_pid:
        parts["redis"] = process_cpu(redis_pid) - redis0
        cpu += parts["redis"]
    kept = sum(1 for line in items.read_text().splitlines() if line.strip())
    return Result(name, int(served), kept, float(last) - float(first), wall, cpu, system, parts)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check(scrapy_items: Path, spider_items: Path, rules_pages: Path) -> str:
    """Whether Scrapy's and the spider job's items are the same set, and the rules crawl's
    fields the same values; a line saying so (or the first difference)."""
    theirs_all, ours_all = records(scrapy_items), records(spider_items)
    theirs = {json.dumps(i, sort_keys=True) for i in theirs_all}
    ours = {json.dumps(i, sort_keys=True) for i in ours_all}
    ruled = {json.dumps({"url": p["url"], **p["data"]}, sort_keys=True)
             for p in records(rules_pages) if p.get("data")}  # fmt: skip
    lines = [f"items: Scrapy {len(theirs_all)} ({len(theirs)} distinct), spider job "
             f"{len(ours_all)} ({len(ours)} distinct): "
             + ("the same set" if theirs == ours else
                f"DIFFERENT, e.g. {sorted(theirs ^ ours)[:2]}"),
             f"rules' fields: {len(ruled)} pages, "
             + ("the items' values" if ruled == ours else
                f"DIFFERENT, e.g. {sorted(ruled ^ ours)[:2]}")]  # fmt: skip
    return "; ".join(lines)


def private_redis() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--loglevel", "warning"],
                            stdout=subprocess.DEVNULL)  # fmt: skip
    for _ in range(100):
        try:
            redis.Redis(port=port).ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    return proc, f"redis://127.0.0.1:{port}/0"


class Run:
    """The crawls of one run: the spider's source written for both sides, the platform's
    environment, and a private redis-server for the ``postgres`` mode."""

    def __init__(self, args: argparse.Namespace, start: str, stats_url: str) -> None:
        self.args, self.start, self.stats_url = args, start, stats_url
        self.scratch = Path(tempfile.mkdtemp(prefix="spiderbench-"))
        source = SPIDER.format(start=start)
        for where, name, text in (("scrapy", "pages_spider.py", source),
                                  ("ported", "pages_ported.py", port(source))):  # fmt: skip
            (self.scratch / where).mkdir()
            (self.scratch / where / name).write_text(text)
        self.env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        path = os.pathsep.join([str(self.scratch / "ported"), str(ROOT)])
        self.env.update(LOG_LEVEL="INFO", CRAWL_SPIDER_MODULES="pages_ported", PYTHONPATH=path)
        self.redis, self.redis_url = private_redis() if "postgres" in args.modes else (None, "")

    def out(self, label: str) -> Path:
        return self.scratch / f"{label.replace(' ', '-')}.jsonl"

    def scrapy(self) -> Result:
        settings = {"CONCURRENT_REQUESTS": self.args.concurrency,
                    "CONCURRENT_REQUESTS_PER_DOMAIN": self.args.concurrency,
                    "AUTOTHROTTLE_ENABLED": False, "ROBOTSTXT_OBEY": True, "LOG_LEVEL": "INFO",
                    "TELNETCONSOLE_ENABLED": False}  # fmt: skip
        cmd = [sys.executable, "-m", "scrapy", "runspider", "pages_spider.py",
               "-O", str(self.out("scrapy")),
               *[p for k, v in settings.items() for p in ("-s", f"{k}={v}")]]  # fmt: skip
        return measure("scrapy", cmd, dict(os.environ), self.scratch / "scrapy", self.stats_url,
                       self.out("scrapy"))  # fmt: skip

    def platform(self, kind: str, mode: str) -> Result:
        label = f"{kind} {mode}"
        what = (["--spider", "pages"] if kind == "spider" else
                [self.start, "--max-depth", "100", *(f"--extract={r}" for r in RULES)])  # fmt: skip
        cmd = [sys.executable, "manage.py", "crawl", *what, "--output", str(self.out(label)),
               "--concurrency", str(self.args.concurrency),
               "--workers", str(self.args.workers)]  # fmt: skip
        env = {**self.env, "CRAWL_DATA_DIR": tempfile.mkdtemp(dir=self.scratch)}
        if mode == "embedded":
            return measure(label, cmd, env, ROOT, self.stats_url, self.out(label))
        env["DATABASE_URL"] = fresh_database(self.args.postgres, self.args.database)
        env["REDIS_URL"] = self.redis_url
        redis.Redis.from_url(self.redis_url).flushall()
        migrate(env)
        return measure(label, cmd, env, ROOT, self.stats_url, self.out(label),
                       self.args.database, self.redis.pid)  # fmt: skip

    def all(self, n: int) -> dict[str, Result]:
        """Every crawl once, the order rotated by ``n``; their results by name."""
        crawls = [("scrapy", self.scrapy)] + [
            (f"{kind} {mode}", lambda kind=kind, mode=mode: self.platform(kind, mode))
            for mode in self.args.modes for kind in ("spider", "rules")]  # fmt: skip
        shift = n % len(crawls)
        results = {}
        try:
            for label, crawl in crawls[shift:] + crawls[:shift]:
                results[label] = crawl()
        finally:
            if self.redis:
                self.redis.terminate()
                self.redis.wait()
        for mode in self.args.modes:
            print(f"  {mode}: " + check(self.out("scrapy"), self.out(f"spider {mode}"),
                                        self.out(f"rules {mode}")))  # fmt: skip
        shutil.rmtree(self.scratch, ignore_errors=True)
        return {label: results[label] for label, _ in crawls}


def table(results: dict[str, Result]) -> None:
    print(f"  {'crawl':<18}{'pages':>6}{'items':>6}{'window s':>9}{'wall s':>8}{'pages/s':>9}"
          f"{'to end':>8}{'CPU ms/page':>12}{'kernel':>7}  CPU ms/page by group")  # fmt: skip
    for r in results.values():
        groups = ", ".join(f"{k} {1000 * v / r.pages:.2f}" for k, v in sorted(r.parts.items()))
        print(f"  {r.name:<18}{r.pages:>6}{r.items:>6}{r.window:>9.2f}{r.wall:>8.2f}"
              f"{r.rate:>9.1f}{r.end_rate:>8.1f}{r.cpu_ms:>12.2f}"
              f"{1000 * r.system / r.pages:>7.2f}  {groups}")  # fmt: skip


def ratios(results: dict[str, Result], modes: list[str]) -> dict[str, float]:
    scrapy, out = results["scrapy"], {}
    for mode in modes:
        spider, rules = results[f"spider {mode}"], results[f"rules {mode}"]
        out[f"{mode}: throughput x Scrapy"] = spider.rate / scrapy.rate
        out[f"{mode}: throughput to end x Scrapy"] = spider.end_rate / scrapy.end_rate
        out[f"{mode}: CPU/page / Scrapy's"] = spider.cpu_ms / scrapy.cpu_ms
        out[f"{mode}: spider CPU/page over rules'"] = spider.cpu_ms / rules.cpu_ms - 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--modes", default="postgres,embedded")
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--database", default="spiderbench", help="created afresh each crawl")
    args = parser.parse_args()
    args.modes = args.modes.split(",")
    print(machine_speed(), flush=True)
    site_port = free_port()
    site = subprocess.Popen([sys.executable, str(ROOT / "benchmarks/gensite.py"), str(site_port),
                             "--pages", str(args.pages), "--size", "10000", "--links", "20"],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    print(site.stdout.readline().strip())
    base = f"http://127.0.0.1:{site_port}"
    runs: list[dict[str, Result]] = []
    found: list[dict[str, float]] = []
    try:
        for n in range(args.runs):
            print(f"\n== run {n + 1}: load average {os.getloadavg()}", flush=True)
            runs.append(Run(args, base + "/p/0", base + "/__stats__").all(n))
            table(runs[-1])
            found.append(ratios(runs[-1], args.modes))
            for k, v in found[-1].items():
                print(f"  {k}: {v:+.0%}" if "over" in k else f"  {k}: {v:.2f}")
    finally:
        site.terminate()
    print(
        f"\n== medians of {args.runs} runs (load average now {os.getloadavg()}); "
        f"concurrency {args.concurrency}, {args.workers} workers, {os.cpu_count()} cores"
    )
    for name in runs[0]:
        rs = [r[name] for r in runs]
        print(f"  {name:<18} pages/s {statistics.median(r.rate for r in rs):7.1f}  to end "
              f"{statistics.median(r.end_rate for r in rs):6.1f}  CPU ms/page "
              f"{statistics.median(r.cpu_ms for r in rs):6.2f}")  # fmt: skip
    for k in found[0]:
        values = [f[k] for f in found]
        shown = ", ".join(f"{v:+.0%}" if "over" in k else f"{v:.2f}" for v in values)
        median = statistics.median(values)
        print(f"  {k}: median {median:+.0%} ({shown})" if "over" in k else
              f"  {k}: median {median:.2f} ({shown})")  # fmt: skip


if __name__ == "__main__":
    main()
