"""The human review queue: URLs a site kept blocking whatever the ladder tried.

A parked URL (state ``needs_review``) keeps what a person needs to decide: its host, why it was
parked, the ladder level, and the site's last answer (status, headers, the start of the body,
a screenshot when it was rendered): ``web.models.Review``. A person can *requeue* it (after
solving the challenge in a browser and putting the cookies into the host's jar:
:func:`put_cookies`) or *drop* it (it fails with the reason it was parked for). The admin and
``manage.py review list|requeue|drop`` call these functions; nothing else moves a parked URL.
A host that refused every identity past the job's patience parks its waiting URLs at once
(:func:`park_host`).

Reads ``REVIEW_BODY_CHARS``.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import QuerySet

from tasks.defaults import setting
from tasks.fetch import identity, ladder, outcomes, sessions
from tasks.frontier import transitions, wakeup
from tasks.frontier.requeue import requeue_ended, requeue_reviewed
from web.models import CrawlJob, FrontierURL, Review, URLState


def parked(job_id: int | None = None, host: str | None = None) -> QuerySet:
    rows = FrontierURL.objects.filter(state=URLState.NEEDS_REVIEW)
    if job_id is not None:
        rows = rows.filter(job_id=job_id)
    if host:
        rows = rows.filter(host=host)
    return rows


def park_host(job_id: int, host: str, outcome: outcomes.CrawlOutcome, level: int) -> int:
    """Every URL of ``host`` waiting in the frontier is parked with ``outcome`` (the host
    refused every identity past the job's patience), as ``transitions.park`` parks a leased
    one; how many."""
    waiting = FrontierURL.objects.filter(job_id=job_id, host=host, state=URLState.QUEUED)
    ids = list(waiting.values_list("id", flat=True))
    message = str(outcome)[:2000]
    body = outcome.body[: setting("REVIEW_BODY_CHARS")].decode("utf-8", "replace")
    moved = 0
    for start in range(0, len(ids), 1000):
        chunk = ids[start : start + 1000]
        with transaction.atomic():
            moved += FrontierURL.objects.filter(pk__in=chunk, state=URLState.QUEUED).update(
                state=URLState.NEEDS_REVIEW, error_reason=outcome.reason, error_message=message,
                http_status=outcome.status, ladder_level=level, scheduled_at=None,
            )  # fmt: skip
            now_parked = FrontierURL.objects.filter(
                pk__in=chunk, state=URLState.NEEDS_REVIEW, error_message=message
            ).values_list("id", flat=True)
            Review.objects.bulk_create([
                Review(url_id=url_id, job_id=job_id, host=host, reason=message[:200],
                       level=level, status=outcome.status, headers=outcome.headers, body=body)
                for url_id in now_parked
            ], ignore_conflicts=True)  # fmt: skip
    return moved


def requeue(rows: QuerySet) -> int:
    """Parked URLs back to the queue, for a full set of new attempts; their hosts' ladders
    start again from level 0 (a parked host would otherwise park them again at once)."""
    for job_id, host in rows.values_list("job_id", "host").distinct():
        ladder.reset(job_id, host)
    n = requeue_reviewed(rows)
    if n:
        wakeup.nudge()
    return n


def requeue_chosen(rows: QuerySet) -> int:
    """Fetch the chosen URLs again, whatever they ended as: failed and skipped ones of jobs
    that can still run, and parked ones (:func:`requeue`); the scheduler is woken for them."""
    n = requeue_ended(rows)
    if n:
        wakeup.nudge()
    return n + requeue(rows.filter(state=URLState.NEEDS_REVIEW))


def drop(rows: QuerySet) -> int:
    """Parked URLs fail, with the reason they were parked for."""
    return transitions.drop_reviewed(rows)


def put_cookies(job: CrawlJob, host: str, cookie_header: str) -> int:
    """Put cookies (``name=value; name2=value2``, as a browser's devtools copy them) into the
    jar of the identity ``host`` is visited with now; returns the jar's new version."""
    import requests

    who = identity.current(job, host)
    jar = sessions.load(job.pk, host, who.key)
    changes = requests.cookies.RequestsCookieJar()
    for part in cookie_header.split(";"):
        name, _, value = part.strip().partition("=")
        if name:
            changes.set(name, value, domain=host.split(":")[0], path="/")
    return sessions.save(job.pk, host, who.key, jar, changes)


def items(rows: QuerySet) -> QuerySet:
    return Review.objects.filter(url__in=rows).select_related("url")
