"""The frontier: every URL of a job, its state, and the moves between states, one function each.

Reads ``LEASE_S`` (the attempt cap and the backoff: ``retries.py``); its prepared statements
go through ``db.prepared_cursor``, which reads ``DB_PREPARE``.

A URL is inserted once per job (``ON CONFLICT DO NOTHING`` on the unique (job, url) index:
dedup is exact). The scheduler *schedules* it (in a message in the broker). A worker *claims*
a scheduled URL with a compare-and-set that also starts its lease and counts the attempt; the
attempt number is the lease token, so a worker whose lease was swept and re-granted to another
cannot commit over it. Everything a page produces (its row, its links, the URL's new state)
commits in one transaction.

Every way back to the queue goes through one move, ``requeue.back_to_queue`` (state, lease,
schedule and wait reset together): here :func:`defer` (politeness or robots says later; the
attempt is given back) and :func:`record_failure` (a transient outcome: retry after backoff)
use it, and ``tasks/frontier/requeue.py`` holds the other moves back (the lease sweep, a
paused job, URLs given back, a person's decisions). The attempt cap holds wherever an attempt
can start or end: a claim past the last attempt fails the URL, a retry after the last fails
it, a swept lease on the last attempt fails it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.db import IntegrityError, connection, transaction
from django.db.models import DateTimeField, F, Q, QuerySet, Value
from django.db.models.functions import Coalesce, Concat
from django.utils import timezone

from tasks.defaults import setting
from tasks.fetch import outcomes
from tasks.frontier import requeue
from tasks.frontier.claims import Claim, LeaseLost
from tasks.frontier.db import prepared_cursor
from tasks.frontier.jobconfig import job_config
from tasks.frontier.pages import record_page_rows, record_page_statement, save_page
from tasks.frontier.retries import backoff_seconds, retries_left
from tasks.rules.urls import host_of
from tasks.worker import metrics
from web.models import (
    NOT_MODIFIED,
    PENDING_STATES_SQL,
    CrawlJob,
    FrontierURL,
    JobState,
    Page,
    Review,
    URLState,
)

log = logging.getLogger(__name__)


def insert_urls(
    job_id: int,
    urls: Iterable[str],
    depth: int,
    parent_id: int | None = None,
    skipped: Mapping[str, outcomes.Skip] | None = None,
) -> None:
    """Add canonical URLs to the frontier; ones the job already has are left untouched.
    ``skipped``: URLs among them that enter ended, with their outcome (robots.txt forbids
    them)."""
    now = timezone.now()
    skipped = skipped or {}

    def ended(url: str) -> dict:
        outcome = skipped.get(url)
        if outcome is None:
            return {}
        return {"state": URLState.SKIPPED, "error_reason": outcome.reason,
                "error_message": str(outcome)}  # fmt: skip

    rows = [
        FrontierURL(
            job_id=job_id,
            url=u,
            host=host_of(u),
            depth=depth,
            discovered_from_id=parent_id,
            not_before=now,
            **ended(u),
        )
        for u in urls
    ]
    if rows:
        FrontierURL.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)


# The ids go as one value whatever their number: an array on PostgreSQL, a JSON array that
# SQLite's ``json_each`` reads on SQLite (the two databases ``settings.py`` accepts).
_SCHEDULE = """
UPDATE {table} SET state = %s, scheduled_at = %s, released = true
WHERE id {ids} AND CASE WHEN state = %s THEN true ELSE false END
"""  # noqa: S608 (the model's table name; every value a bound parameter)
_SCHEDULE_SQL = {
    "postgresql": _SCHEDULE.format(table=FrontierURL._meta.db_table, ids="= ANY(%s)"),
    "sqlite": _SCHEDULE.format(table=FrontierURL._meta.db_table,
                               ids="IN (SELECT value FROM json_each(%s))"),  # fmt: skip
}


def schedule(ids: list[int]) -> int:
    """Queued -> scheduled: the scheduler is about to publish their messages. One statement
    whatever the number of URLs (prepared, on PostgreSQL)."""
    postgres = connection.vendor == "postgresql"
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with prepared_cursor() as cursor:
        cursor.execute(_SCHEDULE_SQL[connection.vendor], [
            URLState.SCHEDULED, now, ids if postgres else json.dumps(ids), URLState.QUEUED,
        ])  # fmt: skip
        return cursor.rowcount


# The states are written out, not bound: a generic plan can use a partial index only when the
# statement's own condition implies the index's (``frontier_pending_rank``, by the job; the
# scheduled URLs' ``frontier_scheduled``). SQLite draws that implication only from a condition
# that repeats the index's own (``frontier_pending_rank``'s, for SQLite): without it, it
# counts through the job's every URL (0.1 s at 100,000 hosts).
def _count_in(state: str, extra: str = "") -> str:
    return (f"SELECT count(*) FROM {FrontierURL._meta.db_table} "  # noqa: S608 (names)
            f"WHERE job_id = %s AND state = '{state}'{extra}")  # fmt: skip


_COUNT_OUTSTANDING_SQL = {
    vendor: f"SELECT ({_count_in(URLState.SCHEDULED, extra)}), "
    f"({_count_in(URLState.LEASED, extra)})"
    for vendor, extra in (("postgresql", ""), ("sqlite", f" AND {PENDING_STATES_SQL}"))
}


class Outstanding(NamedTuple):
    """A job's URLs released and not ended."""

    scheduled: int  # in a message, waiting in the broker
    leased: int  # taken by a worker


