"""Settings for the test suite: the project's own, with a private data directory (one per
xdist worker).

``DATABASE_URL`` and ``REDIS_URL`` come from the environment as everywhere (CI points them at
the machine's PostgreSQL and Redis); without them the suite runs on the embedded defaults.
"""

import os
import re
import tempfile


def _shard(worker: str) -> None:
    """Under ``pytest -n N`` each of xdist's workers (``gw0``, ``gw1``, ...) runs apart from the
    others: its own data directory (and so its own embedded Redis and SQLite database) and, on
    a shared Redis, its own database counted down from the configured one; pytest-django gives
    each its own test database."""
    if not worker or os.environ.get("CRAWL_TESTS_SHARD") == worker:
        return  # not under xdist, or a process the worker started, which inherits its shard
    os.environ["CRAWL_TESTS_SHARD"] = worker
    index = int(worker.removeprefix("gw"))
    os.environ["CRAWL_DATA_DIR"] = f"{os.environ['CRAWL_DATA_DIR']}-{worker}"
    url = os.environ.get("REDIS_URL")
    if url:
        found = re.search(r"/(\d+)$", url)
        db = (int(found.group(1)) if found else 0) - index
        os.environ["REDIS_URL"] = f"{url[: found.start()] if found else url.rstrip('/')}/{db % 16}"


os.environ.setdefault("CRAWL_ALLOWED_NETWORKS", "127.0.0.0/8")  # the test sites are local
if os.geteuid() == 0:  # Chromium's sandbox does not run as root (CI runs as root)
    os.environ.setdefault("CRAWL_RENDER_NO_SANDBOX", "true")
os.environ.setdefault(
    "CRAWL_DATA_DIR", os.path.join(tempfile.gettempdir(), f"crawlplatform-tests-{os.getuid()}")
)
_shard(os.environ.get("PYTEST_XDIST_WORKER", ""))

from crawlplatform.settings import *  # noqa: E402,F403
