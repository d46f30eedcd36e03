"""Every crawl knob in one place, with its unit and meaning.

Read a value with :func:`setting`. The value in force is, in order of precedence: the job's
own ``settings`` JSON (per-job override), the environment variable ``CRAWL_<NAME>``, and the
default below. Environment values are parsed to the default's type.

The time budgets nest, and ``tests/test_config.py`` checks that they do:
``FETCH_DEADLINE_S < TASK_SOFT_TIME_LIMIT_S < TASK_TIME_LIMIT_S < LEASE_S < VISIBILITY_TIMEOUT_S``.
A page that runs over its fetch deadline fails on its own; a task that hangs past its time
limit is killed before its lease expires; a lease always expires before the broker would hand
the same message to another worker.
"""

from __future__ import annotations

import os
from typing import Any

# Fetching
FETCH_CONNECT_TIMEOUT_S = 10.0  # TCP + TLS connect, seconds
FETCH_READ_TIMEOUT_S = 20.0  # longest silence while reading, seconds
FETCH_DEADLINE_S = 60.0  # whole fetch, all redirects included, seconds
FETCH_MAX_BYTES = 10 << 20  # decoded bodies above this are cut off, stored and marked truncated
FETCH_MAX_REDIRECTS = 10  # hops followed before the URL fails as too_many_redirects
USER_AGENT = "crawlplatform/1.0 (+https://github.com/crawlplatform)"  # default job user agent

# Retries (transient outcomes: timeouts, resets, 5xx, 429)
RETRY_MAX_ATTEMPTS = 4  # total attempts, not retries
RETRY_BACKOFF_BASE_S = 2.0  # first wait; doubles each attempt, with full jitter
RETRY_BACKOFF_MAX_S = 600.0  # cap on one wait, and on an honoured Retry-After, seconds

# Scope
MAX_DEPTH = 5  # links followed from a seed; seeds are depth 0
MAX_URL_LENGTH = 2048  # longer URLs are not added to the frontier
LINK_CACHE_SIZE = 20_000  # entries per link cache, per worker process and job (a few MB each)
SEED_CHUNK = 50_000  # seed-file lines canonicalized and committed together (manage.py seed)

# Politeness (per host, across every worker; see tasks/fetch/politeness.py and robots.py)
HOST_DELAY_S = 0.0  # minimum gap between requests to one host (the CLI's --delay), seconds
HOST_MAX_WAIT_S = 2.0  # a worker waits this long for its host's slot at most; else re-queued
THROTTLE_MAX_DELAY_S = 60.0  # cap on a host's adaptive delay (429, 503, timeouts double it)
THROTTLE_DECAY = 0.9  # each success multiplies the adaptive delay by this, down to the floor
THROTTLE_SLOW_LATENCY_S = 10.0  # a response slower than this counts as "slow down"
ROBOTS_TTL_S = 86400  # robots.txt is fetched again after this, seconds
ROBOTS_ERROR_TTL_S = 300  # after a 5xx/unreachable robots.txt the host waits this long
ROBOTS_MAX_BYTES = 500 << 10  # robots.txt beyond this is ignored (RFC 9309 asks for 500 KiB)

# Scheduler, leases and the broker
SCHEDULER_TICK_S = 0.05  # longest sleep between two scheduler passes, seconds (when idle)
SCHEDULER_BATCH = 500  # URLs released per job per pass at most
READY_PER_JOB = 256  # messages of one job waiting in the broker at most
READY_MIN = 8  # messages of one job the broker may hold whatever its consumption rate
DISPATCH_LOOKAHEAD_S = 0.03  # ready messages per job = its consumption rate x this, seconds
SCHEDULER_HEARTBEAT_FILE = "/tmp/crawl-scheduler-heartbeat"  # touched on every pass
SCHEDULER_HORIZON_S = 2.0  # a polite host gets URLs released this far ahead of its slots
LEASE_S = 150.0  # a worker's claim on a URL; expired leases are swept back to the queue
SWEEP_INTERVAL_S = 5.0  # how often expired leases and lost messages are looked for, seconds
TASK_SOFT_TIME_LIMIT_S = 90.0  # a page still running after this raises SoftTimeLimitExceeded
TASK_TIME_LIMIT_S = 120.0  # hard kill of a stuck task (prefork pool)
VISIBILITY_TIMEOUT_S = 300  # an unacked message goes back to the queue after this, seconds
UNACKED_RESTORE_INTERVAL_S = 10  # how often a worker looks for unacked messages to restore

# Worker process
WORKER_MAX_RSS_MB = 1024  # a worker above this resident memory restarts itself between tasks
MEMORY_CHECK_EVERY = 50  # tasks between two memory checks
HEARTBEAT_FILE = "/tmp/crawl-worker-heartbeat"  # touched by the worker's event loop
READY_FILE = "/tmp/crawl-worker-ready"  # exists while the worker consumes
HEARTBEAT_INTERVAL_S = 5.0  # how often the heartbeat is written
HEARTBEAT_STALE_S = 30.0  # an older heartbeat fails the liveness probe
WORKER_METRICS_PORT = 0  # a worker serves Prometheus metrics on this port (0: off)
DB_RETRY_S = 5  # a task that cannot reach the database is retried after this (a countdown)

# Checkpoints
CHECKPOINT_INTERVAL_S = 60.0  # periodic checkpoint of every running job, seconds


def _parse(raw: str, default: Any) -> Any:
    if isinstance(default, bool):
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    return raw


def setting(name: str, job: Any = None) -> Any:
    """The value of crawl setting ``name``: job override, then ``CRAWL_<NAME>``, then default."""
    default = globals()[name]
    overrides = getattr(job, "settings", None) or {}
    if name in overrides:
        return type(default)(overrides[name])
    raw = os.environ.get(f"CRAWL_{name}")
    return default if raw is None else _parse(raw, default)


def names() -> list[str]:
    """All setting names, for validation of per-job overrides."""
    return [n for n in globals() if n.isupper()]
