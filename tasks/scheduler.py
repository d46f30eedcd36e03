"""The scheduler: releases due URLs from the frontier into the broker, and keeps the books.

Reads ``SCHEDULER_TICK_S``, ``SCHEDULER_BATCH``, ``READY_PER_JOB``, ``SWEEP_INTERVAL_S`` and
``CHECKPOINT_INTERVAL_S``.

Each pass, for every running job: move up to a batch of due QUEUED URLs (``not_before`` past,
shallowest first) to SCHEDULED in one transaction, then publish one message each, after the
commit. The broker therefore holds ready work only, at most ``READY_PER_JOB`` messages a job;
URLs that must wait stay in the frontier. A job with no queued, scheduled or leased URL left
is finished (decided by the database, never by an empty list in Redis).

Every ``SWEEP_INTERVAL_S`` it also returns expired leases to the queue and re-publishes
scheduled URLs whose messages the broker no longer holds (Redis flushed or restarted).

One scheduler is active at a time: leadership is a Redis key with a short expiry that the
leader renews each pass; if the leader dies, another scheduler takes over within
``LEADER_TTL_S``. Several may run (the ``crawl`` command, ``manage.py scheduler``); the others
stand by.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from django.conf import settings
from django.db import close_old_connections, connection, connections, transaction
from django.utils import timezone

from tasks import broker, frontier, jobs, politeness
from tasks.defaults import setting
from web.models import PENDING_STATES, CrawlJob, FrontierURL, JobState, URLState

log = logging.getLogger(__name__)

LEADER_KEY = "crawl:scheduler:leader"
LEADER_TTL_S = 5.0

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0
"""


def publish(rows: list[tuple[int, int, int]]) -> None:
    """One crawl message per (url id, job id, depth); shallower URLs get a higher priority."""
    from tasks.tasks import fetch_url

    if not rows:
        return
    with fetch_url.app.producer_or_acquire() as producer:
        for url_id, job_id, depth in rows:
            fetch_url.apply_async(
                (url_id, job_id),
                queue=settings.CRAWL_QUEUE,
                priority=min(depth, 9),
                producer=producer,
            )


def _candidates(job: CrawlJob, limit: int) -> list[tuple[int, int, str, int]]:
    qs = FrontierURL.objects.filter(
        job_id=job.pk, state=URLState.QUEUED, not_before__lte=timezone.now()
    ).order_by("depth", "id")
    if connection.features.has_select_for_update_skip_locked:
        qs = qs.select_for_update(skip_locked=True)
    return list(qs.values_list("id", "depth", "host", "attempts")[:limit])


def _polite(
    job: CrawlJob, rows: list[tuple[int, int, str, int]]
) -> list[tuple[int, int, str, int]]:
    """Keep at most one URL per host whose politeness slot is open now."""
    if job.delay <= 0:
        return rows
    chosen, refused = [], set()
    for row in rows:
        host = row[2]
        if host in refused:
            continue
        refused.add(host)  # one request per host per pass at most
        if politeness.host_slot(job.pk, host, job.delay) == 0:
            chosen.append(row)
    return chosen


def release(job: CrawlJob) -> int:
    """Move due URLs of ``job`` to SCHEDULED and publish them; returns how many."""
    outstanding = FrontierURL.objects.filter(job_id=job.pk, state=URLState.SCHEDULED).count()
    budget = min(setting("READY_PER_JOB", job) - outstanding, setting("SCHEDULER_BATCH", job))
    if job.max_pages is not None:
        left = job.max_pages - job.released
        if left <= 0:
            skipped = FrontierURL.objects.filter(
                job_id=job.pk, state=URLState.QUEUED, attempts=0
            ).update(state=URLState.SKIPPED, error_reason="max_pages")
            if skipped:
                log.info("job=%s max_pages reached: %d URLs skipped", job.pk, skipped)
        budget = min(budget, left)
    if budget <= 0:
        return 0
    with transaction.atomic():
        rows = _polite(job, _candidates(job, budget * (4 if job.delay > 0 else 1)))[:budget]
        if not rows:
            return 0
        ids = [r[0] for r in rows]
        FrontierURL.objects.filter(pk__in=ids, state=URLState.QUEUED).update(
            state=URLState.SCHEDULED, scheduled_at=timezone.now()
        )
        first = sum(1 for r in rows if r[3] == 0)
        if first:
            CrawlJob.objects.filter(pk=job.pk).update(released=job.released + first)
            job.released += first
        transaction.on_commit(lambda: publish([(r[0], job.pk, r[1]) for r in rows]))
    return len(rows)


