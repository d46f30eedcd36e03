"""The frontier: every URL of a job, its state, and the moves between states, one function each.

Reads ``LEASE_S``, ``RETRY_MAX_ATTEMPTS``, ``RETRY_TIMEOUT_ATTEMPTS``, ``RETRY_BACKOFF_BASE_S``,
``RETRY_BACKOFF_MAX_S`` and ``DB_PREPARE``.

A URL is inserted once per job (``ON CONFLICT DO NOTHING`` on the unique (job, url) index:
dedup is exact). The scheduler *schedules* it (in a message in the broker). A worker *claims*
a scheduled URL with a compare-and-set that also starts its lease and counts the attempt; the
attempt number is the lease token, so a worker whose lease was swept and re-granted to another
cannot commit over it. Everything a page produces (its row, its links, the URL's new state)
commits in one transaction.

Every way back to the queue goes through one move, :func:`_requeue` (state, lease, schedule
and wait reset together), called by the named moves: :func:`defer` (politeness or robots says
later; the attempt is given back), :func:`record_failure` (a transient outcome: retry after
backoff), :func:`reclaim_expired` (the lease sweep), :func:`requeue_if_stopped` (the job was
paused), :func:`give_back` (claimed with a message's other URLs, not started) and
:func:`requeue_job` (a fresh private broker). The attempt cap holds wherever an
attempt can start or end: a claim past the last attempt fails the URL, a retry after the last
fails it, a swept lease on the last attempt fails it.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import reduce
from operator import or_

from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import BooleanField, Case, F, JSONField, Q, QuerySet, Value, When
from django.db.models.functions import Concat
from django.utils import timezone

from tasks import live
from tasks.defaults import setting
from tasks.fetch import outcomes
from tasks.rules.urls import host_of
from tasks.worker import metrics
from web.models import NOT_MODIFIED, CrawlJob, FrontierURL, JobState, Page, Review, URLState

log = logging.getLogger(__name__)
_TRANSIENT_SQLSTATES = {"40P01", "40001", "55P03"}  # deadlock, serialization, lock timeout
FETCHED_VIA_REDIRECT = "fetched_via_redirect"
LEASE_EXPIRED = "lease_expired"  # a waiting URL's reason: its worker was lost while it held it


class LeaseLost(Exception):
    """This worker's lease on a URL ended before it could commit; its work is discarded."""


@dataclass
class Claim:
    url: FrontierURL
    job: CrawlJob
    attempt: int  # the lease token
    reason: str = ""  # why it ended or went back to wait, once it did
    previous_reason: str = ""  # the reason its previous attempt ended with, if any
    previous_message: str = ""  # and that attempt's message
    new_links: bool = False  # its page added URLs to the frontier
    level: int = 0  # its host's anti-bot ladder level during this attempt
    run: int = 1  # the job's run it was claimed in (read with the claim, never from a cache)
    deferred: bool = False  # it went back to wait without an attempt (politeness, robots)


class _BoundCursor:
    """A psycopg cursor that binds on the server, run as Django runs its own: through the
    connection's execute wrappers (``connection.execute_wrapper``), refused inside a broken
    atomic block, with Django's errors. Django's debug log of queries does not list it."""

    def __init__(self, cursor) -> None:
        self.cursor = cursor

    def execute(self, sql: str, params: list) -> None:
        connection.validate_no_broken_transaction()
        run = self._run
        for wrapper in reversed(connection.execute_wrappers):
            run = functools.partial(wrapper, run)
        with connection.wrap_database_errors:
            run(sql, params, False, {"connection": connection, "cursor": self})

    def _run(self, sql: str, params: list, many: bool, context: dict) -> None:
        self.cursor.execute(sql, params)

    def fetchone(self):
        return self.cursor.fetchone()

    def fetchall(self):
        return self.cursor.fetchall()

    @property
    def rowcount(self) -> int:
        return self.cursor.rowcount


