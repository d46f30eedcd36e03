"""Start, watch and stop Celery worker processes (for ``crawl``, tests and benchmarks).

A worker is a new interpreter running ``celery -A crawlplatform worker``, or, for a pool
asked to ``fork`` (the crawl command's), a fork of the supervising process, which has already
imported Django, Celery and the crawl code: about 0.8 s of CPU saved per worker. A fork is
made only while the supervisor runs a single thread (the thread of the spider's event loop,
which ran ``start()``, stopped for it) and the worker's environment is its own (otherwise the
worker starts as a new interpreter), with no database connection open and Celery's
connection pools dropped in the child.

Each worker is ``celery -A crawlplatform worker`` in its own session, so a Ctrl-C in the
terminal reaches only the command that supervises them; that command then asks them for a
warm shutdown (SIGTERM: stop consuming, finish in-flight pages, exit 0). If the supervisor
dies without asking (SIGKILL, a crash), the kernel sends them SIGTERM all the same
(``crawlplatform/orphans.py``): no worker outlives its supervisor.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import logging
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import connections

from crawlplatform import logs, orphans
from crawlplatform.orphans import guarded
from crawlplatform.spiders import loop
from tasks.defaults import setting

log = logging.getLogger(__name__)

PR_SET_NAME = 15  # prctl: the process's name (comm)


class WorkerStartupError(RuntimeError):
    """Workers die as soon as they start (a missing module, a wrong setting, ...)."""


def worker_options(name: str, concurrency: int, pool: str, queue: str, loglevel: str) -> dict:
    """A crawl worker's options, named as ``celery worker`` names them; with no ``queue`` (an
    empty one) it consumes its channel's queue (the ``CRAWL_CHANNEL`` of its environment)."""
    return {
        "pool": pool,
        "concurrency": concurrency,
        "queues": queue or None,
        "hostname": f"{name}@%h",
        "without_gossip": True,
        "without_mingle": True,
        "without_heartbeat": True,
        "loglevel": loglevel,
    }


def worker_command(name: str, concurrency: int, pool: str, queue: str, loglevel: str) -> list[str]:
    """A started worker's command line: ``celery -A crawlplatform worker`` with the options."""
    argv = [sys.executable, "-m", "celery", "-A", "crawlplatform", "worker"]
    for option, value in worker_options(name, concurrency, pool, queue, loglevel).items():
        if value is not None:
            argv.append("--" + option.replace("_", "-"))
            argv.extend([] if value is True else [str(value)])
    return argv


@functools.cache
def preload() -> bool:
    """Import, in the supervisor, what every forked worker would import after the fork: the
    tasks and the engine, and Celery's worker, consumer and pools. Imported once here, it is
    shared by all of them (copy-on-write) instead of being imported again in each. Done once
    however often it is called: the crawl command calls it while its redis-server starts,
    before the first fork needs it. False if they cannot be loaded (then each worker meets
    the error again, and dies at start)."""
    try:
        import celery.app.routes  # noqa: F401
        import celery.apps.worker  # noqa: F401
        import celery.events.receiver  # noqa: F401
        import celery.worker.consumer  # noqa: F401
        import kombu.pidbox  # noqa: F401 (and kombu.matcher, which reads every package's metadata)
        from celery import concurrency
        from celery.app.backends import by_name

        from crawlplatform.celery import app
        from tasks.content import spiders

        for name in ("threads", "prefork", "solo"):
            concurrency.get_implementation(name)
        app.loader.import_default_modules()  # the task modules (tasks.tasks, the engine)
        app.finalize(auto=True)
        spiders.published()  # for the heartbeat's list of spiders
        # Cached for the process's life: the result backends named in every package's
        # metadata, and the platform the worker's banner shows (``uname -p``, a subprocess).
        by_name(app.conf.result_backend, app.loader)
        platform.platform()
    except Exception:  # noqa: BLE001 (reported by the workers that die of it)
        log.warning("the workers' modules cannot be loaded", exc_info=True)
        return False
    return True


