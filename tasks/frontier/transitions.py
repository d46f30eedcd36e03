"""The frontier: every URL of a job, its state, and the moves between states.

Reads ``LEASE_S``, ``RETRY_MAX_ATTEMPTS``, ``RETRY_BACKOFF_BASE_S`` and ``RETRY_BACKOFF_MAX_S``.

A URL is inserted once per job (``ON CONFLICT DO NOTHING`` on the unique (job, url) index:
dedup is exact). A worker *claims* a scheduled URL with a compare-and-set that also starts
its lease and counts the attempt; the attempt number is the lease token, so a worker whose
lease was swept and re-granted to another cannot commit over it. Everything a page produces
(its row, its links, the URL's new state) commits in one transaction.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import DatabaseError, OperationalError, connection, transaction
from django.db.models import Count, Q
from django.utils import timezone

from tasks.content.urls import host_of
from tasks.defaults import setting
from tasks.fetch import outcomes
from tasks.worker import metrics
from web.models import CrawlJob, FrontierURL, JobState, Page, URLState

log = logging.getLogger(__name__)
_TRANSIENT_SQLSTATES = {"40P01", "40001", "55P03"}  # deadlock, serialization, lock timeout


class LeaseLost(Exception):
    """This worker's lease on a URL ended before it could commit; its work is discarded."""


@dataclass
class Claim:
    url: FrontierURL
    job: CrawlJob
    attempt: int  # the lease token
    reason: str = ""  # why it ended or went back to wait, once it did


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


_CLAIM_SQL = """
UPDATE {frontier} SET state = %s, lease_until = %s, updated_at = %s, attempts = attempts + 1
WHERE id = %s AND job_id = %s
  AND (state = %s OR (state = %s AND lease_until < %s))
  AND EXISTS (SELECT 1 FROM {job} WHERE id = %s AND state = %s)
RETURNING url, depth, attempts, scheduled_at
"""
_jobs: dict[int, tuple[float, CrawlJob]] = {}
JOB_CACHE_S = 10.0  # a worker reads a job's configuration at most this often


def job_config(job_id: int) -> CrawlJob | None:
    """The job's configuration, cached per process (its state is checked by every claim)."""
    now = time.monotonic()
    hit = _jobs.get(job_id)
    if hit is None or now - hit[0] > JOB_CACHE_S:
        job = CrawlJob.objects.filter(pk=job_id).first()
        if job is None:
            return None
        hit = _jobs[job_id] = (now, job)
    return hit[1]


def claim(url_id: int, job_id: int) -> Claim | None:
    """Take the lease on a URL; None if it is not ours (a harmless redelivery).

    A URL can be claimed when it is SCHEDULED, or LEASED with an expired lease: the message of
    a worker that died mid-page comes back from the broker (acks-late) after its lease ran out.
    The job must be running. One statement does the check and the move.
    """
    job = job_config(job_id)
    if job is None:
        return None
    now = timezone.now()
    lease_until = now + timedelta(seconds=setting("LEASE_S", job))
    adapt = connection.ops.adapt_datetimefield_value
    sql = _CLAIM_SQL.format(frontier=FrontierURL._meta.db_table, job=CrawlJob._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql, [
            URLState.LEASED, adapt(lease_until), adapt(now), url_id, job_id,
            URLState.SCHEDULED, URLState.LEASED, adapt(now), job_id, JobState.RUNNING,
        ])  # fmt: skip
        row = cursor.fetchone()
    if row is None:
        _requeue_if_stopped(url_id, job_id, now)
        return None
    url, depth, attempt, scheduled_at = row
    if scheduled_at is not None:
        if isinstance(scheduled_at, str):
            scheduled_at = datetime.fromisoformat(scheduled_at)
        if timezone.is_naive(scheduled_at):  # SQLite keeps UTC without an offset
            scheduled_at = scheduled_at.replace(tzinfo=UTC)
        metrics.DISPATCH_SECONDS.observe(max(0.0, (now - scheduled_at).total_seconds()))
    leased = FrontierURL(
        id=url_id, job_id=job_id, url=url, depth=depth, attempts=attempt, state=URLState.LEASED
    )
    return Claim(url=leased, job=job, attempt=attempt)


def lend_connection_back() -> None:
    """With a connection pool, give this thread's connection back while it waits on the
    network; the next statement borrows one again (any transaction must be over)."""
    if connection.settings_dict.get("OPTIONS", {}).get("pool"):
        connection.close()


def _requeue_if_stopped(url_id: int, job_id: int, now) -> None:
    """After a failed claim: if the job is paused, the URL waits in the frontier for resume."""
    if CrawlJob.objects.filter(pk=job_id, state=JobState.RUNNING).exists():
        return  # the URL was not claimable: a duplicate or late message
    FrontierURL.objects.filter(
        Q(state=URLState.SCHEDULED) | Q(state=URLState.LEASED, lease_until__lt=now), pk=url_id
    ).update(state=URLState.QUEUED, scheduled_at=None, lease_until=None, not_before=now)


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