@contextmanager
def prepared_cursor() -> Iterator:
    """A cursor for the statements every page, message and release runs. On PostgreSQL it
    binds parameters on the server and prepares each statement at its first run on a
    connection (``DB_PREPARE``; psycopg keeps one per text and parameter types, a hundred at
    most), so that PostgreSQL parses and plans it once per connection instead of at every
    run, and no parameter is quoted into the text in Python. Django's own cursors bind on the
    client, which never prepares, so the ORM's statements are not affected by the
    connection's threshold. Elsewhere it is Django's cursor."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    import psycopg

    connection.ensure_connection()
    raw = connection.connection
    raw.prepare_threshold = 0 if setting("DB_PREPARE") else None
    with connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        yield _BoundCursor(cursor)


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


def in_state(state: str) -> Case:
    """``state = X`` as a condition no index matches: a statement that names its rows by key
    then finds them by the primary key alone, never through an index of states (see
    ``_CLAIM_SQL``), whatever the planner's statistics say."""
    return Case(
        When(state=state, then=Value(True)), default=Value(False), output_field=BooleanField()
    )


_SCHEDULE_SQL = f"""
UPDATE {FrontierURL._meta.db_table} SET state = %s, scheduled_at = %s, released = true
WHERE id = ANY(%s) AND CASE WHEN state = %s THEN true ELSE false END
"""  # noqa: S608 (the model's table name; every value a bound parameter)


def schedule(ids: list[int]) -> int:
    """Queued -> scheduled: the scheduler is about to publish their messages. On PostgreSQL
    one prepared statement whatever the number of URLs (the ids go as one array)."""
    if connection.vendor != "postgresql":
        return FrontierURL.objects.filter(in_state(URLState.QUEUED), pk__in=ids).update(
            state=URLState.SCHEDULED, scheduled_at=timezone.now(), released=True
        )
    with prepared_cursor() as cursor:
        cursor.execute(_SCHEDULE_SQL, [URLState.SCHEDULED, timezone.now(), ids, URLState.QUEUED])
        return cursor.rowcount


# The state is written out, not bound: a generic plan can use a partial index only when the
# statement's own condition implies the index's (``frontier_scheduled``).
_COUNT_SCHEDULED_SQL = f"""
SELECT count(*) FROM {FrontierURL._meta.db_table}
WHERE job_id = %s AND state = '{URLState.SCHEDULED}'
"""  # noqa: S608 (the model's table name and a state's name; the job a bound parameter)


def count_scheduled(job_id: int) -> int:
    """How many of the job's URLs are in a message, as a prepared statement: the scheduler
    asks at every pass."""
    with prepared_cursor() as cursor:
        cursor.execute(_COUNT_SCHEDULED_SQL, [job_id])
        return cursor.fetchone()[0]


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
  AND EXISTS (SELECT 1 FROM {job} WHERE id = %s AND state = %s)
RETURNING id, url, depth, attempts, scheduled_at, error_reason, error_message,
          (SELECT run FROM {job} WHERE id = %s)
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


def _forget_job(job_id: str) -> None:
    _jobs.pop(int(job_id), None)


