"""Start, watch and stop Celery worker processes (for ``crawl``, tests and benchmarks).

Each worker is ``celery -A crawlplatform worker`` in its own session, so a Ctrl-C in the
terminal reaches only the command that supervises them; that command then asks them for a
warm shutdown (SIGTERM: stop consuming, finish in-flight pages, exit 0). If the supervisor
dies without asking (SIGKILL, a crash), the kernel sends them SIGTERM all the same
(``crawlplatform/orphans.py``): no worker outlives its supervisor.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings

from crawlplatform.orphans import guarded

log = logging.getLogger(__name__)

STARTUP_GRACE_S = 15.0  # a worker that exits sooner than this after its start "died at start"
MAX_QUICK_DEATHS = 3  # in a row, before the pool gives up


class WorkerStartupError(RuntimeError):
    """Workers die as soon as they start (a missing module, a wrong setting, ...)."""


def worker_command(name: str, concurrency: int, pool: str, queue: str = "") -> list[str]:
    """A worker's command line; with no ``queue`` it consumes its channel's queue (the
    ``CRAWL_CHANNEL`` of its environment)."""
    return [
        sys.executable, "-m", "celery", "-A", "crawlplatform", "worker",
        "--pool", pool,
        "--concurrency", str(concurrency),
        *(["--queues", queue] if queue else []),
        "--hostname", f"{name}@%h",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
        "--loglevel", "INFO",
    ]  # fmt: skip


class WorkerPool:
    """``processes`` worker processes with ``concurrency`` slots each."""

    def __init__(
        self,
        processes: int,
        concurrency: int,
        pool: str = "threads",
        env: dict[str, str] | None = None,
        log_dir: Path | None = None,
        queue: str = "",
        prefix: str = "worker",
    ) -> None:
        self.processes = processes
        self.concurrency = concurrency
        self.pool = pool
        self.queue = queue  # default: the crawl queue
        self.prefix = prefix
        self.env = {**os.environ, **(env or {})}
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.restarts = 0
        self.quick_deaths = 0
        self.started: dict[str, float] = {}
        self._serial = 0

    def spawn(self) -> str:
        self._serial += 1
        name = f"{self.prefix}{self._serial}"
        log = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = (self.log_dir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(  # noqa: S603 (our own command, fixed arguments)
            guarded(worker_command(name, self.concurrency, self.pool, self.queue)),
            cwd=settings.BASE_DIR,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT if log else None,
            start_new_session=True,
        )
        self.started[name] = time.monotonic()
        if log is not None:
            log.close()  # the child has its own descriptor
        return name

    def start(self) -> None:
        for _ in range(self.processes):
            self.spawn()

    def replace_dead(self) -> list[str]:
        """Restart workers that exited on their own; returns the names of those that died.

        Raises WorkerStartupError when workers keep dying right after they start: restarting
        them again would only hide a configuration error.
        """
        dead = [n for n, p in self.procs.items() if p.poll() is not None]
        for name in dead:
            code = self.procs.pop(name).returncode
            lived = time.monotonic() - self.started.pop(name)
            # A worker that chose to stop (exit 0: memory ceiling, warm shutdown) is no failure.
            quick = lived < STARTUP_GRACE_S and code != 0
            self.quick_deaths = self.quick_deaths + 1 if quick else 0
            if self.quick_deaths >= MAX_QUICK_DEATHS:
                where = f"see {self.log_dir / (name + '.log')}" if self.log_dir else "see above"
                raise WorkerStartupError(
                    f"workers exit right after starting (exit {code}, {self.quick_deaths} "
                    f"times in a row); {where}"
                )
            log.warning("%s exited with %s; starting a replacement", name, code)
            self.restarts += 1
            self.spawn()
        return dead

    def signal(self, name: str, sig: int) -> None:
        self.procs[name].send_signal(sig)

    def stop(self, grace: float = 60.0) -> dict[str, int]:
        """Warm shutdown of every worker; SIGKILL after ``grace`` seconds. Returns exit codes."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        codes = {}
        for name, p in self.procs.items():
            try:
                codes[name] = p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                codes[name] = p.wait()
        self.procs.clear()
        self.started.clear()
        return codes