def count_outstanding(job_id: int) -> Outstanding:
    """How many of the job's URLs are in a message and how many a worker has taken, as one
    prepared statement: the scheduler asks at every pass."""
    with prepared_cursor() as cursor:
        cursor.execute(_COUNT_OUTSTANDING_SQL[connection.vendor], [job_id, job_id])
        return Outstanding(*cursor.fetchone())


# The rows are found by their primary key alone: the job and state conditions sit in a CASE,
# which no index matches. Written plainly, they let the planner take the (job, state, ...)
# index or the partial ones and read every URL of the job, or every scheduled URL, for the few
# of one message: it does whenever its statistics are older than the job (a new job, or a
# growing one), which makes each claim cost in proportion to the job.
_CLAIM_SQL = """
UPDATE {frontier} SET state = %s, lease_until = %s, updated_at = %s, attempts = attempts + 1
WHERE id IN ({ids})
  AND CASE WHEN job_id <> %s THEN false
           WHEN state = %s THEN true
           WHEN state = %s THEN lease_until < %s
           ELSE false END
  AND EXISTS (SELECT 1 FROM {job} WHERE id = %s AND state = %s AND close_reason = '')
RETURNING id, url, depth, attempts, scheduled_at, error_reason, error_message,
          (SELECT run FROM {job} WHERE id = %s), banned_since, request, priority
"""


class _Claimed(NamedTuple):
    """A row of the claim's statement."""

    id: int
    url: str
    depth: int
    attempts: int  # the new attempt's number: the lease token
    scheduled_at: datetime | str | None  # SQLite returns text
    error_reason: str | None  # how the previous attempt ended
    error_message: str | None
    run: int  # the job's run
    banned_since: datetime | str | None  # its current run of refusals began then
    request: dict | str | None  # a spider's request (SQLite returns text)
    priority: int  # a spider request's priority


