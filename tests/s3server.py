"""A real S3-compatible server (moto's server mode) on 127.0.0.1, for the body store's and
the feeds' tests: ``with S3Server("bodies") as s3: s3.client.get_object(...)``."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Self

VENV_BIN = Path(sys.executable).parent
KEYS = {"aws_access_key_id": "test", "aws_secret_access_key": "test"}  # moto takes any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """moto_server on a free port, with ``buckets`` made, while the ``with`` block runs."""

    def __init__(self, *buckets: str) -> None:
        self.buckets = buckets
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.client: Any = None

    def __enter__(self) -> Self:
        import boto3

        self.proc = subprocess.Popen(
            [str(VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.__exit__()
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                   **KEYS)  # fmt: skip
        for bucket in self.buckets:
            self.client.create_bucket(Bucket=bucket)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)

    def get(self, bucket: str, key: str) -> bytes:
        return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