live.on_announce("job", _forget_job)  # the job was edited: read it again at its next claim


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
    sql = _CLAIM_SQL.format(frontier=FrontierURL._meta.db_table, job=CrawlJob._meta.db_table,
                            ids=", ".join(["%s"] * len(url_ids)))  # fmt: skip
    with prepared_cursor() as cursor:
        cursor.execute(sql, [
            URLState.LEASED, adapt(lease_until), adapt(now), *url_ids, job_id,
            URLState.SCHEDULED, URLState.LEASED, adapt(now), job_id, JobState.RUNNING, job_id,
        ])  # fmt: skip
        rows = {row[0]: row[1:] for row in cursor.fetchall()}
    if len(rows) < len(url_ids):
        requeue_if_stopped([i for i in url_ids if i not in rows], job_id, now)
    claims = []
    for url_id in dict.fromkeys(url_ids):
        if url_id not in rows:
            continue
        url, depth, attempt, scheduled_at, reason, message, run = rows[url_id]
        if scheduled_at is not None:
            if isinstance(scheduled_at, str):
                scheduled_at = datetime.fromisoformat(scheduled_at)
            if timezone.is_naive(scheduled_at):  # SQLite keeps UTC without an offset
                scheduled_at = scheduled_at.replace(tzinfo=UTC)
            metrics.DISPATCH_SECONDS.observe(max(0.0, (now - scheduled_at).total_seconds()))
        leased = FrontierURL(
            id=url_id, job_id=job_id, url=url, depth=depth, attempts=attempt,
            state=URLState.LEASED,
        )  # fmt: skip
        claims.append(Claim(url=leased, job=job, attempt=attempt, previous_reason=reason or "",
                            previous_message=message or "", run=run))  # fmt: skip
    return claims


def past_last_attempt(claim: Claim) -> bool:
    """The claim started an attempt beyond the cap (a redelivery after its last one)."""
    return claim.attempt > setting("RETRY_MAX_ATTEMPTS", claim.job)


def lend_connection_back() -> None:
    """With a connection pool, give this thread's connection back while it waits on the
    network; the next statement borrows one again (any transaction must be over)."""
    if connection.settings_dict.get("OPTIONS", {}).get("pool"):
        connection.close()


