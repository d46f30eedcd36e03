"""When a URL tries again: the attempt cap an outcome is held to, and the backoff between
attempts.

Reads ``RETRY_MAX_ATTEMPTS``, ``RETRY_TIMEOUT_ATTEMPTS``, ``RETRY_BACKOFF_BASE_S`` and
``RETRY_BACKOFF_MAX_S``.
"""

from __future__ import annotations

import random

from tasks.defaults import setting
from tasks.fetch import outcomes
from tasks.frontier.claims import Claim
from web.models import CrawlJob


def backoff_seconds(attempt: int, job: CrawlJob | None = None) -> float:
    """Exponential backoff with equal jitter: half the step fixed, half random."""
    step = min(
        setting("RETRY_BACKOFF_MAX_S", job),
        setting("RETRY_BACKOFF_BASE_S", job) * 2 ** (attempt - 1),
    )
    return step / 2 + random.uniform(0, step / 2)  # noqa: S311 (jitter, not a secret)


def retries_left(claim: Claim, outcome: outcomes.CrawlOutcome) -> bool:
    """Whether the URL tries again after ``outcome`` (a retryable one, below its cap)."""
    if not outcome.retryable:
        return False
    last = setting("RETRY_MAX_ATTEMPTS", claim.job)
    if isinstance(outcome, outcomes.Timeout):
        last = min(last, setting("RETRY_TIMEOUT_ATTEMPTS", claim.job))
    return claim.attempt < last


def ends(claim: Claim, outcome: outcomes.CrawlOutcome) -> bool:
    """Whether ``outcome`` ends the URL (failed or skipped) rather than retrying or parking it."""
    return not retries_left(claim, outcome) and not isinstance(outcome, outcomes.Banned)