def finish_if_done(job: CrawlJob) -> bool:
    """Finish ``job`` if the database holds no pending URL for it."""
    if FrontierURL.objects.filter(job_id=job.pk, state__in=PENDING_STATES).exists():
        return False
    if job.transition(JobState.FINISHED):
        jobs.checkpoint(job, "finish")
        log.info("job=%s finished", job.pk)
    return True


def reconcile() -> int:
    """Re-publish scheduled URLs whose messages are gone; returns how many were re-published.

    Every SCHEDULED row has a message, ready or unacked, unless the broker lost it. When the
    broker holds fewer messages than there are scheduled rows, the oldest rows are published
    again; a duplicate message is harmless (the claim is a compare-and-set).
    """
    scheduled = FrontierURL.objects.filter(state=URLState.SCHEDULED)
    expected = scheduled.count()
    if not expected:
        return 0
    held = broker.depth()
    missing = expected - held["ready"] - held["unacked"]
    if missing <= 0:
        return 0
    rows = list(scheduled.order_by("scheduled_at").values_list("id", "job_id", "depth")[:missing])
    FrontierURL.objects.filter(pk__in=[r[0] for r in rows]).update(scheduled_at=timezone.now())
    publish(rows)
    log.warning("reconcile: re-published %d scheduled URLs the broker had lost", len(rows))
    return len(rows)


class Scheduler:
    """The scheduling loop; ``run`` until ``stop`` is set."""

    def __init__(self, job_ids: list[int] | None = None) -> None:
        self.job_ids = job_ids
        self.identity = uuid.uuid4().hex
        self.stop = threading.Event()
        self._renew = broker.client().register_script(_RENEW)
        self._last_sweep = 0.0
        self._last_checkpoint = time.monotonic()

    def is_leader(self) -> bool:
        ttl_ms = int(LEADER_TTL_S * 1000)
        return bool(self._renew(keys=[LEADER_KEY], args=[self.identity, ttl_ms]))

    def resign(self) -> None:
        client = broker.client()
        if client.get(LEADER_KEY) == self.identity.encode():
            client.delete(LEADER_KEY)

    def tick(self) -> int:
        """One pass over the running jobs; returns URLs released."""
        running = CrawlJob.objects.filter(state=JobState.RUNNING)
        if self.job_ids is not None:
            running = running.filter(pk__in=self.job_ids)
        released = 0
        for job in running:
            n = release(job)
            released += n
            if n == 0:
                finish_if_done(job)
        now = time.monotonic()
        if now - self._last_sweep >= setting("SWEEP_INTERVAL_S"):
            self._last_sweep = now
            swept = frontier.sweep_expired_leases()
            if swept:
                log.warning("sweep: %d expired leases returned to the queue", swept)
            reconcile()
        if now - self._last_checkpoint >= setting("CHECKPOINT_INTERVAL_S"):
            self._last_checkpoint = now
            for job in running:
                jobs.checkpoint(job, "periodic")
        return released

    def run(self) -> None:
        log.info("scheduler %s started", self.identity[:8])
        try:
            while not self.stop.is_set():
                close_old_connections()
                try:
                    if not self.is_leader():
                        self.stop.wait(LEADER_TTL_S / 2)
                        continue
                    released = self.tick()
                except Exception:
                    log.exception("scheduler pass failed; retrying")
                    self.stop.wait(1.0)
                    continue
                if not released:
                    self.stop.wait(setting("SCHEDULER_TICK_S"))
        finally:
            self.resign()
            connections.close_all()
            log.info("scheduler %s stopped", self.identity[:8])