def _requeue(
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


def _leased(claim: Claim) -> QuerySet:
    return FrontierURL.objects.filter(
        in_state(URLState.LEASED), pk=claim.url.pk, attempts=claim.attempt
    )


def requeue_if_stopped(url_ids: list[int], job_id: int, now: datetime) -> int:
    """After a failed claim: if the job is not running, its URLs wait in the frontier (or end
    skipped, if the job has ended)."""
    if CrawlJob.objects.filter(pk=job_id, state=JobState.RUNNING).exists():
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


ENDED_JOB_REASON = {JobState.CANCELLED: "cancelled", JobState.FAILED: "job_failed"}


def _requeue_unless_ended(job_id: int, url_ids: list[int], rows: QuerySet, **changes) -> int:
    """``rows`` (URLs ``url_ids`` of job ``job_id``, not fetched) back to the queue, as
    ``_requeue``; if the job has ended meanwhile (cancelled, failed), they are skipped, as
    its other unfetched URLs were when it ended.

    The state is read after the move has committed, with a lock on the job's row, which an
    end in progress holds until it commits (its first statement changes the row): so either
    that end is seen here, or it starts later and skips the moved URLs itself. The lock is
    held for the read alone (no frontier row is locked under it, so no lock-order conflict
    with a release)."""
    moved = _requeue(rows, **changes)
    with transaction.atomic():
        job = CrawlJob.objects.select_for_update(no_key=True).filter(pk=job_id)
        state = job.values_list("state", flat=True).first()
    if state not in (JobState.RUNNING, JobState.PAUSED):
        skip(FrontierURL.objects.filter(pk__in=url_ids), ENDED_JOB_REASON.get(state, "cancelled"))
    return moved


def requeue_scheduled(ids: list[int]) -> int:
    """URLs whose messages were taken out of a queue (a channel rolled back) wait in the
    frontier again; the attempt was not made. A URL already claimed is left alone."""
    return _requeue(FrontierURL.objects.filter(pk__in=ids, state=URLState.SCHEDULED))


def requeue_job(job_id: int, states: Iterable[str]) -> int:
    """Put a job's URLs in ``states`` back to the queue (a private broker that started empty)."""
    return _requeue(FrontierURL.objects.filter(job_id=job_id, state__in=list(states)))


def _finish(claim: Claim, to: str, **changes) -> None:
    won = _leased(claim).update(state=to, lease_until=None, ladder_level=claim.level, **changes)
    if not won:
        raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")


def with_retries(commit: Callable[[], object], attempts: int = 3):
    """Run a transaction again if the database aborted it as a deadlock or a lock timeout."""
    for attempt in range(1, attempts + 1):
        try:
            return commit()
        except OperationalError as exc:
            transient = getattr(exc.__cause__, "sqlstate", None) in _TRANSIENT_SQLSTATES or (
                "database is locked" in str(exc)
            )
            if not transient or attempt == attempts:
                raise
            time.sleep(random.uniform(0.01, 0.1) * attempt)  # noqa: S311 (jitter)
    return None


def defer(claim: Claim, seconds: float, reason: str) -> str:
    """Put a leased URL back to wait ``seconds`` (politeness, robots pending); no attempt used."""
    log.info("job=%s url=%s deferred %.2f s: %s", claim.job.pk, claim.url.url, seconds, reason)
    claim.reason, claim.deferred = reason, True
    if not _requeue(_leased(claim), wait=seconds, reason=reason, refund=True):
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
    nothing. Elsewhere, and for redirects, the same steps run through the ORM.
    """
    redirected = bool(redirect_target) and redirect_target != claim.url.url
    if connection.vendor == "postgresql" and not redirected and page is not None:
        _record_page_statement(claim, page, sorted(links), sorted(forbidden), note)
        return URLState.DONE
    if links or forbidden:
        known = FrontierURL.objects.filter(job_id=claim.job.pk, url__in=[*links, *forbidden])
        seen = set(known.values_list("url", flat=True))
        links = [u for u in links if u not in seen]
        forbidden = [u for u in forbidden if u not in seen]
    with transaction.atomic():
        if redirected and not _take_redirect_target(claim, redirect_target):
            duplicate = outcomes.DuplicateRedirect(
                f"redirects to {redirect_target[:1900]}, which is fetched as its own URL",
                status=page.status,
            )
            record_failure(claim, duplicate)
            return URLState.SKIPPED
        status = page.status if page is not None else status
        _finish(claim, URLState.DONE, http_status=status, error_reason=note, error_message="")
        if page is not None:
            _save_page(page)
        if links or forbidden:  # one insert in sorted order, as the statement's
            insert_urls(claim.job.pk, sorted([*links, *forbidden]), claim.url.depth + 1,
                        claim.url.pk, dict.fromkeys(forbidden, ROBOTS_FORBIDDEN))  # fmt: skip
    metrics.skipped_at_discovery(claim.job.pk, ROBOTS_FORBIDDEN.reason, len(forbidden))
    return URLState.DONE


# A URL robots.txt forbids: at its fetch (tasks/fetch/gates.py) or as its link is found
# (tasks/content/pages.py).
ROBOTS_FORBIDDEN = outcomes.RobotsDisallowed("disallowed by robots.txt")


_PAGE_FIELDS = [f for f in Page._meta.concrete_fields if not f.primary_key]
# Data-modifying CTEs run to completion whether or not the final SELECT reads them.
# Table and column names come from the models; every value is a bound parameter. The links
# and their hosts go as one text each, a line per link: canonical URLs hold no line breaks
# (URL parsing drops them), and one text costs the driver a tenth of a list's adaptation.
# Every frontier row it reads is found by key, whatever the planner's statistics say: the
# URL by its primary key alone (its lease check sits in a CASE, as the claim's below), each
# link by the unique (job, url) index. OFFSET 0 keeps the known-link test a probe per link:
# as an anti-join, the planner may read and sort every URL of the job for each page (it does
# while its statistics are older than the job), a cost that grows with the crawl.
_RECORD_SQL = """
WITH fin AS (
    UPDATE {frontier} SET state = %s, lease_until = NULL, http_status = %s, error_reason = %s,
                          error_message = '', updated_at = %s, ladder_level = %s
    WHERE id = %s AND CASE WHEN state = %s THEN attempts = %s ELSE false END
    RETURNING id
), page AS (
    INSERT INTO {page} ({page_columns}) SELECT {page_values} FROM fin
    ON CONFLICT (url_id) DO UPDATE SET {page_updates},
        modified_run = CASE WHEN {page}.content_hash = EXCLUDED.content_hash
                            THEN {page}.modified_run ELSE EXCLUDED.modified_run END
), links AS (
    INSERT INTO {frontier} (job_id, url, host, depth, state, attempts, not_before, error_reason,
                            error_message, updated_at, discovered_from_id)
    SELECT %s, t.url, t.host, %s, CASE WHEN t.n > %s THEN %s ELSE %s END, 0, %s,
           CASE WHEN t.n > %s THEN %s ELSE '' END, CASE WHEN t.n > %s THEN %s ELSE '' END,
           %s, fin.id
    FROM unnest(string_to_array(%s, E'\\n'), string_to_array(%s, E'\\n'))
         WITH ORDINALITY AS t(url, host, n)
    CROSS JOIN fin
    WHERE NOT EXISTS (SELECT 1 FROM {frontier} f WHERE f.job_id = %s AND f.url = t.url OFFSET 0)
    ORDER BY t.url
    ON CONFLICT DO NOTHING
    RETURNING state
)
SELECT (SELECT count(*) FROM fin), (SELECT count(*) FROM links WHERE state = %s)
""".format(  # noqa: S608
    frontier=FrontierURL._meta.db_table,
    page=Page._meta.db_table,
    page_columns=", ".join(f.column for f in _PAGE_FIELDS),
    page_values=", ".join(["%s"] * len(_PAGE_FIELDS)),
    page_updates=", ".join(
        f"{f.column} = EXCLUDED.{f.column}"
        for f in _PAGE_FIELDS
        if f.name not in ("job", "url", "first_run", "modified_run")
    ),
)


def _save_page(page: Page) -> None:
    """Insert the page, or replace the one the job's previous run stored (same rules as the
    statement above)."""
    before = Page.objects.filter(url_id=page.url_id).values_list(
        "pk", "first_run", "modified_run", "content_hash"
    )
    found = before.first()
    if found is None:
        page.save(force_insert=True)
        return
    page.pk, page.first_run = found[0], found[1]
    if found[3] == page.content_hash:
        page.modified_run = found[2]
    page.save(force_update=True)


def record_unchanged(claim: Claim) -> str:
    """A recrawl's conditional request answered 304: the URL is done and its page, body and
    data stay those of the run that fetched them, confirmed by this run."""
    claim.reason = NOT_MODIFIED
    with transaction.atomic():
        _finish(claim, URLState.DONE, http_status=304, error_reason=NOT_MODIFIED, error_message="")
        Page.objects.filter(url_id=claim.url.pk).update(run=claim.run, checked_at=timezone.now())
    return URLState.DONE


def requeue_for_recrawl(job_id: int) -> int:
    """Every URL of the job that ended goes back to the queue for the job's next run, with
    its attempts, caps and outcome cleared; parked URLs stay for review, and a redirect's
    target that its source's page stands for stays with it."""
    rows = FrontierURL.objects.filter(
        job_id=job_id, state__in=[URLState.DONE, URLState.FAILED, URLState.SKIPPED]
    ).exclude(error_reason=FETCHED_VIA_REDIRECT)
    return _requeue(rows, reason="", attempts=0, released=False, error_message="",
                    http_status=None, ladder_level=0)  # fmt: skip


