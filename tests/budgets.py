"""Crawl settings for tests and the chaos suite: short budgets so that retries, leases and
redelivery happen in seconds (the nesting of ``tasks/defaults.py`` still holds), and the
loopback network the test sites live on allowed past the address guard."""

import os

LOCAL = {
    "CRAWL_ALLOWED_NETWORKS": "127.0.0.0/8",
    # Chromium's sandbox does not run as root (CI runs as root); elsewhere it stays on.
    **({"CRAWL_RENDER_NO_SANDBOX": "true"} if os.geteuid() == 0 else {}),
}

FAST = {
    **LOCAL,
    "CRAWL_RETRY_BACKOFF_BASE_S": "0.05",
    "CRAWL_RETRY_MAX_ATTEMPTS": "3",
    "CRAWL_FETCH_DEADLINE_S": "5",
    "CRAWL_TASK_SOFT_TIME_LIMIT_S": "6",
    "CRAWL_BATCH_BUDGET_S": "0.5",
    "CRAWL_TASK_TIME_LIMIT_S": "7",
    "CRAWL_LEASE_S": "3",
    "CRAWL_LEASE_RENEW_S": "1",
    "CRAWL_SCHEDULED_STALE_S": "3",
    "CRAWL_VISIBILITY_TIMEOUT_S": "10",
    "CRAWL_UNACKED_RESTORE_INTERVAL_S": "1",
    "CRAWL_SWEEP_INTERVAL_S": "1",
    "CRAWL_CHECKPOINT_INTERVAL_S": "3600",
    "CRAWL_DB_RETRY_S": "1",
}
