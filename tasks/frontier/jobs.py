"""Job-level operations: create, start, pause, resume, cancel, checkpoint.

Each is safe to repeat and safe while workers come and go: the job's state moves by
compare-and-set, and workers read it when they claim a URL.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urljoin

from django.db import IntegrityError, transaction
from django.db.models import Max

from tasks.content.urls import canonicalize
from tasks.defaults import names
from tasks.frontier import transitions
from web.models import Checkpoint, CrawlJob, FrontierURL, JobState, URLState

log = logging.getLogger(__name__)


class JobError(ValueError):
    """A job request that cannot be carried out, with a message for people."""


def create_job(seeds: list[str], **fields: Any) -> CrawlJob:
    """Validate and save a draft job; raises JobError with a readable reason."""
    canonical = [canonicalize(s) for s in seeds]
    bad = [s for s, c in zip(seeds, canonical, strict=True) if c is None]
    if bad:
        raise JobError(f"not an http(s) URL: {', '.join(bad)}")
    unknown = set(fields.get("settings") or {}) - set(names())
    if unknown:
        raise JobError(f"unknown crawl settings: {', '.join(sorted(unknown))}")
    fields.setdefault("name", canonical[0])
    return CrawlJob.objects.create(seeds=canonical, **fields)


def start(job: CrawlJob) -> bool:
    """Draft -> running, with the seeds in the frontier at depth 0."""
    with transaction.atomic():
        if not job.transition(JobState.RUNNING):
            return False
        transitions.insert_urls(job.pk, job.seeds, depth=0)
        if job.use_sitemaps:
            roots = {canonicalize(urljoin(seed, "/sitemap.xml")) for seed in job.seeds}
            transitions.insert_urls(job.pk, sorted(roots - set(job.seeds)), depth=0)
    return True


def pause(job: CrawlJob) -> bool:
    """Stop new fetches for ``job``; in-flight pages finish and are kept."""
    won = job.transition(JobState.PAUSED)
    if won:
        checkpoint(job, "pause")
    return won


def resume(job: CrawlJob) -> bool:
    return job.transition(JobState.RUNNING)


def cancel(job: CrawlJob) -> bool:
    """End ``job``: URLs not yet fetched are skipped; in-flight pages finish and are kept."""
    with transaction.atomic():
        if not job.transition(JobState.CANCELLED):
            return False
        FrontierURL.objects.filter(
            job_id=job.pk, state__in=[URLState.QUEUED, URLState.SCHEDULED]
        ).update(state=URLState.SKIPPED, error_reason="cancelled")
    checkpoint(job, "cancel")
    return True


def checkpoint(job: CrawlJob, reason: str) -> Checkpoint:
    """Write the job's next checkpoint; concurrent writers get distinct versions."""
    by_state = transitions.counts(job.pk)
    counters = {
        "pages": job.pages.count(),
        "released": job.released,
        "state": job.state,
    }
    for _ in range(5):
        version = (job.checkpoints.aggregate(v=Max("version"))["v"] or 0) + 1
        try:
            with transaction.atomic():
                return Checkpoint.objects.create(
                    job=job, version=version, reason=reason, counters=counters, frontier=by_state
                )
        except IntegrityError:
            continue  # another writer took this version; read again
    raise RuntimeError(f"could not write a checkpoint for job {job.pk}")
