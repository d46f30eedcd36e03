"""Time from ``manage.py crawl``'s start to its first request, its first page stored, and its exit.

    .venv/bin/python benchmarks/first_request.py [--rounds 5] [--modes fresh,migrated,postgres] \
        [--tree OTHER_CHECKOUT] [--postgres URL] [--database NAME] [--redis URL]

A local site on 127.0.0.1 (a home page linking to two pages) records when each request
arrives. Each round runs ``manage.py crawl http://127.0.0.1:PORT/ --max-pages 2`` once in each
mode: ``fresh`` (the embedded defaults on a new data directory: its database is made), ``migrated``
(the embedded defaults on a data directory migrated before) and ``postgres`` (``DATABASE_URL``
and ``REDIS_URL`` set, the database migrated before). With ``--tree``, each round also runs
the same crawls from another checkout (``git worktree add /tmp/before COMMIT``), alternately
first, so that both see the same load on a shared machine.

Per mode and tree it prints the median and minimum of: wall seconds from the command's start
to the site's first request (robots.txt), to the first page stored (the page row's
``fetched_at``, made just before the transaction that commits it) and to the command's exit;
CPU seconds of the command process up to the first request, and of everything it started
(workers, private redis-server) up to the first request and up to its exit. The command logs
its start-up steps at DEBUG (``crawl start-up: <step> at <epoch>, <CPU> s CPU``): one extra
run per mode with ``LOG_LEVEL=DEBUG`` prints when each step ended, then, from the workers' and
redis-server's logs and the site, when redis-server was ready, the first worker ready, the
first message received, the first request, the first page stored and its task acknowledged.
The timed rounds run at the default level. Last, one run of the first mode under
``python -X importtime`` splits the command's imports by step and by top-level package
(importtime's own overhead included), and ``python -c pass`` times the bare interpreter. The
load average before and after is printed too: figures from a loaded machine compare only with
each other.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import psycopg
import redis
from common import POSTGRES, ROOT, compile_tree, fresh_database, machine_speed

PAGES = {
    "/": b'<html><title>home</title><a href="/a">a</a> <a href="/b">b</a></html>',
    "/a": b"<html><title>a</title></html>",
    "/b": b"<html><title>b</title></html>",
}
STEP = re.compile(r"crawl start-up: (.+?) at (\d+\.\d+)(?:, (\d+\.\d+) s CPU)?")
IMPORT = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)")
# A worker's log line: its local time, then what happened (Celery's own INFO lines).
WORKER_EVENTS = {"worker ready": " ready.", "first message received": "] received",
                 "first task acknowledged": "] succeeded"}  # fmt: skip
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
REDIS_READY = re.compile(r" (\d\d \w{3} \d{4} \d\d:\d\d:\d\d\.\d{3}) \* .*ready to accept")


class Site(ThreadingHTTPServer):
    """The local site; ``first`` is when the first request arrived since ``expect``, with the
    CPU the watched process tree had spent by then."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.watched: psutil.Process | None = None
        self.first: tuple[float, float, float] | None = None
        self.page: float | None = None  # the first request of a page (not robots.txt)

    def expect(self, process: psutil.Process) -> None:
        with self.lock:
            self.watched, self.first, self.page = process, None, None

    def arrived(self, path: str) -> None:
        now = time.time()
        with self.lock:
            if self.watched is None:
                return
            if self.page is None and path != "/robots.txt":
                self.page = now
            if self.first is None:
                own, tree = cpu_of(self.watched)
                self.first = (now, own, tree)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.arrived(self.path)
        body = PAGES.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "text/html" if body is not None else "text/plain")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


def cpu_of(process: psutil.Process) -> tuple[float, float]:
    """CPU seconds of ``process`` itself, and of it with its live and reaped descendants."""
    try:
        t = process.cpu_times()
        own = t.user + t.system
        tree = own + t.children_user + t.children_system
        for child in process.children(recursive=True):
            try:
                c = child.cpu_times()
                tree += c.user + c.system
            except psutil.Error:
                continue
        return own, tree
    except psutil.Error:
        return float("nan"), float("nan")


