"""Time from ``manage.py crawl``'s start to its first request, and to its exit.

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
to the site's first request and to the command's exit; CPU seconds of the command process
up to the first request, and of everything it started (workers, private redis-server) up to
the first request and up to its exit. The command logs its start-up steps at DEBUG
(``crawl start-up: <step> at <epoch>, <CPU> s CPU``): one extra run per mode with
``LOG_LEVEL=DEBUG`` prints when each step ended, after the timed rounds (which run at the
default level). The load average before and after is printed too: figures from a loaded
machine compare only with each other.
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
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import redis
from common import POSTGRES, ROOT, compile_tree, fresh_database, machine_speed

PAGES = {
    "/": b'<html><title>home</title><a href="/a">a</a> <a href="/b">b</a></html>',
    "/a": b"<html><title>a</title></html>",
    "/b": b"<html><title>b</title></html>",
}
STEP = re.compile(r"crawl start-up: (.+?) at (\d+\.\d+)(?:, (\d+\.\d+) s CPU)?")


class Site(ThreadingHTTPServer):
    """The local site; ``first`` is when the first request arrived since ``expect``, with the
    CPU the watched process tree had spent by then."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.watched: psutil.Process | None = None
        self.first: tuple[float, float, float] | None = None

    def expect(self, process: psutil.Process) -> None:
        with self.lock:
            self.watched, self.first = process, None

    def arrived(self) -> None:
        now = time.time()
        with self.lock:
            if self.first is not None or self.watched is None:
                return
            own, tree = cpu_of(self.watched)
            self.first = (now, own, tree)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.arrived()
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


def run_once(tree: Path, env: dict, site: Site, debug: bool = False) -> dict:
    """One crawl; its figures (seconds from its start) and, with ``debug``, its steps."""
    if debug:
        env = {**env, "LOG_LEVEL": "DEBUG"}
    url = f"http://127.0.0.1:{site.server_address[1]}/"
    argv = [sys.executable, "manage.py", "crawl", url, "--max-pages", "2"]
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
    steps = [(m[1], float(m[2]) - started, m[3]) for line in stderr_lines
             if (m := STEP.search(line))]  # fmt: skip
    return {
        "first": first[0] - started,
        "exit": ended - started,
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


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def report(label: str, runs: list[dict]) -> None:
    def fig(key: str) -> str:
        values = [r[key] for r in runs]
        return f"{statistics.median(values):6.3f} / {min(values):6.3f}"

    print(f"{label:<28}{fig('first'):>18}{fig('exit'):>18}{fig('cpu_first'):>18}"
          f"{fig('tree_first'):>18}{fig('tree_exit'):>18}")  # fmt: skip


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
        print(f"{'mode':<28}{'first request':>18}{'exit':>18}{'CPU command':>18}"
              f"{'CPU all, first':>18}{'CPU all, exit':>18}")  # fmt: skip
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
    finally:
        site.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