def _aware(value: datetime | str | None) -> datetime | None:
    """A timestamp the claim's statement returned, as an aware datetime (SQLite returns UTC
    text without an offset)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if timezone.is_naive(value) else value


def claim(url_id: int, job_id: int) -> Claim | None:
    """Take the lease on a URL; None if it is not ours (a harmless redelivery)."""
    claimed = claim_many([url_id], job_id)
    return claimed[0] if claimed else None


def claim_many(url_ids: list[int], job_id: int) -> list[Claim]:
    """Take the leases on the URLs of one message, in its order, leaving out those that are
    not ours (a harmless redelivery: done, or leased by a live worker).

    A URL can be claimed when it is SCHEDULED, or LEASED with an expired lease: the message of
    a worker that died mid-page comes back from the broker (acks-late) after its lease ran out.
    The job must be running. One statement does the check and the move, for all of them.
    """
    job = job_config(job_id)
    if job is None or not url_ids:
        return []
    now = timezone.now()
    lease_until = now + timedelta(seconds=setting("LEASE_S", job))
    adapt = connection.ops.adapt_datetimefield_value
    # The list is padded to a power of two with its last id, which names no row twice: each
    # length is a statement of its own, prepared and planned on each connection, and messages
    # come in every length up to the batch's.
    ids = [*url_ids, *[url_ids[-1]] * ((1 << (len(url_ids) - 1).bit_length()) - len(url_ids))]
    sql = _CLAIM_SQL.format(frontier=FrontierURL._meta.db_table, job=CrawlJob._meta.db_table,
                            ids=", ".join(["%s"] * len(ids)))  # fmt: skip
    with prepared_cursor() as cursor:
        cursor.execute(sql, [
            URLState.LEASED, adapt(lease_until), adapt(now), *ids, job_id,
            URLState.SCHEDULED, URLState.LEASED, adapt(now), job_id, JobState.RUNNING, job_id,
        ])  # fmt: skip
        rows = {row.id: row for row in map(_Claimed._make, cursor.fetchall())}
    if len(rows) < len(url_ids):
        requeue.requeue_if_stopped([i for i in url_ids if i not in rows], job_id, now)
    claims = []
    for url_id in dict.fromkeys(url_ids):
        if url_id not in rows:
            continue
        row = rows[url_id]
        scheduled_at = _aware(row.scheduled_at)
        if scheduled_at is not None:
            metrics.DISPATCH_SECONDS.observe(max(0.0, (now - scheduled_at).total_seconds()))
        request = json.loads(row.request) if isinstance(row.request, str) else row.request
        leased = FrontierURL(
            id=url_id, job_id=job_id, url=row.url, depth=row.depth, attempts=row.attempts,
            state=URLState.LEASED, request=request, priority=row.priority,
        )  # fmt: skip
        claims.append(Claim(url=leased, job=job, attempt=row.attempts,
                            previous_reason=row.error_reason or "",
                            previous_message=row.error_message or "", run=row.run,
                            banned_since=_aware(row.banned_since)))  # fmt: skip
    return claims


def past_last_attempt(claim: Claim) -> bool:
    """The claim started an attempt beyond the cap (a redelivery after its last one)."""
    return claim.attempt > setting("RETRY_MAX_ATTEMPTS", claim.job)


def _finish(claim: Claim, to: str, **changes) -> None:
    rows = requeue.leased(claim)
    won = rows.update(state=to, lease_until=None, ladder_level=claim.level, **changes)
    if not won:
        raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")


def defer(claim: Claim, seconds: float, reason: str) -> str:
    """Put a leased URL back to wait ``seconds`` (politeness, robots pending); no attempt used."""
    log.info("job=%s url=%s deferred %.2f s: %s", claim.job.pk, claim.url.url, seconds, reason)
    claim.reason, claim.deferred = reason, True
    if not requeue.back_to_queue(requeue.leased(claim), wait=seconds, reason=reason, refund=True):
        raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")
    return URLState.QUEUED


def record_page(
    claim: Claim,
    page: Page | None,
    links: list[str],
    note: str = "",
    redirect_target: str | None = None,
    status: int | None = None,
    forbidden: Sequence[str] = (),
) -> str:
    """Commit a fetched page, its new links and the URL's DONE state as one transaction.

    Returns the URL's new state. ``note`` is an informational reason kept on a DONE URL
    (not_html, binary, truncated, sitemap, noindex). ``page`` None: the URL is done without
    a page (the page said ``noindex``; ``status`` is its HTTP status). ``forbidden``: new
    links that robots.txt forbids, which enter the frontier skipped (``ROBOTS_FORBIDDEN``).

    A page reached through a redirect is stored once: this URL stores it only if it takes its
    in-scope target too (a new row, or a queued one, marked ``fetched_via_redirect`` so that
    a later link to it fetches nothing, or one that ended without a page). If the target is
    fetched as its own URL (scheduled, leased, done) or another redirect already took it, this
    URL is skipped as ``duplicate_redirect`` and stores nothing.

    Links the frontier already holds are left out by a plain read that never waits: an insert
    that meets an existing row which another transaction is updating (a page being stored, a
    URL being released) waits for that transaction, and such waits chain into convoys of
    seconds when many workers link to the same pages. What is left is inserted in sorted
    order, so that two pages inserting the same new links take the unique index's locks in
    the same order and cannot deadlock each other.

    A page the job's previous run stored is replaced (a recrawl): it keeps the run that found
    it, and the run that last changed it unless its content hash is the same.

    On PostgreSQL all of it is one statement (one round trip, its own transaction): the lease
    check is a CTE that the page and link inserts are joined to, so a lost lease writes
    nothing. Elsewhere (SQLite) the same rows are written by a few plain statements in one
    transaction (``pages.record_page_rows``); a redirect, and a URL done without a page, take
    the ORM's steps (the page's own upsert apart).
    """
    redirected = bool(redirect_target) and redirect_target != claim.url.url
    if not redirected and page is not None:
        record = record_page_statement if connection.vendor == "postgresql" else record_page_rows
        record(claim, page, sorted(links), sorted(forbidden), note, ROBOTS_FORBIDDEN)
        return URLState.DONE
    if links or forbidden:
        known = FrontierURL.objects.filter(job_id=claim.job.pk, url__in=[*links, *forbidden])
        seen = set(known.values_list("url", flat=True))
        links = [u for u in links if u not in seen]
        forbidden = [u for u in forbidden if u not in seen]
    with transaction.atomic():
        if redirected and not take_redirect_target(claim, redirect_target):
            return duplicate_redirect(claim, redirect_target, page.status)
        status = page.status if page is not None else status
        _finish(claim, URLState.DONE, http_status=status, error_reason=note, error_message="")
        if page is not None:
            save_page(page)
        if links or forbidden:  # one insert in sorted order, as the statement's
            insert_urls(claim.job.pk, sorted([*links, *forbidden]), claim.url.depth + 1,
                        claim.url.pk, dict.fromkeys(forbidden, ROBOTS_FORBIDDEN))  # fmt: skip
    metrics.skipped_at_discovery(claim.job.pk, ROBOTS_FORBIDDEN.reason, len(forbidden))
    return URLState.DONE


# A URL robots.txt forbids: at its fetch (tasks/fetch/gates.py) or as its link is found
# (tasks/content/pages.py).
ROBOTS_FORBIDDEN = outcomes.RobotsDisallowed("disallowed by robots.txt")


def record_unchanged(claim: Claim) -> str:
    """A recrawl's conditional request answered 304: the URL is done and its page, body and
    data stay those of the run that fetched them, confirmed by this run."""
    claim.reason = NOT_MODIFIED
    with transaction.atomic():
        _finish(claim, URLState.DONE, http_status=304, error_reason=NOT_MODIFIED, error_message="")
        Page.objects.filter(url_id=claim.url.pk).update(run=claim.run, checked_at=timezone.now())
    return URLState.DONE


def take_redirect_target(claim: Claim, target: str, take_queued: bool = True) -> bool:
    """Inside the page's transaction: may this URL store the page its redirect reached? A
    queued target with no request of its own (a plain row) is taken, marked
    ``fetched_via_redirect``, if ``take_queued``; one with its own request (another
    callback) is fetched as itself. A row of the target that another worker inserts while
    this looks is looked at again, so that the page is stored once either way."""
    rows = FrontierURL.objects.filter(job_id=claim.job.pk, url=target)
    for _ in range(3):
        if take_queued and rows.filter(state=URLState.QUEUED, request__isnull=True).update(
            state=URLState.SKIPPED,
            error_reason=requeue.FETCHED_VIA_REDIRECT,
            error_message=claim.url.url,
        ):
            return True
        state = _target_row(rows)
        if state is None:
            if _insert_taken(claim, target):
                return True
            continue  # inserted meanwhile: looked at again
        free = _target_free(claim, state, take_queued)
        if not (free and state.state == URLState.QUEUED):
            return free
    return False  # a target that keeps changing under this URL: fetched as itself


def mark_redirect_target(claim: Claim, target: str) -> bool:
    """Inside the transaction that ends this URL with a failure its redirects reached at
    ``target``: that URL is marked as seen, its row taken by this URL (``fetched_via_redirect``),
    so that a later request for it is dropped as Scrapy's duplicate filter drops it. False if
    the frontier holds it as a URL of its own by now: a redirect to it is dropped instead."""
    rows = FrontierURL.objects.filter(job_id=claim.job.pk, url=target)
    for _ in range(3):
        state = _target_row(rows)
        if state is not None:
            return _taken_by(state) == claim.url.url
        if _insert_taken(claim, target):
            return True
    return False


def _insert_taken(claim: Claim, target: str) -> bool:
    """The target's row, inserted as taken by this URL; False if one was inserted meanwhile."""
    try:
        with transaction.atomic():  # a savepoint: a concurrent insert wins the race
            FrontierURL.objects.create(
                job_id=claim.job.pk, url=target, host=host_of(target), depth=claim.url.depth,
                state=URLState.SKIPPED, error_reason=requeue.FETCHED_VIA_REDIRECT,
                error_message=claim.url.url, discovered_from_id=claim.url.pk,
                not_before=timezone.now(), released=True,
            )  # fmt: skip
    except IntegrityError:
        return False
    return True


