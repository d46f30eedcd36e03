"""Helpers shared by the benchmark scripts: fresh databases, ports, CPU and memory of processes."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = "postgres://postgres@127.0.0.1:5432/postgres"


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


def service_cpu(names: tuple[str, ...]) -> float:
    """CPU seconds of the named servers, exited children (PostgreSQL backends) included."""
    total = 0.0
    for proc in psutil.process_iter(["name", "ppid"]):
        try:
            if proc.info["name"] not in names:
                continue
            parent = psutil.Process(proc.info["ppid"]).name() if proc.info["ppid"] else ""
            if parent in names:
                continue  # a backend: counted in its postmaster's children times
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
            for child in proc.children(recursive=True):
                ct = child.cpu_times()
                total += ct.user + ct.system
        except psutil.Error:
            continue
    return total


class Sampler(threading.Thread):
    """Peak RSS of a process tree, and the last CPU time seen of each of its processes."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak = 0
        self.cpu: dict[int, tuple[str, float]] = {}
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
                    role = "worker" if "worker" in p.cmdline() else "command"
            except psutil.Error:
                continue
            total += rss
            self.rss[p.pid] = rss
            self.cpu[p.pid] = (role, t.user + t.system)
        self.peak = max(self.peak, total)

    def run(self) -> None:
        while not self.done.wait(self.interval):
            self.sample()

    def by_role(self) -> dict[str, float]:
        roles: dict[str, float] = {}
        for role, seconds in self.cpu.values():
            roles[role] = roles.get(role, 0.0) + seconds
        return roles