class Forked:
    """A worker forked from this process, watched like a ``subprocess.Popen``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


def _name_process(name: str) -> None:
    """The name ``top``, ``ps -o comm`` and ``psutil`` show for this process (its command
    line stays the supervisor's): ``crawl-worker1``."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, f"crawl-{name}"[:15].encode(), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux


def _end_when_orphaned(parent: int, grace: float) -> None:
    """Once ``parent`` (the supervisor) is gone, SIGKILL included, the kernel's SIGTERM has
    begun a warm stop; a stop that hangs (its broker, the supervisor's private redis-server,
    went with it, and closing the connection waits on it) ends ``grace`` seconds later."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        time.sleep(grace)
        os._exit(1)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def _run_forked(options: dict, log_path: Path | None, parent: int) -> None:
    """In the forked child: become a Celery worker with ``options`` (``worker_options``).

    The worker is built as ``celery worker`` builds it (``app.Worker``), without going through
    Celery's command line, which imports every subcommand and plugin (Flower's among them):
    about a quarter second of CPU per worker."""
    code = 1
    try:
        os.setsid()  # its own session, as a started worker: a terminal's Ctrl-C is not for it
        if not orphans.end_with(parent):
            os._exit(0)
        _end_when_orphaned(parent, setting("FETCH_DEADLINE_S") + 15)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        if log_path is not None:
            out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(out, 1)
            os.dup2(out, 2)
        logs.service(process=options["hostname"].split("@")[0])  # JSON: its own relay
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)  # the supervisor's handlers are not the worker's
        _name_process(options["hostname"].split("@")[0])
        from celery import concurrency
        from celery.utils.log import mlevel
        from celery.utils.nodenames import default_nodename, host_format

        from crawlplatform.celery import app

        app._after_fork()  # connection pools a parent may have filled are not ours
        given = dict(options)
        worker = app.Worker(
            hostname=host_format(default_nodename(given.pop("hostname"))),
            pool_cls=concurrency.get_implementation(given.pop("pool")),
            loglevel=mlevel(given.pop("loglevel")),
            **given,
        )
        worker.start()
        code = worker.exitcode
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 (reported in the worker's log, then the exit code)
        sys.excepthook(*sys.exc_info())  # a traceback, or in JSON a line (crawlplatform/logs.py)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code or 0)


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
        fork: bool = False,
    ) -> None:
        self.processes = processes
        self.concurrency = concurrency
        self.pool = pool
        self.queue = queue  # default: the crawl queue
        self.prefix = prefix
        self.env = {**os.environ, **(env or {})}
        # The workers log at the level their environment asks of every process (LOG_LEVEL):
        # Celery's lines per message (received, succeeded) are INFO, about 2% of a busy
        # worker's Python time that a crawl run with LOG_LEVEL=WARNING does not want.
        self.loglevel = self.env.get("LOG_LEVEL") or settings.LOGGING["root"]["level"]
        self.log_dir = log_dir
        self.fork = fork
        self.forks = 0  # workers started as forks of this process
        self.procs: dict[str, subprocess.Popen | Forked] = {}
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
        pause = loop.paused() if self.fork else contextlib.nullcontext()
        with pause:  # the spider's loop, which the crawl command's start() ran on
            forked = self._forked(name) if self._may_fork() else None
        if forked is not None:
            self.procs[name] = forked
            self.started[name] = time.monotonic()
            return name
        if self.log_dir is not None:
            log = (self.log_dir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(  # noqa: S603 (our own command, fixed arguments)
            guarded(worker_command(name, self.concurrency, self.pool, self.queue, self.loglevel)),
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

    def _may_fork(self) -> bool:
        """A fork inherits this process's settings and threads: only with the same
        environment (the embedded Redis's URL apart: the settings have it) and one thread."""
        if not self.fork or threading.active_count() > 1:
            return False
        differs = {k for k, v in self.env.items() if os.environ.get(k) != v}
        differs |= set(os.environ) - set(self.env)
        return differs <= {"REDIS_URL"} and self.env.get("REDIS_URL") in (
            None, os.environ.get("REDIS_URL"), settings.REDIS_URL,
        )  # fmt: skip

    def _forked(self, name: str) -> Forked:
        options = worker_options(name, self.concurrency, self.pool, self.queue, self.loglevel)
        preload()
        log_path = self.log_dir / f"{name}.log" if self.log_dir is not None else None
        connections.close_all()  # a child must not share, nor close, this process's sessions
        sys.stdout.flush()
        sys.stderr.flush()
        # What exists now (modules, settings, the app) lives as long as either process: frozen,
        # the child's full collections never walk it (nor write to its pages, which stay
        # shared), and neither does the collection that ends this process.
        gc.freeze()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            _run_forked(options, log_path, parent)
        self.forks += 1
        return Forked(pid)

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
            quick = lived < setting("WORKER_STARTUP_GRACE_S") and code != 0
            self.quick_deaths = self.quick_deaths + 1 if quick else 0
            if self.quick_deaths >= setting("WORKER_QUICK_DEATHS"):
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

    def stop(self, grace: float = 60.0, hurry: threading.Event | None = None) -> dict[str, int]:
        """Warm shutdown of every worker; SIGKILL after ``grace`` seconds, or as soon as
        ``hurry`` is set (a second Ctrl-C: their in-flight URLs come back through their
        leases). Returns exit codes."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        codes = {}
        for name, p in self.procs.items():
            while name not in codes:
                left = deadline - time.monotonic()
                try:
                    codes[name] = p.wait(timeout=max(0.1, min(left, 0.2)))
                except subprocess.TimeoutExpired:
                    if left <= 0.2 or (hurry is not None and hurry.is_set()):
                        os.killpg(p.pid, signal.SIGKILL)
                        codes[name] = p.wait()
        self.procs.clear()
        self.started.clear()
        return codes
