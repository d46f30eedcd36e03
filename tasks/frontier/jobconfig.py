"""A job's configuration as a worker process reads it: cached per process for
``JOB_CACHE_S`` seconds, and forgotten when the job is announced as edited (``tasks.live``).

Reads no setting. A job's state is never taken from here: every claim checks it in the
database.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from tasks import live
from tasks.defaults import setting
from web.models import CrawlJob

# Fields a worker seldom reads, left out of its copy and loaded on first use: a broad crawl's
# seeds are megabytes of JSON, which every reload by each worker thread would decode again.
HEAVY_FIELDS = ("seeds", "allowed_domains", "stats")


class _Cached(NamedTuple):
    read_at: float  # time.monotonic() when it was read
    job: CrawlJob


_jobs: dict[int, _Cached] = {}


def job_config(job_id: int) -> CrawlJob | None:
    """The job's configuration, cached per process (its state is checked by every claim)."""
    now = time.monotonic()
    hit = _jobs.get(job_id)
    if hit is None or now - hit.read_at > setting("JOB_CACHE_S"):
        job = CrawlJob.objects.filter(pk=job_id).defer(*HEAVY_FIELDS).first()
        if job is None:
            return None
        hit = _jobs[job_id] = _Cached(now, job)
    return hit.job


def _forget_job(job_id: str) -> None:
    _jobs.pop(int(job_id), None)


live.on_announce("job", _forget_job)  # the job was edited: read it again at its next claim
