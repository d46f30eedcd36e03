"""The frontier: every URL of a job, its state, and the moves between states.

Reads ``LEASE_S``, ``RETRY_MAX_ATTEMPTS``, ``RETRY_BACKOFF_BASE_S`` and ``RETRY_BACKOFF_MAX_S``.

A URL is inserted once per job (``ON CONFLICT DO NOTHING`` on the unique (job, url) index:
dedup is exact). A worker *claims* a scheduled URL with a compare-and-set that also starts
its lease and counts the attempt; the attempt number is the lease token, so a worker whose
lease was swept and re-granted to another cannot commit over it. Everything a page produces
(its row, its links, the URL's new state) commits in one transaction.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.db import DatabaseError, OperationalError, transaction
from django.db.models import Count, F
from django.utils import timezone

from tasks import outcomes
from tasks.defaults import setting
from tasks.urls import host_of
from web.models import CrawlJob, FrontierURL, JobState, Page, URLState

_TRANSIENT_SQLSTATES = {"40P01", "40001", "55P03"}  # deadlock, serialization, lock timeout


class LeaseLost(Exception):
    """This worker's lease on a URL ended before it could commit; its work is discarded."""


@dataclass
class Claim:
    url: FrontierURL
    job: CrawlJob
    attempt: int  # the lease token


def insert_urls(job_id: int, urls: Iterable[str], depth: int, parent_id: int | None = None) -> None:
    """Add canonical URLs to the frontier; ones the job already has are left untouched."""
    now = timezone.now()
    rows = [
        FrontierURL(
            job_id=job_id,
            url=u,
            host=host_of(u),
            depth=depth,
            discovered_from_id=parent_id,
            not_before=now,
        )
        for u in urls
    ]
    if rows:
        FrontierURL.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)


def claim(url_id: int) -> Claim | None:
    """Take the lease on a URL; None if it is not ours (a harmless redelivery).

    A URL can be claimed when it is SCHEDULED, or LEASED with an expired lease: the message of
    a worker that died mid-page comes back from the broker (acks-late) after its lease ran out.
    """
    now = timezone.now()
    row = FrontierURL.objects.select_related("job").filter(pk=url_id).first()
    if row is None:
        return None
    expired = row.state == URLState.LEASED and row.lease_until is not None and row.lease_until < now
    if row.state != URLState.SCHEDULED and not expired:
        return None
    current = FrontierURL.objects.filter(pk=row.pk, state=row.state, attempts=row.attempts)
    if row.job.state != JobState.RUNNING:
        # Paused (or stopping): the URL waits in the frontier until the job runs again.
        current.update(state=URLState.QUEUED, scheduled_at=None, lease_until=None, not_before=now)
        return None
    lease_until = now + timedelta(seconds=setting("LEASE_S", row.job))
    if not current.update(
        state=URLState.LEASED, lease_until=lease_until, attempts=F("attempts") + 1
    ):
        return None
    return Claim(url=row, job=row.job, attempt=row.attempts + 1)


def _finish(claim: Claim, to: str, **changes) -> None:
    won = FrontierURL.objects.filter(
        pk=claim.url.pk, state=URLState.LEASED, attempts=claim.attempt
    ).update(state=to, lease_until=None, **changes)
    if not won:
        raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")


def with_retries(commit: Callable[[], None], attempts: int = 3) -> None:
    """Run a transaction again if the database aborted it as a deadlock or a lock timeout."""
    for attempt in range(1, attempts + 1):
        try:
            commit()
            return
        except OperationalError as exc:
            transient = getattr(exc.__cause__, "sqlstate", None) in _TRANSIENT_SQLSTATES or (
                "database is locked" in str(exc)
            )
            if not transient or attempt == attempts:
                raise
            time.sleep(random.uniform(0.01, 0.1) * attempt)


def release_lease(claim: Claim) -> bool:
    """Give a leased URL back to the queue without counting the attempt; best effort."""
    try:
        return bool(
            FrontierURL.objects.filter(
                pk=claim.url.pk, state=URLState.LEASED, attempts=claim.attempt
            ).update(
                state=URLState.QUEUED,
                lease_until=None,
                scheduled_at=None,
                not_before=timezone.now(),
                attempts=claim.attempt - 1,
            )
        )
    except DatabaseError:
        return False


def record_page(claim: Claim, page: Page, links: list[str]) -> None:
    """Commit a fetched page, its new links and the URL's DONE state as one transaction.

    Links are inserted in sorted order, so that two pages inserting overlapping links take
    the unique index's locks in the same order and cannot deadlock each other.
    """
    with transaction.atomic():
        _finish(claim, URLState.DONE, http_status=page.status, error_reason="", error_message="")
        page.save(force_insert=True)
        if links:
            insert_urls(claim.job.pk, sorted(links), claim.url.depth + 1, claim.url.pk)


def backoff_seconds(attempt: int, job: CrawlJob | None = None) -> float:
    """Exponential backoff with equal jitter: half the step fixed, half random."""
    step = min(
        setting("RETRY_BACKOFF_MAX_S", job),
        setting("RETRY_BACKOFF_BASE_S", job) * 2 ** (attempt - 1),
    )
    return step / 2 + random.uniform(0, step / 2)


def record_failure(claim: Claim, outcome: outcomes.CrawlOutcome) -> str:
    """Retry later, fail or skip the URL according to the outcome's class; returns the new state."""
    fields = {
        "error_reason": outcome.reason,
        "error_message": str(outcome)[:2000],
        "http_status": outcome.status,
    }
    job = claim.job
    if outcome.retryable and claim.attempt < setting("RETRY_MAX_ATTEMPTS", job):
        wait = backoff_seconds(claim.attempt, job)
        if outcome.retry_after is not None:
            wait = max(wait, min(outcome.retry_after, setting("RETRY_BACKOFF_MAX_S", job)))
        to = URLState.QUEUED
        fields["not_before"] = timezone.now() + timedelta(seconds=wait)
        fields["scheduled_at"] = None
    elif isinstance(outcome, outcomes.Skip):
        to = URLState.SKIPPED
    else:
        to = URLState.FAILED
    _finish(claim, to, **fields)
    return to


def sweep_expired_leases() -> int:
    """Return URLs whose lease expired (their worker died) to the queue; their attempt counts."""
    now = timezone.now()
    return FrontierURL.objects.filter(state=URLState.LEASED, lease_until__lt=now).update(
        state=URLState.QUEUED,
        lease_until=None,
        scheduled_at=None,
        not_before=now,
        error_reason="lease_expired",
    )


def requeue_job(job_id: int, states: Iterable[str]) -> int:
    """Put a job's URLs in ``states`` back to QUEUED (a private broker that started empty)."""
    return FrontierURL.objects.filter(job_id=job_id, state__in=list(states)).update(
        state=URLState.QUEUED, lease_until=None, scheduled_at=None, not_before=timezone.now()
    )


def counts(job_id: int) -> dict[str, int]:
    """URL count by state for one job (every state present, zero if none)."""
    found = dict(
        FrontierURL.objects.filter(job_id=job_id)
        .values_list("state")
        .annotate(n=Count("id"))
        .values_list("state", "n")
    )
    return {state: found.get(state, 0) for state in URLState.values}
