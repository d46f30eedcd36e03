"""Job-level operations: create, start, pause, resume, cancel, fail, checkpoint.

Each is safe to repeat and safe while workers come and go: the job's state moves by
compare-and-set, and workers read it when they claim a URL. A job is validated when it is
created (``CrawlJob.clean``): a configuration the crawl could not apply is refused with a
message naming the field, never discovered by a worker later.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urljoin

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max
from redis.exceptions import RedisError

from tasks.content.urls import canonicalize
from tasks.fetch import sessions
from tasks.frontier import transitions, wakeup
from web.models import Checkpoint, CrawlJob, FrontierURL, JobState

log = logging.getLogger(__name__)


class JobError(ValueError):
    """A job request that cannot be carried out, with a message for people."""

    def __init__(self, message: str, fields: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.fields = fields or {}


def create_job(seeds: list[str], **fields: Any) -> CrawlJob:
    """Validate and save a draft job; raises JobError naming each field that is wrong."""
    canonical = [canonicalize(s) or s for s in seeds] if isinstance(seeds, list) else seeds
    fields.setdefault("name", (canonical[0] if canonical else "") or "crawl")
    job = CrawlJob(seeds=canonical, **fields)
    try:
        job.full_clean()
    except ValidationError as exc:
        by_field = exc.message_dict
        text = "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in by_field.items())
        raise JobError(text, by_field) from None
    job.save()
    return job


def start(job: CrawlJob) -> bool:
    """Draft -> running, with the seeds in the frontier at depth 0."""
    with transaction.atomic():
        if not job.transition(JobState.RUNNING):
            return False
        transitions.insert_urls(job.pk, job.seeds, depth=0)
        if job.use_sitemaps:
            roots = {canonicalize(urljoin(seed, "/sitemap.xml")) for seed in job.seeds}
            transitions.insert_urls(job.pk, sorted(roots - set(job.seeds) - {None}), depth=0)
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


def cancel(job: CrawlJob) -> bool:
    """End ``job``: URLs not yet fetched are skipped; in-flight pages finish and are kept."""
    with transaction.atomic():
        if not job.transition(JobState.CANCELLED):
            return False
        transitions.skip(FrontierURL.objects.filter(job_id=job.pk), "cancelled")
    checkpoint(job, "cancel")
    return True


def fail(job: CrawlJob, error: str) -> bool:
    """End a running ``job`` that cannot go on (its configuration cannot be applied)."""
    with transaction.atomic():
        if not job.transition(JobState.FAILED):
            return False
        CrawlJob.objects.filter(pk=job.pk).update(error=error[:5000])
        job.error = error[:5000]
        transitions.skip(FrontierURL.objects.filter(job_id=job.pk), "job_failed")
    log.error("job=%s failed: %s", job.pk, error)
    checkpoint(job, "failed")
    return True


def checkpoint(job: CrawlJob, reason: str) -> Checkpoint:
    """Write the job's next checkpoint; concurrent writers get distinct versions."""
    by_state = transitions.counts(job.pk)
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
