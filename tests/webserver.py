"""The web process as production runs it: gunicorn with the project's config, DEBUG off,
static files from WhiteNoise, on a free loopback port, against the test database and Redis."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.chaos import free_port

ROOT = Path(__file__).resolve().parent.parent


class WebServer:
    """``with WebServer(env) as web: requests.get(web.url + "/livez")``."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            **env,
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(48),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "GUNICORN_BIND": f"127.0.0.1:{self.port}",
            "GUNICORN_WORKERS": "1",
            "GUNICORN_THREADS": "8",
        }
        self.log = log
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> WebServer:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-c", "crawlplatform/gunicorn_config.py",
                 "crawlplatform.wsgi"],
                cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited: {self.log.read_text()[-2000:]}")
            try:
                if requests.get(self.url + "/livez", timeout=1).ok:
                    return self
            except (requests.ConnectionError, requests.Timeout):  # still booting, or busy
                time.sleep(0.2)
        self.__exit__()  # no ``with`` block ran: nothing else would stop it
        raise RuntimeError(f"gunicorn did not answer in 30 s: {self.log.read_text()[-2000:]}")

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