def redirect_target_free(claim: Claim, target: str, take_queued: bool = True) -> bool:
    """Whether the page this URL's redirect reached is still this URL's to store, as the
    frontier has it now (a read: ``take_redirect_target`` decides in the page's commit)."""
    state = _target_row(FrontierURL.objects.filter(job_id=claim.job.pk, url=target))
    return state is None or _target_free(claim, state, take_queued)


def redirect_target_seen(claim: Claim, target: str) -> bool:
    """Whether the frontier holds the URL this URL's redirect reached as a URL of its own, in
    any state (not one this URL's redirect took in an earlier run): Scrapy's duplicate filter
    has seen its request then, and drops a redirect to it."""
    state = _target_row(FrontierURL.objects.filter(job_id=claim.job.pk, url=target))
    return state is not None and _taken_by(state) != claim.url.url


def _target_row(rows: QuerySet) -> Any:
    fields = ("state", "error_reason", "error_message", "request")
    return rows.values_list(*fields, named=True).first()


def _taken_by(state: Any) -> str | None:
    """The URL whose redirect took a target's row (``fetched_via_redirect``), if one did."""
    return state.error_message if state.error_reason == requeue.FETCHED_VIA_REDIRECT else None


def _target_free(claim: Claim, state: Any, take_queued: bool) -> bool:
    """A redirect target's row leaves its page to this URL: queued as a plain row (if
    ``take_queued``), ended without a page, or taken by this URL before (its previous run)."""
    if state.state == URLState.QUEUED:
        return take_queued and state.request is None
    fetched_as_itself = state.state in (URLState.SCHEDULED, URLState.LEASED, URLState.DONE)
    taken_by_another = _taken_by(state) not in (None, claim.url.url)
    return not (fetched_as_itself or taken_by_another)


