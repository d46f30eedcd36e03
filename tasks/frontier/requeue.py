"""The moves back to the queue, and the end of URLs that will not be fetched.

Every way back to the queue goes through one move, :func:`back_to_queue` (state, lease,
schedule and wait reset together), called by the named moves here and in
``tasks/frontier/transitions.py``: :func:`requeue_if_stopped` (the job was paused),
:func:`give_back` (claimed with a message's other URLs, not started), :func:`reclaim_expired`
(the lease sweep), :func:`requeue_scheduled` (a channel rolled back), :func:`requeue_job` (a
fresh private broker), :func:`requeue_for_recrawl` (the job's next run), and a person's
decisions (:func:`requeue_reviewed`, :func:`requeue_ended`). A URL of a job that has ended is
never put back: it is skipped (:func:`skip`), as the job's other unfetched URLs were.

Reads ``RETRY_MAX_ATTEMPTS``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import reduce
from operator import or_

from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from tasks.defaults import setting
from tasks.fetch import outcomes
from tasks.frontier.claims import Claim
from tasks.frontier.db import in_state
from web.models import CrawlJob, FrontierURL, JobState, Review, URLState

FETCHED_VIA_REDIRECT = "fetched_via_redirect"
LEASE_EXPIRED = "lease_expired"  # a waiting URL's reason: its worker was lost while it held it
ENDED_JOB_REASON = {JobState.CANCELLED: "cancelled", JobState.FAILED: "job_failed"}
CLOSE_SPIDER = "close_spider"  # a URL not fetched: the job's spider ended the crawl


def back_to_queue(
    rows: QuerySet, *, wait: float = 0.0, reason: str | None = None, refund: bool = False, **also
) -> int:
    """The one move back to the queue: no lease, no message, due after ``wait`` seconds;
    ``refund`` gives the attempt back (nothing was tried)."""
    changes = {
        "state": URLState.QUEUED,
        "lease_until": None,
        "scheduled_at": None,
        "not_before": timezone.now() + timedelta(seconds=wait),
        **also,
    }
    if reason is not None:
        changes["error_reason"] = reason
    if refund:
        changes["attempts"] = F("attempts") - 1
    return rows.update(**changes)


def leased(claim: Claim) -> QuerySet:
    return FrontierURL.objects.filter(
        in_state(URLState.LEASED), pk=claim.url.pk, attempts=claim.attempt
    )


def requeue_if_stopped(url_ids: list[int], job_id: int, now: datetime) -> int:
    """After a failed claim: if the job is not running (or its spider closed the crawl), its
    URLs wait in the frontier (or end skipped, if the job has ended; release skips those of a
    closed crawl)."""
    if CrawlJob.objects.filter(pk=job_id, state=JobState.RUNNING, close_reason="").exists():
        return 0  # the URLs were not claimable: duplicate or late messages
    rows = FrontierURL.objects.filter(
        Q(state=URLState.SCHEDULED) | Q(state=URLState.LEASED, lease_until__lt=now),
        pk__in=url_ids,
    )
    return _requeue_unless_ended(job_id, url_ids, rows)


def give_back(claims: list[Claim]) -> int:
    """Claimed URLs of one job this worker will not start (its message ran out of time, the
    job stopped running, or the worker is stopping) wait in the frontier again, due now; their
    attempts are given back. If the job has ended meanwhile (cancelled, failed), they are
    skipped as its other unfetched URLs were."""
    if not claims:
        return 0
    mine = reduce(or_, (Q(pk=c.url.pk, attempts=c.attempt) for c in claims))
    rows = FrontierURL.objects.filter(mine, in_state(URLState.LEASED))
    return _requeue_unless_ended(claims[0].job.pk, [c.url.pk for c in claims], rows, refund=True)


def _requeue_unless_ended(job_id: int, url_ids: list[int], rows: QuerySet, **changes) -> int:
    """``rows`` (URLs ``url_ids`` of job ``job_id``, not fetched) back to the queue, as
    :func:`back_to_queue`; if the job has ended meanwhile (cancelled, failed), they are skipped, as
    its other unfetched URLs were when it ended.

    The state is read after the move has committed, with a lock on the job's row, which an
    end in progress holds until it commits (its first statement changes the row): so either
    that end is seen here, or it starts later and skips the moved URLs itself. The lock is
    held for the read alone (no frontier row is locked under it, so no lock-order conflict
    with a release)."""
    moved = back_to_queue(rows, **changes)
    with transaction.atomic():
        job = CrawlJob.objects.select_for_update(no_key=True).filter(pk=job_id)
        state = job.values_list("state", flat=True).first()
    if state not in (JobState.RUNNING, JobState.PAUSED):
        skip(FrontierURL.objects.filter(pk__in=url_ids), ENDED_JOB_REASON.get(state, "cancelled"))
    return moved


def requeue_scheduled(ids: list[int]) -> int:
    """URLs whose messages were taken out of a queue (a channel rolled back) wait in the
    frontier again; the attempt was not made. A URL already claimed is left alone."""
    return back_to_queue(FrontierURL.objects.filter(pk__in=ids, state=URLState.SCHEDULED))


def requeue_job(job_id: int, states: Iterable[str]) -> int:
    """Put a job's URLs in ``states`` back to the queue (a private broker that started empty)."""
    return back_to_queue(FrontierURL.objects.filter(job_id=job_id, state__in=list(states)))