_PAGE_JSON = frozenset(f.attname for f in _PAGE_FIELDS if isinstance(f, JSONField))


def _page_values(page: Page) -> list:
    """The page's column values for the statement below. The engine sets each field to a
    value of its column's type, which Django's preparation (``get_db_prep_save``, a fifth of
    the statement's Python time) passes through unchanged on PostgreSQL, JSON apart: those
    are adapted as Django adapts them."""
    values = page.__dict__
    adapt = connection.ops.adapt_json_value
    return [
        adapt(values[f.attname], f.encoder) if f.attname in _PAGE_JSON else values[f.attname]
        for f in _PAGE_FIELDS
    ]


def _record_page_statement(
    claim: Claim, page: Page, links: list[str], forbidden: list[str], note: str
) -> None:
    """The statement above; the links to queue come first, then the forbidden ones (each
    link's line number tells them apart)."""
    now = timezone.now()
    every = [*links, *forbidden]
    skip, n = ROBOTS_FORBIDDEN, len(links)
    with prepared_cursor() as cursor:
        cursor.execute(_RECORD_SQL, [
            URLState.DONE, page.status, note, now, claim.level, claim.url.pk, URLState.LEASED,
            claim.attempt,
            *_page_values(page),
            claim.job.pk, claim.url.depth + 1, n, URLState.SKIPPED, URLState.QUEUED, now,
            n, skip.reason, n, str(skip), now,
            "\n".join(every), "\n".join(host_of(u) for u in every), claim.job.pk,
            URLState.SKIPPED,
        ])  # fmt: skip
        finished, skipped = cursor.fetchone()
    if not finished:
        raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")
    metrics.skipped_at_discovery(claim.job.pk, skip.reason, skipped)