def duplicate_redirect(claim: Claim, target: str, status: int | None) -> str:
    """This URL redirects to a page that is fetched (or stored) as another URL: skipped,
    storing nothing."""
    duplicate = outcomes.DuplicateRedirect(
        f"redirects to {target[:1900]}, which is fetched as its own URL", status=status
    )
    record_failure(claim, duplicate)
    return URLState.SKIPPED


def record_failure(claim: Claim, outcome: outcomes.CrawlOutcome) -> str:
    """Retry later, fail or skip the URL according to the outcome's class; returns the new state."""
    claim.reason = outcome.reason
    fields = {
        "error_reason": outcome.reason,
        "error_message": str(outcome)[:2000],
        "http_status": outcome.status,
    }
    if not isinstance(outcome, outcomes.Banned):
        fields["banned_since"] = None  # the site answered: a run of refusals has ended
    job = claim.job
    if retries_left(claim, outcome):
        wait = backoff_seconds(claim.attempt, job)
        if outcome.retry_after is not None:
            wait = max(wait, min(outcome.retry_after, setting("RETRY_BACKOFF_MAX_S", job)))
        if not requeue.back_to_queue(requeue.leased(claim), wait=wait, **fields):
            raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")
        return URLState.QUEUED
    if isinstance(outcome, outcomes.Banned):
        return park(claim, outcome)  # blocked whatever was tried: a person decides
    to = URLState.SKIPPED if isinstance(outcome, outcomes.Skip) else URLState.FAILED
    _finish(claim, to, **fields)
    return to