def first_page_stored(env: dict) -> float:
    """Epoch of the first page row of the latest job in the database of the crawl's ``env``."""
    query = ("SELECT min(fetched_at) FROM web_page"
             " WHERE job_id = (SELECT max(id) FROM web_crawljob)")  # fmt: skip
    if env.get("DATABASE_URL"):
        with psycopg.connect(env["DATABASE_URL"]) as conn:
            return conn.execute(query).fetchone()[0].timestamp()
    with sqlite3.connect(Path(env["CRAWL_DATA_DIR"]) / "crawl.sqlite3") as conn:
        (stamp,) = conn.execute(query).fetchone()  # Django's naive UTC
    return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()


def service_events(data_dir: Path) -> list[tuple[str, float]]:
    """When the private redis-server was last ready, and the earliest of each of the workers'
    ``WORKER_EVENTS``, from their logs in ``data_dir`` (the latest job's)."""
    events: list[tuple[str, float]] = []
    redis_log = data_dir / "redis.log"
    if redis_log.exists() and (ready := REDIS_READY.findall(redis_log.read_text())):
        at = datetime.strptime(ready[-1], "%d %b %Y %H:%M:%S.%f").timestamp()
        events.append(("redis-server ready", at))
    logs = max((data_dir / "logs").glob("job*"), key=lambda d: d.stat().st_mtime, default=None)
    for name, marker in WORKER_EVENTS.items():
        times = [
            time.mktime(time.strptime(m[1], "%Y-%m-%d %H:%M:%S")) + int(m[2]) / 1000
            for log in (logs.glob("worker*.log") if logs else ())
            for line in log.read_text(errors="replace").splitlines()
            if marker in line and (m := LOG_TIME.match(line))
        ]
        if times:
            events.append((name, min(times)))
    return events


def run_once(tree: Path, env: dict, site: Site, debug: bool = False,
             importtime: bool = False) -> dict:  # fmt: skip
    """One crawl; its figures (seconds from its start) and, with ``debug``, its steps."""
    if debug:
        env = {**env, "LOG_LEVEL": "DEBUG"}
    url = f"http://127.0.0.1:{site.server_address[1]}/"
    python = [sys.executable, *(["-X", "importtime"] if importtime else [])]
    argv = [*python, "manage.py", "crawl", url, "--max-pages", "2"]
    started = time.time()
    proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    site.expect(psutil.Process(proc.pid))
    stderr_lines: list[str] = []
    reader = threading.Thread(target=lambda: stderr_lines.extend(proc.stderr), daemon=True)
    reader.start()
    _, status, usage = os.wait4(proc.pid, 0)
    ended = time.time()
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    if proc.returncode != 0:
        sys.exit(f"the crawl in {tree} failed ({proc.returncode}):\n{''.join(stderr_lines)}")
    first = site.first or (float("nan"),) * 3
    stored = first_page_stored(env) - started
    steps = [(m[1], float(m[2]) - started, m[3]) for line in stderr_lines
             if (m := STEP.search(line))]  # fmt: skip
    if debug:
        events = [(name, at - started, None) for name, at in service_events(
            Path(env["CRAWL_DATA_DIR"]))]  # fmt: skip
        events += [("first request (robots.txt)", first[0] - started, None),
                   ("first page requested", (site.page or float("nan")) - started, None),
                   ("first page stored", stored, None)]  # fmt: skip
        steps = sorted(steps + events, key=lambda s: s[1])
    return {
        "first": first[0] - started,
        "stored": stored,
        "exit": ended - started,
        "stderr": stderr_lines,
        "cpu_first": first[1],
        "tree_first": first[2],
        "tree_exit": usage.ru_utime + usage.ru_stime,
        "steps": steps,
    }


def environments(args: argparse.Namespace, scratch: Path) -> dict[str, callable]:
    """For each mode, a function giving the environment of the next crawl in that mode."""
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    base["CRAWL_ALLOWED_NETWORKS"] = "127.0.0.0/8"
    counter = iter(range(1_000_000))

    def fresh() -> dict:
        return {**base, "CRAWL_DATA_DIR": str(scratch / f"fresh{next(counter)}")}

    migrated_dir = str(scratch / "migrated")
    database = fresh_database(args.postgres, args.database)
    durable = {**base, "DATABASE_URL": database, "REDIS_URL": args.redis,
               "CRAWL_DATA_DIR": str(scratch / "durable")}  # fmt: skip
    return {
        "fresh": fresh,
        "migrated": lambda: {**base, "CRAWL_DATA_DIR": migrated_dir},
        "postgres": lambda: dict(durable),
    }


