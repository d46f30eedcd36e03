"""Settings for the test suite: the project's own, with a private data directory.

``DATABASE_URL`` and ``REDIS_URL`` come from the environment as everywhere (CI points them at
the machine's PostgreSQL and Redis); without them the suite runs on the embedded defaults.
"""

import os
import tempfile

os.environ.setdefault("CRAWL_ALLOWED_NETWORKS", "127.0.0.0/8")  # the test sites are local
if os.geteuid() == 0:  # Chromium's sandbox does not run as root (CI runs as root)
    os.environ.setdefault("CRAWL_RENDER_NO_SANDBOX", "true")
os.environ.setdefault(
    "CRAWL_DATA_DIR", os.path.join(tempfile.gettempdir(), f"crawlplatform-tests-{os.getuid()}")
)

from crawlplatform.settings import *  # noqa: E402,F403