IDENTITY_BANNED = "identity_banned"  # a waiting URL's reason: its identity was refused


def retry_banned(claim: Claim, outcome: outcomes.Banned, wait: float) -> str:
    """A ban is the identity's, not the URL's: the URL waits ``wait`` seconds (until a rested
    identity may ask) with its attempt given back. Its run of refusals is timed from the first
    (``banned_since``): ``tasks/fetch/refusals.py`` parks it after ``BAN_PATIENCE_S``."""
    claim.reason = IDENTITY_BANNED
    since = Coalesce(F("banned_since"), Value(timezone.now(), output_field=DateTimeField()))
    fields = {"error_reason": IDENTITY_BANNED, "error_message": str(outcome)[:2000],
              "http_status": outcome.status, "ladder_level": claim.level,
              "banned_since": since}  # fmt: skip
    if not requeue.back_to_queue(requeue.leased(claim), wait=wait, refund=True, **fields):
        raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")
    return URLState.QUEUED


def park(claim: Claim, outcome: outcomes.CrawlOutcome) -> str:
    """Leased -> needs_review, with what a person needs to decide (the site's last answer)."""
    claim.reason = outcome.reason
    with transaction.atomic():
        _finish(claim, URLState.NEEDS_REVIEW, error_reason=outcome.reason,
                error_message=str(outcome)[:2000], http_status=outcome.status)  # fmt: skip
        Review.objects.update_or_create(
            url_id=claim.url.pk,
            defaults={
                "job_id": claim.job.pk, "host": host_of(claim.url.url),
                "reason": str(outcome)[:200], "level": claim.level, "status": outcome.status,
                "headers": outcome.headers,
                "body": outcome.body[:setting("REVIEW_BODY_CHARS")].decode("utf-8", "replace"),
                "screenshot": outcome.screenshot,
            },
        )  # fmt: skip
    return URLState.NEEDS_REVIEW


def to_render(claim: Claim) -> None:
    """Leased -> scheduled for a render worker (the attempt is given back: nothing was
    fetched); its message goes to the ``render`` queue after the commit."""
    won = requeue.leased(claim).update(
        state=URLState.SCHEDULED, lease_until=None, scheduled_at=timezone.now(),
        attempts=F("attempts") - 1, error_reason=RENDER_QUEUED, ladder_level=claim.level,
    )  # fmt: skip
    if not won:
        raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")


RENDER_QUEUED = "render_queued"


def drop_reviewed(rows: QuerySet, why: str = "given up after review") -> int:
    """A person's decision: parked URLs fail with the reason they were parked for."""
    ids = list(rows.filter(state=URLState.NEEDS_REVIEW).values_list("id", flat=True))
    Review.objects.filter(url_id__in=ids).delete()
    return FrontierURL.objects.filter(pk__in=ids, state=URLState.NEEDS_REVIEW).update(
        state=URLState.FAILED, error_message=Concat(Value(f"{why}: "), F("error_message"))
    )


def give_up(claim: Claim) -> str:
    """A claim past the last attempt (its worker died on the last one): the URL fails."""
    cap = setting("RETRY_MAX_ATTEMPTS", claim.job)
    last = (
        f"{claim.previous_reason}: {claim.previous_message}".strip(": ")
        if claim.previous_reason
        else "no outcome recorded"
    )
    return record_failure(
        claim, outcomes.AttemptsExhausted(f"{cap} attempts made; the last ended with {last}")
    )


def fail_host(job_id: int, host: str, outcome: outcomes.CrawlOutcome) -> int:
    """Every queued URL of ``host`` fails with ``outcome`` (its circuit is open), but for a
    spider's request with an errback: released, its worker fails it at the circuit's gate and
    calls the errback, as Scrapy calls one for every request."""
    no_errback = Q(request__isnull=True) | Q(request__errback=None) | Q(
        request__errback__isnull=True)  # fmt: skip
    queued = FrontierURL.objects.filter(job_id=job_id, host=host, state=URLState.QUEUED)
    return queued.filter(no_errback).update(
        state=URLState.FAILED,
        error_reason=outcome.reason,
        error_message=str(outcome)[:2000],
        scheduled_at=None,
    )


