"""Job-level operations: create, start, pause, resume, cancel, fail, recrawl, delete,
checkpoint.

Each is safe to repeat and safe while workers come and go: the job's state moves by
compare-and-set, and workers read it when they claim a URL. A job is validated when it is
created (``CrawlJob.clean``): a configuration the crawl could not apply is refused with a
message naming the field, never discovered by a worker later.
"""

from __future__ import annotations

import logging
import math
from typing import Any
from urllib.parse import urljoin

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Max
from django.utils import timezone
from redis.exceptions import RedisError

from crawlplatform import logs
from tasks import live
from tasks.content import bodies
from tasks.defaults import setting
from tasks.fetch import identity, sessions
from tasks.frontier import channels, requeue, schedules, spiderjobs, transitions, wakeup, webhooks
from tasks.frontier.db import with_retries
from tasks.rules.urls import canonicalize
from web.models import (
    Checkpoint,
    CrawlJob,
    FrontierURL,
    Item,
    JobState,
    Page,
    Review,
    Stat,
    URLState,
)
from web.models.jobs import MAX_DEPTH_LIMIT

log = logging.getLogger(__name__)


class JobError(ValueError):
    """A job request that cannot be carried out, with a message for people."""

    def __init__(self, message: str, fields: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.fields = fields or {}


def canonical_seeds(seeds: Any) -> Any:
    """Seeds as the frontier will hold them; what is not a URL is left for validation."""
    if not isinstance(seeds, list):
        return seeds
    return [(isinstance(s, str) and canonicalize(s)) or s for s in seeds]


def create_job(seeds: list[str], **fields: Any) -> CrawlJob:
    """Validate and save a draft job; raises JobError naming each field that is wrong."""
    canonical = canonical_seeds(seeds)
    if fields.get("spider"):  # a spider's requests go as deep as it asks, as Scrapy's do
        fields.setdefault("max_depth", MAX_DEPTH_LIMIT)
    first = canonical[0] if isinstance(canonical, list) and canonical else ""
    fields.setdefault("name", (first if isinstance(first, str) else "") or "crawl")
    job = CrawlJob(seeds=canonical, **fields)
    try:
        job.full_clean()
    except ValidationError as exc:
        raise _refused(exc) from None
    check_channel(job.channel)
    with transaction.atomic():  # a schedule beat cannot keep leaves no job behind
        job.save()
        schedules.sync(job)
    return job


def check_channel(name: str) -> None:
    """A job is pinned only to a channel whose workers are online (its queue is read)."""
    try:
        problem = channels.unserved_problem(name)
    except RedisError as exc:
        problem = f"cannot tell which channels have online workers ({exc})"
    if problem:
        raise JobError(f"channel: {problem}", {"channel": [problem]})


def _refused(exc: ValidationError) -> JobError:
    by_field = exc.message_dict
    text = "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in by_field.items())
    return JobError(text, by_field)


def update(job: CrawlJob, **fields: Any) -> list[str]:
    """Change a job's configuration; returns the fields that changed (none: nothing written).

    Validated like a new job (JobError naming each field); a running or paused job's new
    seeds join its frontier, and its schedule follows. The admin, the API and job specs all
    change jobs through here.
    """
    if "seeds" in fields:
        fields["seeds"] = canonical_seeds(fields["seeds"])
    changed = [name for name, value in fields.items() if getattr(job, name) != value]
    if not changed:
        return []
    before = list(job.seeds)
    secret = job.webhook_secret
    for name in changed:
        setattr(job, name, fields[name])
    try:
        job.full_clean()
    except ValidationError as exc:
        raise _refused(exc) from None
    if "channel" in changed:
        check_channel(job.channel)
    if job.webhook_secret != secret:  # made by clean() for a new webhook URL
        changed.append("webhook_secret")
    with transaction.atomic():
        job.save(update_fields=changed)
        added = [s for s in job.seeds if s not in before]
        if added and job.state in (JobState.RUNNING, JobState.PAUSED):
            transitions.insert_urls(job.pk, added, depth=0)
        schedules.sync(job)
        transaction.on_commit(lambda: live.announce(f"job {job.pk}"))  # workers drop their copy
    if "seeds" in changed and job.state == JobState.RUNNING:
        wakeup.nudge()
    return [name for name in changed if name != "webhook_secret"]


@logs.about_job
def start(job: CrawlJob) -> bool:
    """Draft -> running, with the seeds in the frontier at depth 0 (and a spider's start
    requests: a spider that cannot start fails the job with the reason)."""
    problem, begun = "", None
    if job.spider:
        try:
            begun = spiderjobs.plan(job)
        except spiderjobs.SpiderProblem as exc:
            problem = str(exc)
    with transaction.atomic():
        if not job.transition(JobState.RUNNING):
            return False
        if begun is not None:
            spiderjobs.begin(job, begun)
        transitions.insert_urls(job.pk, job.seeds, depth=0)
        if job.use_sitemaps:
            roots = {canonicalize(urljoin(seed, "/sitemap.xml")) for seed in job.seeds}
            transitions.insert_urls(job.pk, sorted(roots - set(job.seeds) - {None}), depth=0)
    if problem:
        fail(job, problem)
        return True
    wakeup.nudge()
    return True


def pause(job: CrawlJob) -> bool:
    """Stop new fetches for ``job``; in-flight pages finish and are kept."""
    won = job.transition(JobState.PAUSED)
    if won:
        checkpoint(job, "pause")
    return won


def resume(job: CrawlJob) -> bool:
    """Paused -> running; cookie jars the broker's Redis lost come back from the checkpoint."""
    won = job.transition(JobState.RUNNING)
    if won:
        latest = job.checkpoints.order_by("-version").first()
        if latest is not None and latest.sessions:
            sessions.restore(job.pk, latest.sessions)
        wakeup.nudge()
    return won


def _end(job: CrawlJob, state: str, error: str | None = None) -> bool:
    """One transaction: ``job`` moves to ``state`` (first: see ``requeue``'s give-back), its
    URLs not yet fetched are skipped, and its webhook is told. Run again if the database aborts
    it as a deadlock: the skip waits on rows that claims in flight hold, and a claim locks the
    rows of its message in an order of its own, so a claim may wait on a row the skip took."""

    def end() -> bool:
        with transaction.atomic():
            if not job.transition(state):
                return False
            if error is not None:
                CrawlJob.objects.filter(pk=job.pk).update(error=error[:5000])
                job.error = error[:5000]
            requeue.skip(FrontierURL.objects.filter(job_id=job.pk),
                         requeue.ENDED_JOB_REASON[state])  # fmt: skip
            webhooks.announce(job)
        return True

    return bool(with_retries(end))


def cancel(job: CrawlJob) -> bool:
    """End ``job``: URLs not yet fetched are skipped; in-flight pages finish and are kept."""
    if not _end(job, JobState.CANCELLED):
        return False
    checkpoint(job, "cancel")
    return True


def fail(job: CrawlJob, error: str) -> bool:
    """End a running ``job`` that cannot go on (its configuration cannot be applied)."""
    if not _end(job, JobState.FAILED, error):
        return False
    log.error("job=%s failed: %s", job.pk, error)
    checkpoint(job, "failed")
    return True


def counts(job_id: int) -> dict[str, int]:
    """URL count by state for one job (every state present, zero if none)."""
    found = dict(
        FrontierURL.objects.filter(job_id=job_id)
        .values_list("state")
        .annotate(n=Count("id"))
        .values_list("state", "n")
    )
    return {state: found.get(state, 0) for state in URLState.values}


def ban_waits(job_id: int) -> list[str]:
    """Hosts of the job whose every identity is banned, as people read them: "waiting for a
    ban to lapse on HOST, N s" (none if Redis cannot say)."""
    try:
        waits = identity.lapses(job_id)
    except RedisError:
        return []
    return [f"waiting for a ban to lapse on {host}, {math.ceil(left)} s"
            for host, left in sorted(waits.items())]  # fmt: skip


def requeue_in_flight(job_id: int) -> int:
    """The job's scheduled and leased URLs back to the queue: a private broker that started
    empty holds none of their messages, and no other worker can hold their leases."""
    return requeue.requeue_job(job_id, [URLState.SCHEDULED, URLState.LEASED])


RECRAWLABLE = (JobState.FINISHED, JobState.CANCELLED, JobState.FAILED)


@logs.about_job
def recrawl(job: CrawlJob) -> bool:
    """Run an ended job again: its next run fetches every URL it knows (conditionally, with
    the validators its pages were stored with) and follows what is new. False if the job has
    not ended (a running job is left alone)."""
    with transaction.atomic():
        won = CrawlJob.objects.filter(pk=job.pk, state__in=RECRAWLABLE).update(
            state=JobState.RUNNING, run=F("run") + 1, released=0, error="", close_reason="",
            started_at=timezone.now(), finished_at=None,
        )  # fmt: skip
        if not won:
            return False
        requeue.requeue_for_recrawl(job.pk)
        transitions.insert_urls(job.pk, job.seeds, depth=0)
    job.refresh_from_db()
    log.info("job=%s run %s started", job.pk, job.run)
    wakeup.nudge()
    return True


# The states each operation on a job starts from, for what people are told (the operations
# themselves move the job by compare-and-set and refuse any other state anyway).
STARTS_FROM: dict[str, frozenset[str]] = {
    "start": frozenset({JobState.DRAFT}),
    "pause": frozenset({JobState.RUNNING}),
    "resume": frozenset({JobState.PAUSED}),
    "cancel": frozenset({JobState.DRAFT, JobState.RUNNING, JobState.PAUSED}),
    "recrawl": frozenset(RECRAWLABLE),
}


def changes(job: CrawlJob) -> dict[str, int]:
    """How the job's last run compares with the one before: pages new, changed, unchanged
    (a 304 or the same content) and gone (stored before, not confirmed by this run)."""
    run, pages = job.run, Page.objects.filter(job_id=job.pk)
    return {
        "new": pages.filter(first_run=run).count(),
        "changed": pages.filter(modified_run=run, first_run__lt=run).count(),
        "unchanged": pages.filter(run=run, modified_run__lt=run).count(),
        "gone": pages.filter(run__lt=run).count(),
    }


def finished(job: CrawlJob) -> None:
    """What a job keeps when a run ends: its counters (with the run's changes) and a
    checkpoint; then its webhook is called."""
    stats = {"run": job.run, "pages": job.pages.count(), **changes(job),
             "frontier": counts(job.pk)}  # fmt: skip
    if job.spider:
        stats.update(spiderjobs.ended(job))
    closed_by = CrawlJob.objects.filter(pk=job.pk).values_list("close_reason", flat=True).first()
    if closed_by:  # read now: the last page in flight may have closed the crawl
        stats["close_reason"] = closed_by
    CrawlJob.objects.filter(pk=job.pk).update(stats=stats)
    job.stats = stats
    checkpoint(job, "finish")
    webhooks.announce(job)


def delete(job_id: int) -> int:
    """Delete a job, its URLs, pages, items, stat rows, reviews and checkpoints, and its stored
    bodies.

    Rows go in batches by id (a few thousand a statement, each its own transaction), so a
    job of millions of URLs never has its rows loaded into Python nor one transaction that
    holds them all. Returns the number of body files deleted (a pack holds many bodies). A job
    that is running is cancelled first (its in-flight pages fail their commit: the job is
    gone).
    """
    job = CrawlJob.objects.filter(pk=job_id).first()
    if job is None:
        return 0
    if job.state not in RECRAWLABLE:
        cancel(job)
    schedules.forget(job_id)
    for model in (Page, Item, Stat, Review, Checkpoint):  # what refers to the URLs goes first
        _batched(_DELETE.format(table=model._meta.db_table), job_id)
    _batched(_UNLINK, job_id)  # links between the job's URLs go before the URLs do
    _batched(_DELETE.format(table=FrontierURL._meta.db_table), job_id)
    CrawlJob.objects.filter(pk=job_id).delete()  # and what a late worker added meanwhile
    return bodies.delete_job(job_id)


# Table names come from the models; the job id and the batch size are bound parameters.
_DELETE = "DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE job_id = %s LIMIT %s)"
_UNLINK = (
    f"UPDATE {FrontierURL._meta.db_table} SET discovered_from_id = NULL WHERE id IN "  # noqa: S608
    f"(SELECT id FROM {FrontierURL._meta.db_table} WHERE job_id = %s "
    "AND discovered_from_id IS NOT NULL LIMIT %s)"
)


def _batched(sql: str, job_id: int) -> None:
    """Run a statement that handles JOB_DELETE_BATCH rows at most until it handles fewer."""
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [job_id, setting("JOB_DELETE_BATCH")])
            if cursor.rowcount < setting("JOB_DELETE_BATCH"):
                return


def checkpoint(job: CrawlJob, reason: str) -> Checkpoint:
    """Write the job's next checkpoint; concurrent writers get distinct versions."""
    by_state = counts(job.pk)
    counters = {
        "pages": job.pages.count(),
        "released": job.released,
        "state": job.state,
    }
    try:
        jars = sessions.snapshot(job.pk)
    except RedisError:  # a checkpoint must not wait for Redis; the jars keep the last one's
        jars = {}
    for _ in range(5):
        version = (job.checkpoints.aggregate(v=Max("version"))["v"] or 0) + 1
        try:
            with transaction.atomic():
                return Checkpoint.objects.create(
                    job=job, version=version, reason=reason, counters=counters,
                    frontier=by_state, sessions=jars,
                )  # fmt: skip
        except IntegrityError:
            continue  # another writer took this version; read again
    raise RuntimeError(f"could not write a checkpoint for job {job.pk}")