def defer(claim: Claim, seconds: float, reason: str) -> str:
    """Put a leased URL back to wait ``seconds`` (politeness, robots pending); no attempt used."""
    log.info("job=%s url=%s deferred %.2f s: %s", claim.job.pk, claim.url.url, seconds, reason)
    claim.reason = reason
    _finish(
        claim, URLState.QUEUED, attempts=claim.attempt - 1, scheduled_at=None,
        not_before=timezone.now() + timedelta(seconds=seconds), error_reason=reason,
    )  # fmt: skip
    return URLState.QUEUED


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


def record_page(
    claim: Claim, page: Page, links: list[str], note: str = "", redirect_target: str | None = None
) -> None:
    """Commit a fetched page, its new links and the URL's DONE state as one transaction.

    ``note`` is an informational reason kept on a DONE URL (not_html, binary, truncated,
    sitemap). A redirect's in-scope target is marked fetched too, so that a link to it later
    does not fetch the same page again.

    Links the frontier already holds are left out by a plain read that never waits: an insert
    that meets an existing row which another transaction is updating (a page being stored, a
    URL being released) waits for that transaction, and such waits chain into convoys of
    seconds when many workers link to the same pages. What is left is inserted in sorted
    order, so that two pages inserting the same new links take the unique index's locks in
    the same order and cannot deadlock each other.

    On PostgreSQL all of it is one statement (one round trip, its own transaction): the lease
    check is a CTE that the page and link inserts are joined to, so a lost lease writes
    nothing. Elsewhere, and for redirects, the same steps run through the ORM.
    """
    if connection.vendor == "postgresql" and not (
        redirect_target and redirect_target != claim.url.url
    ):
        _record_page_statement(claim, page, sorted(links), note)
        return
    if links:
        known = FrontierURL.objects.filter(job_id=claim.job.pk, url__in=links)
        seen = set(known.values_list("url", flat=True))
        links = [u for u in links if u not in seen]
    with transaction.atomic():
        _finish(claim, URLState.DONE, http_status=page.status, error_reason=note, error_message="")
        page.save(force_insert=True)
        if redirect_target and redirect_target != claim.url.url:
            _mark_redirect_target(claim, redirect_target)
        if links:
            insert_urls(claim.job.pk, sorted(links), claim.url.depth + 1, claim.url.pk)


_PAGE_FIELDS = [f for f in Page._meta.concrete_fields if not f.primary_key]
# Data-modifying CTEs run to completion whether or not the final SELECT reads them.
_RECORD_SQL = """
WITH fin AS (
    UPDATE {frontier} SET state = %s, lease_until = NULL, http_status = %s, error_reason = %s,
                          error_message = '', updated_at = %s
    WHERE id = %s AND state = %s AND attempts = %s
    RETURNING id
), page AS (
    INSERT INTO {page} ({page_columns}) SELECT {page_values} FROM fin
), links AS (
    INSERT INTO {frontier} (job_id, url, host, depth, state, attempts, not_before, error_reason,
                            error_message, updated_at, discovered_from_id)
    SELECT %s, t.url, t.host, %s, %s, 0, %s, '', '', %s, fin.id
    FROM unnest(%s::text[], %s::text[]) AS t(url, host) CROSS JOIN fin
    WHERE NOT EXISTS (SELECT 1 FROM {frontier} f WHERE f.job_id = %s AND f.url = t.url)
    ORDER BY t.url
    ON CONFLICT DO NOTHING
)
SELECT count(*) FROM fin
""".format(
    frontier=FrontierURL._meta.db_table,
    page=Page._meta.db_table,
    page_columns=", ".join(f.column for f in _PAGE_FIELDS),
    page_values=", ".join(["%s"] * len(_PAGE_FIELDS)),
)


def _record_page_statement(claim: Claim, page: Page, links: list[str], note: str) -> None:
    now = timezone.now()
    page_values = [f.get_db_prep_save(getattr(page, f.attname), connection) for f in _PAGE_FIELDS]
    with connection.cursor() as cursor:
        cursor.execute(_RECORD_SQL, [
            URLState.DONE, page.status, note, now, claim.url.pk, URLState.LEASED, claim.attempt,
            *page_values,
            claim.job.pk, claim.url.depth + 1, URLState.QUEUED, now, now,
            links, [host_of(u) for u in links], claim.job.pk,
        ])  # fmt: skip
        (finished,) = cursor.fetchone()
    if not finished:
        raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")


def _mark_redirect_target(claim: Claim, target: str) -> None:
    reason = "fetched_via_redirect"
    FrontierURL.objects.filter(job_id=claim.job.pk, url=target, state=URLState.QUEUED).update(
        state=URLState.SKIPPED, error_reason=reason
    )
    now = timezone.now()
    FrontierURL.objects.bulk_create(
        [FrontierURL(
            job_id=claim.job.pk, url=target, host=host_of(target), depth=claim.url.depth,
            state=URLState.SKIPPED, error_reason=reason, discovered_from_id=claim.url.pk,
            not_before=now,
        )],
        ignore_conflicts=True,
    )  # fmt: skip


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
    claim.reason = outcome.reason
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
