"""Helpers shared by the benchmark scripts: fresh databases, ports, CPU and memory of processes."""

from __future__ import annotations

import compileall
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import timeit
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = "postgres://postgres@127.0.0.1:5432/postgres"
# The benchmark sites live on loopback, which the address guard refuses unless allowed.
os.environ.setdefault("CRAWL_ALLOWED_NETWORKS", "127.0.0.0/8")


def compile_tree(root: Path) -> None:
    """The platform's modules in checkout ``root`` compiled to bytecode, as an image has them
    (the Dockerfile compiles them) and as a checkout has them after its first run; Scrapy's
    come compiled from their wheels. Where PYTHONDONTWRITEBYTECODE is set, every process of
    every measured crawl would otherwise compile them from source again: about 0.3 s of CPU
    per crawl."""
    for package in ("crawlplatform", "tasks", "web"):
        compileall.compile_dir(root / package, quiet=1)


compile_tree(ROOT)


PG_BIN = Path("/usr/lib/postgresql/15/bin")


@contextlib.contextmanager
def private_servers() -> Iterator[tuple[str, str]]:
    """A PostgreSQL cluster and a redis-server of the run's own, on free ports, configured as
    the machine's (no tuning, ``synchronous_commit=on``; Redis without persistence): on a
    shared machine, the crawl's PostgreSQL and Redis CPU is then theirs alone, without other
    people's databases on the same server. Yields (the cluster's admin URL, the Redis URL)."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-servers-"))
    workdir.chmod(0o777)
    data, pg_port, redis_port = workdir / "pgdata", free_port(), free_port()
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def as_postgres(*cmd: str) -> None:
        subprocess.run([*prefix, *cmd], check=True, capture_output=True)

    as_postgres(str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    options = f"-p {pg_port} -k /tmp -c listen_addresses=127.0.0.1"
    as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(workdir / "postgres.log"),
                "-o", options, "-w", "start")  # fmt: skip
    redis = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(100):
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", redis_port), timeout=1).close()
                break
            time.sleep(0.05)
        yield (f"postgres://postgres@127.0.0.1:{pg_port}/postgres",
               f"redis://127.0.0.1:{redis_port}/0")  # fmt: skip
    finally:
        redis.terminate()
        redis.wait()
        with contextlib.suppress(subprocess.CalledProcessError):
            as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        subprocess.run(["rm", "-rf", str(workdir)], check=False)


def is_worker(process: psutil.Process) -> bool:
    """A crawl worker: started (``celery ... worker``) or forked by the crawl command (named
    ``crawl-worker1``; its command line is the command's)."""
    return process.name().startswith("crawl-worker") or "worker" in process.cmdline()


def machine_speed() -> str:
    """A fixed pure-Python workload timed on this machine: figures from different machines, or
    from different hours of a shared one, compare only alongside it."""
    best = min(timeit.repeat("sum(range(1_000_000))", number=20, repeat=5)) / 20
    return f"machine: {os.cpu_count()} cores, sum(range(10**6)) in {best * 1000:.1f} ms"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_database(admin_url: str, name: str) -> str:
    """Drop and create database ``name`` on the server of ``admin_url``; returns its URL."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return admin_url.rsplit("/", 1)[0] + "/" + name


def migrate(env: dict) -> None:
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)


def listener(url: str) -> int | None:
    """The process that listens on the port of ``url`` (a PostgreSQL or Redis URL), or None
    when none is found (the port's owner cannot be read)."""
    port = urllib.parse.urlsplit(url).port
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return None
    return next((c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr.port == port
                 and c.pid), None)  # fmt: skip


def service_cpu(names: tuple[str, ...], pids: tuple[int, ...] = (), kernel: bool = False) -> float:
    """CPU seconds of the named servers, exited children (PostgreSQL backends) included;
    with ``pids``, only the servers of those processes (on a shared machine, other people's
    servers of the same name, and their work, are not the crawl's); ``kernel``: only the time
    spent in the kernel."""
    total = 0.0
    for proc in psutil.process_iter(["name", "ppid"]):
        try:
            if proc.info["name"] not in names or (pids and proc.pid not in pids):
                continue
            parent = psutil.Process(proc.info["ppid"]).name() if proc.info["ppid"] else ""
            if parent in names:
                continue  # a backend: counted in its postmaster's children times
            t = proc.cpu_times()
            total += t.system + t.children_system
            if not kernel:
                total += t.user + t.children_user
            for child in proc.children(recursive=True):
                ct = child.cpu_times()
                total += ct.system if kernel else ct.user + ct.system
        except psutil.Error:
            continue
    return total


class Sampler(threading.Thread):
    """Peak RSS of a process tree, and the last CPU time seen of each of its processes (all of
    it, and the kernel's part)."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak = 0
        self.cpu: dict[int, tuple[str, float, float]] = {}
        self.rss: dict[int, int] = {}  # the last RSS seen of each process
        self.done = threading.Event()

    def sample(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        total = 0
        for p in procs:
            try:
                with p.oneshot():
                    rss = p.memory_info().rss
                    t = p.cpu_times()
                    role = ("worker" if is_worker(p) else
                            "redis" if p.name() == "redis-server" else "command")  # fmt: skip
            except psutil.Error:
                continue
            total += rss
            self.rss[p.pid] = rss
            self.cpu[p.pid] = (role, t.user + t.system, t.system)
        self.peak = max(self.peak, total)

    def run(self) -> None:
        while not self.done.wait(self.interval):
            self.sample()

    def by_role(self, kernel: bool = False) -> dict[str, float]:
        """CPU seconds by role; ``kernel``: only the time spent in the kernel."""
        roles: dict[str, float] = {}
        for role, seconds, system in self.cpu.values():
            roles[role] = roles.get(role, 0.0) + (system if kernel else seconds)
        return roles


def start_workers(
    processes: int,
    concurrency: int,
    env: dict,
    metrics_ports: list[int] | None = None,
    pool: str = "threads",
) -> list[subprocess.Popen]:
    """Celery crawl workers as a deployment runs them; worker i serves metrics on
    ``metrics_ports[i]`` (none if not given)."""
    procs = []
    for i in range(processes):
        worker_env = dict(env)
        if metrics_ports:
            worker_env["CRAWL_WORKER_METRICS_PORT"] = str(metrics_ports[i])
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "crawlplatform", "worker", "--pool", pool,
             "--concurrency", str(concurrency), "--queues", "crawl", "--hostname", f"bench{i}@%h",
             "--without-gossip", "--without-mingle", "--without-heartbeat",
             "--loglevel", "WARNING"],
            cwd=ROOT, env=worker_env, stdin=subprocess.DEVNULL,
        ))  # fmt: skip
    return procs


def stop(procs: list[subprocess.Popen], timeout: float = 30) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()


def django_shell(env: dict, code: str) -> str:
    """Run ``code`` in ``manage.py shell`` with ``env``; returns what it printed."""
    return subprocess.run(
        [sys.executable, "manage.py", "shell", "-v0", "-c", code],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def histogram(urls: list[str], name: str) -> tuple[list[tuple[float, float]], float, float]:
    """Cumulative buckets (upper bound, count), sum and count of a histogram, over processes."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    buckets: dict[float, float] = {}
    total = count = 0.0
    for url in urls:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        for family in text_string_to_metric_families(text):
            if family.name != name:
                continue
            for sample in family.samples:
                if sample.name == name + "_bucket":
                    bound = float(sample.labels["le"])
                    buckets[bound] = buckets.get(bound, 0.0) + sample.value
                elif sample.name == name + "_sum":
                    total += sample.value
                elif sample.name == name + "_count":
                    count += sample.value
    return sorted(buckets.items()), total, count


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """Linear interpolation inside the bucket holding quantile ``q`` (as Prometheus does)."""
    count = buckets[-1][1]
    rank = q * count
    lower, below = 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative >= rank:
            if bound == float("inf"):
                return lower
            inside = cumulative - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, cumulative
    return lower