def _take_redirect_target(claim: Claim, target: str) -> bool:
    """Inside the page's transaction: may this URL store the page its redirect reached?"""
    rows = FrontierURL.objects.filter(job_id=claim.job.pk, url=target)
    if rows.filter(state=URLState.QUEUED).update(
        state=URLState.SKIPPED, error_reason=FETCHED_VIA_REDIRECT, error_message=claim.url.url
    ):
        return True
    state = rows.values_list("state", "error_reason", "error_message").first()
    if state is None:
        try:
            with transaction.atomic():  # a savepoint: a concurrent insert wins the race
                FrontierURL.objects.create(
                    job_id=claim.job.pk, url=target, host=host_of(target), depth=claim.url.depth,
                    state=URLState.SKIPPED, error_reason=FETCHED_VIA_REDIRECT,
                    error_message=claim.url.url, discovered_from_id=claim.url.pk,
                    not_before=timezone.now(), released=True,
                )  # fmt: skip
            return True
        except IntegrityError:
            state = rows.values_list("state", "error_reason", "error_message").first()
            if state is None:
                return False
    fetched_as_itself = state[0] in (URLState.SCHEDULED, URLState.LEASED, URLState.DONE)
    taken_by_another = state[1] == FETCHED_VIA_REDIRECT and state[2] != claim.url.url
    return not (fetched_as_itself or taken_by_another)  # (this URL's previous run took it)


def backoff_seconds(attempt: int, job: CrawlJob | None = None) -> float:
    """Exponential backoff with equal jitter: half the step fixed, half random."""
    step = min(
        setting("RETRY_BACKOFF_MAX_S", job),
        setting("RETRY_BACKOFF_BASE_S", job) * 2 ** (attempt - 1),
    )
    return step / 2 + random.uniform(0, step / 2)  # noqa: S311 (jitter, not a secret)


def _retries_left(claim: Claim, outcome: outcomes.CrawlOutcome) -> bool:
    if not outcome.retryable:
        return False
    last = setting("RETRY_MAX_ATTEMPTS", claim.job)
    if isinstance(outcome, outcomes.Timeout):
        last = min(last, setting("RETRY_TIMEOUT_ATTEMPTS", claim.job))
    return claim.attempt < last