def imports_by_step(stderr_lines: list[str]) -> None:
    """Print the seconds ``-X importtime`` gave the imports of each start-up step (those logged
    before the step's line), and the top-level packages of the imports before the command
    ran."""
    seconds: dict[str, float] = {}
    own: collections.Counter = collections.Counter()
    pending, packages = 0.0, collections.Counter()
    for line in stderr_lines:
        if m := STEP.search(line):
            seconds[m[1]] = pending
            if not own:
                own = collections.Counter(packages)
            pending = 0.0
        elif m := IMPORT.match(line):
            if not m[3]:  # a top-level import: its cumulative time counts every nested one
                pending += int(m[2]) / 1e6
            packages[m[4].split(".")[0]] += int(m[1]) / 1e6
    for name, total in seconds.items():
        if total:
            print(f"  imports up to {name}: {total:.3f} s")
    top = ", ".join(f"{name} {secs:.3f}" for name, secs in own.most_common(12))
    print(f"  imports before the command ran, by package (own time, s): {top}")


def interpreter_start(rounds: int = 5) -> float:
    """Median wall seconds of ``python -c pass`` with this virtualenv's site."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def report(label: str, runs: list[dict]) -> None:
    def fig(key: str) -> str:
        values = [r[key] for r in runs]
        return f"{statistics.median(values):6.3f} / {min(values):6.3f}"

    stored = [r["stored"] for r in runs]
    print(f"{label:<22}{fig('first'):>18}{fig('stored'):>18}{fig('exit'):>18}"
          f"{fig('cpu_first'):>18}{fig('tree_first'):>18}{fig('tree_exit'):>18}"
          f"  (first page stored: {min(stored):.3f}-{max(stored):.3f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--modes", default="fresh,migrated,postgres")
    parser.add_argument("--tree", type=Path, default=None, help="another checkout to compare")
    parser.add_argument("--postgres", default=POSTGRES)
    parser.add_argument("--database", default="firstrequest", help="made afresh")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    args = parser.parse_args()
    modes = args.modes.split(",")
    trees = [ROOT] + ([args.tree.resolve()] if args.tree else [])
    for tree in trees[1:]:
        compile_tree(tree)
    print(machine_speed())
    print(f"load average before: {load()}")
    site = Site()
    threading.Thread(target=site.serve_forever, daemon=True).start()
    scratch = Path(tempfile.mkdtemp(prefix="first-request-"))
    results: dict[tuple[str, Path], list[dict]] = {}
    try:
        envs = environments(args, scratch)
        for tree in trees:  # warm-up: each tree's bytecode, the migrated dir and database
            run_once(tree, envs["migrated"](), site)
            if "postgres" in modes:
                redis.Redis.from_url(args.redis).flushdb()
                env = envs["postgres"]()
                subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=tree,
                               env=env, check=True)  # fmt: skip
                run_once(tree, env, site)
        for n in range(args.rounds):
            order = trees if n % 2 == 0 else trees[::-1]
            for mode in modes:
                for tree in order:
                    results.setdefault((mode, tree), []).append(run_once(tree, envs[mode](), site))
        print(f"load average after: {load()}")
        print(f"\n{args.rounds} rounds; seconds, median / min")
        print(f"{'mode':<22}{'first request':>18}{'first page stored':>18}{'exit':>18}"
              f"{'CPU command':>18}{'CPU all, first':>18}{'CPU all, exit':>18}")  # fmt: skip
        for (mode, tree), runs in results.items():
            report(f"{mode} {'' if tree == ROOT else '(' + tree.name + ')'}", runs)
        for mode in modes:
            for tree in trees:
                steps = run_once(tree, envs[mode](), site, debug=True)
                if steps["steps"]:
                    where = "" if tree == ROOT else tree.name
                    print(f"\nsteps, {mode} {where} (one run at LOG_LEVEL=DEBUG; "
                          f"first request at {steps['first']:.3f} s):")  # fmt: skip
                    for name, at, cpu in steps["steps"]:
                        print(f"  {at:6.3f} s  {name}" + (f" (command CPU {cpu} s)" if cpu else ""))
        traced = run_once(ROOT, envs[modes[0]](), site, debug=True, importtime=True)
        print(f"\n{modes[0]}, one run under -X importtime (first page stored at "
              f"{traced['stored']:.3f} s):")  # fmt: skip
        imports_by_step(traced["stderr"])
        print(f"  python -c pass: {interpreter_start():.3f} s (median of 5)")
    finally:
        site.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