def requeue_for_recrawl(job_id: int) -> int:
    """Every URL of the job that ended goes back to the queue for the job's next run, with
    its attempts, caps and outcome cleared; parked URLs stay for review, and a redirect's
    target that its source's page stands for stays with it."""
    rows = FrontierURL.objects.filter(
        job_id=job_id, state__in=[URLState.DONE, URLState.FAILED, URLState.SKIPPED]
    ).exclude(error_reason=FETCHED_VIA_REDIRECT)
    return back_to_queue(rows, reason="", attempts=0, released=False, error_message="",
                         http_status=None, ladder_level=0, banned_since=None)  # fmt: skip


def requeue_reviewed(rows: QuerySet) -> int:
    """A person's decision: parked URLs of running or paused jobs go back to the queue for a
    new set of attempts (an ended job's stay parked, with their evidence: a recrawl runs it
    again)."""
    parked = rows.filter(
        state=URLState.NEEDS_REVIEW, job__state__in=[JobState.RUNNING, JobState.PAUSED]
    )
    ids = list(parked.values_list("id", flat=True))
    Review.objects.filter(url_id__in=ids).delete()
    return back_to_queue(FrontierURL.objects.filter(pk__in=ids), reason="", attempts=0,
                         banned_since=None)  # fmt: skip


def requeue_ended(rows: QuerySet) -> int:
    """A person's decision: failed and skipped URLs of running or paused jobs go back to the
    queue for a new set of attempts (an ended job runs again by a recrawl instead)."""
    ended = rows.filter(
        state__in=[URLState.FAILED, URLState.SKIPPED],
        job__state__in=[JobState.RUNNING, JobState.PAUSED],
    )
    return back_to_queue(ended, reason="", error_message="", attempts=0, banned_since=None)


def reclaim_expired() -> int:
    """The lease sweep: URLs whose lease expired (their worker died) go back to the queue;
    on their last attempt they fail; in a job that has ended meanwhile (cancelled, failed)
    they are skipped, as its other unfetched URLs were. Returns how many moved."""
    now = timezone.now()
    expired = FrontierURL.objects.filter(state=URLState.LEASED, lease_until__lt=now)
    moved = 0
    for job in CrawlJob.objects.filter(pk__in=expired.values("job_id")):
        rows = expired.filter(job_id=job.pk)
        cap = setting("RETRY_MAX_ATTEMPTS", job)
        moved += rows.filter(attempts__gte=cap).update(
            state=URLState.FAILED, lease_until=None, scheduled_at=None,
            error_reason=outcomes.AttemptsExhausted.reason,
            error_message=f"{cap} attempts made; its worker was lost during the last one",
        )  # fmt: skip
        ids = list(rows.filter(attempts__lt=cap).values_list("pk", flat=True))
        again = FrontierURL.objects.filter(pk__in=ids, state=URLState.LEASED, lease_until__lt=now)
        moved += _requeue_unless_ended(job.pk, ids, again, reason=LEASE_EXPIRED)
    return moved


def skip(rows: QuerySet, reason: str, message: str = "") -> int:
    """URLs that will not be fetched (caps, max_pages, cancel) end as skipped; ``rows`` are
    queued or scheduled ones (their messages find them done)."""
    said = {"error_message": message} if message else {}
    return rows.filter(state__in=[URLState.QUEUED, URLState.SCHEDULED]).update(
        state=URLState.SKIPPED, error_reason=reason, scheduled_at=None, **said
    )