def record_failure(claim: Claim, outcome: outcomes.CrawlOutcome) -> str:
    """Retry later, fail or skip the URL according to the outcome's class; returns the new state."""
    claim.reason = outcome.reason
    fields = {
        "error_reason": outcome.reason,
        "error_message": str(outcome)[:2000],
        "http_status": outcome.status,
    }
    job = claim.job
    if _retries_left(claim, outcome):
        wait = backoff_seconds(claim.attempt, job)
        if outcome.retry_after is not None:
            wait = max(wait, min(outcome.retry_after, setting("RETRY_BACKOFF_MAX_S", job)))
        if not _requeue(_leased(claim), wait=wait, **fields):
            raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")
        return URLState.QUEUED
    if isinstance(outcome, outcomes.Banned):
        return park(claim, outcome)  # blocked whatever was tried: a person decides
    to = URLState.SKIPPED if isinstance(outcome, outcomes.Skip) else URLState.FAILED
    _finish(claim, to, **fields)
    return to


IDENTITY_BANNED = "identity_banned"  # a waiting URL's reason: its host's identity was refused


def retry_banned(claim: Claim, outcome: outcomes.Banned) -> str:
    """A ban that was its host's, not the URL's (its identity was refused while it asked, or
    the host refuses everything lately): the URL waits for the ladder's next step with its
    attempt given back. The ladder bounds how often: refusals in a row climb it to parking."""
    claim.reason = IDENTITY_BANNED
    wait = backoff_seconds(claim.attempt, claim.job)
    fields = {"error_reason": IDENTITY_BANNED, "error_message": str(outcome)[:2000],
              "http_status": outcome.status, "ladder_level": claim.level}  # fmt: skip
    if not _requeue(_leased(claim), wait=wait, refund=True, **fields):
        raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")
    return URLState.QUEUED


REVIEW_BODY_CHARS = 256 << 10


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
                "body": outcome.body[:REVIEW_BODY_CHARS].decode("utf-8", "replace"),
                "screenshot": outcome.screenshot,
            },
        )  # fmt: skip
    return URLState.NEEDS_REVIEW


def to_render(claim: Claim) -> None:
    """Leased -> scheduled for a render worker (the attempt is given back: nothing was
    fetched); its message goes to the ``render`` queue after the commit."""
    won = _leased(claim).update(
        state=URLState.SCHEDULED, lease_until=None, scheduled_at=timezone.now(),
        attempts=F("attempts") - 1, error_reason=RENDER_QUEUED, ladder_level=claim.level,
    )  # fmt: skip
    if not won:
        raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")


RENDER_QUEUED = "render_queued"


def requeue_reviewed(rows: QuerySet) -> int:
    """A person's decision: parked URLs go back to the queue for a new set of attempts."""
    ids = list(rows.filter(state=URLState.NEEDS_REVIEW).values_list("id", flat=True))
    Review.objects.filter(url_id__in=ids).delete()
    return _requeue(FrontierURL.objects.filter(pk__in=ids), reason="", attempts=0)


def requeue_ended(rows: QuerySet) -> int:
    """A person's decision: failed and skipped URLs of running or paused jobs go back to the
    queue for a new set of attempts (an ended job runs again by a recrawl instead)."""
    ended = rows.filter(
        state__in=[URLState.FAILED, URLState.SKIPPED],
        job__state__in=[JobState.RUNNING, JobState.PAUSED],
    )
    return _requeue(ended, reason="", error_message="", attempts=0)


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


def fail_host(job_id: int, host: str, outcome: outcomes.CrawlOutcome) -> int:
    """Every queued URL of ``host`` fails with ``outcome`` (its circuit is open)."""
    return FrontierURL.objects.filter(job_id=job_id, host=host, state=URLState.QUEUED).update(
        state=URLState.FAILED,
        error_reason=outcome.reason,
        error_message=str(outcome)[:2000],
        scheduled_at=None,
    )


def skip(rows: QuerySet, reason: str) -> int:
    """URLs that will not be fetched (caps, max_pages, cancel) end as skipped; ``rows`` are
    queued or scheduled ones (their messages find them done)."""
    return rows.filter(state__in=[URLState.QUEUED, URLState.SCHEDULED]).update(
        state=URLState.SKIPPED, error_reason=reason, scheduled_at=None
    )
