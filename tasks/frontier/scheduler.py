"""The scheduler: releases due URLs from the frontier into the broker, and keeps the books.

Reads ``SCHEDULER_TICK_S``, ``SCHEDULER_BATCH``, ``READY_PER_JOB``, ``READY_MIN``,
``DISPATCH_LOOKAHEAD_S``, ``SWEEP_INTERVAL_S`` and ``CHECKPOINT_INTERVAL_S``.

Each pass, for every running job: move up to a batch of due QUEUED URLs (``not_before`` past,
shallowest first) to SCHEDULED in one transaction, then publish one message each, after the
commit. The broker therefore holds ready work only, and just in time: about what the job's
workers consume in ``DISPATCH_LOOKAHEAD_S`` (the scheduler measures the rate at which the
job's messages are taken), never fewer than ``READY_MIN`` nor more than ``READY_PER_JOB``.
A message thus waits tens of milliseconds in the broker, not the time the workers need to
drain a deep queue; URLs that must wait, or that no worker is free for, stay in the
frontier, where pause, cancel and priorities still apply to them (and where the autoscaler
counts them: ``crawlplatform_frontier_due_urls``). A job with no queued, scheduled or leased
URL left is finished (decided by the database, never by an empty list in Redis).

Every ``SWEEP_INTERVAL_S`` it also returns expired leases to the queue and re-publishes
scheduled URLs whose messages the broker no longer holds (Redis flushed or restarted).

One scheduler is active at a time: leadership is a Redis key with a short expiry that the
leader renews each pass; if the leader dies, another scheduler takes over within
``LEADER_TTL_S``. Several may run (the ``crawl`` command, ``manage.py scheduler``); the others
stand by.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
import uuid
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections, connection, connections, transaction
from django.utils import timezone

from tasks import broker
from tasks.defaults import setting
from tasks.fetch import politeness
from tasks.frontier import jobs, transitions
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
    """One crawl message per (url id, job id, broker priority 0-9, 0 first)."""
    from tasks.tasks import fetch_url

    if not rows:
        return
    with fetch_url.app.producer_or_acquire() as producer:
        for url_id, job_id, prio in rows:
            fetch_url.apply_async(
                (url_id, job_id), queue=settings.CRAWL_QUEUE, priority=prio, producer=producer
            )


def priority(depth: int, job_priority: int) -> int:
    """Seeds and shallow URLs first; a job's priority moves all its URLs ahead."""
    return max(0, min(9, depth - job_priority))


class _Pace:
    """The leader's view of each polite host: how far ahead of now it has released URLs."""

    def __init__(self) -> None:
        self.released_until: dict[tuple[int, str], float] = {}

    def blocked(self, job_id: int, now: float, horizon: float) -> list[str]:
        return [h for (j, h), t in self.released_until.items() if j == job_id and t > now + horizon]

    def take(
        self, job_id: int, host: str, delay: float, wait: float, now: float, horizon: float
    ) -> bool:
        """Release one more URL of ``host`` if it will be fetched within the horizon."""
        if wait > horizon:
            self.released_until[(job_id, host)] = now + wait
            return False
        if delay <= 0:
            return True
        start = max(self.released_until.get((job_id, host), now), now + wait)
        if start > now + horizon:
            return False
        self.released_until[(job_id, host)] = start + delay
        return True

    def forget_before(self, now: float) -> None:
        self.released_until = {k: t for k, t in self.released_until.items() if t > now}


_pace = _Pace()


class _Flow:
    """How fast each job's workers take its messages: sets how many may wait in the broker."""

    def __init__(self) -> None:
        self.last: dict[int, tuple[float, int]] = {}  # job -> (when, scheduled after release)
        self.rate: dict[int, float] = {}  # job -> messages taken per second (smoothed)

    def ready_target(self, job: CrawlJob, outstanding: int, now: float) -> int:
        last = self.last.get(job.pk)
        if last is not None and now > last[0]:
            taken = max(0, last[1] - outstanding)
            weight = 1 - math.exp(-(now - last[0]) / 0.5)  # about half a second of memory
            rate = self.rate.get(job.pk, 0.0)
            self.rate[job.pk] = rate + weight * (taken / (now - last[0]) - rate)
        wanted = math.ceil(self.rate.get(job.pk, 0.0) * setting("DISPATCH_LOOKAHEAD_S", job))
        return min(setting("READY_PER_JOB", job), max(setting("READY_MIN", job), wanted))

    def released(self, job_id: int, outstanding: int, now: float) -> None:
        self.last[job_id] = (now, outstanding)

    def busy(self, now: float) -> bool:
        """A job's messages were taken within the last second: pass again soon."""
        return any(
            rate > 1.0 and now - self.last.get(job_id, (0.0, 0))[0] < 1.0
            for job_id, rate in self.rate.items()
        )


_flow = _Flow()


Row = tuple[int, int, str, int, str, str]  # id, depth, host, attempts, url, error_reason


def first_release(row: Row) -> bool:
    """Never released before: no attempt, and no deferral (a deferral leaves its reason)."""
    return row[3] == 0 and not row[5]


def _candidates(job: CrawlJob, limit: int, blocked: list[str]) -> list[Row]:
    qs = FrontierURL.objects.filter(
        job_id=job.pk, state=URLState.QUEUED, not_before__lte=timezone.now()
    )
    if blocked:
        qs = qs.exclude(host__in=blocked)
    qs = qs.order_by("depth", "id")
    if connection.features.has_select_for_update_skip_locked:
        qs = qs.select_for_update(skip_locked=True)
    return list(qs.values_list("id", "depth", "host", "attempts", "url", "error_reason")[:limit])


class _Caps:
    """Per-host and per-pattern caps on first attempts, counted in Redis per job."""

    def __init__(self, job: CrawlJob) -> None:
        self.key = f"crawl:caps:{job.pk}"
        self.per_host = job.max_pages_per_host
        self.patterns = [(p, re.compile(p), n) for p, n in (job.path_caps or {}).items()]
        self.active = self.per_host is not None or bool(self.patterns)
        self.counts: dict[str, int] = {}

    def load(self, hosts: set[str]) -> None:
        if not self.active:
            return
        fields = [f"h:{h}" for h in hosts] + [f"p:{p}" for p, _, _ in self.patterns]
        values = broker.client().hmget(self.key, fields)
        self.counts = {f: int(v or 0) for f, v in zip(fields, values, strict=True)}

    def admit(self, host: str, url: str) -> str:
        """'' if one more first attempt fits (and count it), else the reason it does not."""
        host_field = f"h:{host}"
        if self.per_host is not None and self.counts.get(host_field, 0) >= self.per_host:
            return "host_cap"
        matched = [(f"p:{p}", n) for p, rx, n in self.patterns if rx.search(url)]
        if any(self.counts.get(f, 0) >= n for f, n in matched):
            return "path_cap"
        for f in [host_field, *(f for f, _ in matched)]:
            self.counts[f] = self.counts.get(f, 0) + 1
        return ""

    def save(self, released: list[tuple[str, str]]) -> None:
        if not self.active or not released:
            return
        pipe = broker.client().pipeline(transaction=False)
        for host, url in released:
            pipe.hincrby(self.key, f"h:{host}", 1)
            for p, rx, _ in self.patterns:
                if rx.search(url):
                    pipe.hincrby(self.key, f"p:{p}", 1)
        pipe.execute()


def _max_pages_left(job: CrawlJob) -> int | None:
    if job.max_pages is None:
        return None
    left = job.max_pages - job.released
    if left <= 0:
        skipped = FrontierURL.objects.filter(
            job_id=job.pk, state=URLState.QUEUED, attempts=0, error_reason=""
        ).update(state=URLState.SKIPPED, error_reason="max_pages")
        if skipped:
            log.info("job=%s max_pages reached: %d URLs skipped", job.pk, skipped)
    return left


def release(job: CrawlJob) -> int:
    """Move due URLs of ``job`` to SCHEDULED, host-fair and paced, and publish them.

    Hosts take turns (round-robin over the shallowest due URLs), a polite host gets no more
    URLs than it can be sent within ``SCHEDULER_HORIZON_S``, and hosts that are paced out are
    left out of the query so that they cannot crowd the others out. Returns how many.
    """
    outstanding = FrontierURL.objects.filter(job_id=job.pk, state=URLState.SCHEDULED).count()
    now, horizon = time.monotonic(), setting("SCHEDULER_HORIZON_S", job)
    target = _flow.ready_target(job, outstanding, now)
    _flow.released(job.pk, outstanding, now)
    budget = min(target - outstanding, setting("SCHEDULER_BATCH", job))
    left = _max_pages_left(job)  # first releases still allowed; retries are not counted
    if budget <= 0:
        return 0
    caps = _Caps(job)
    # Pacing and caps turn some candidates down: look further ahead when they may apply.
    window = budget * 4 if job.delay > 0 or job.host_concurrency or caps.active else budget
    with transaction.atomic():
        rows = _candidates(job, window, _pace.blocked(job.pk, now, horizon))
        if not rows:
            return 0
        by_host: dict[str, list[Row]] = {}
        for row in rows:
            by_host.setdefault(row[2], []).append(row)
        delays = politeness.host_delays(job.pk, list(by_host), job.delay)
        caps.load(set(by_host))
        chosen, capped, taken = [], {}, dict.fromkeys(by_host, 0)
        while len(chosen) < budget and by_host:
            for host in list(by_host):
                queue = by_host[host]
                row = queue.pop(0)
                if not queue:
                    del by_host[host]
                delay, wait = delays[host]
                if job.host_concurrency and taken[host] >= job.host_concurrency:
                    by_host.pop(host, None)
                    continue
                if left is not None and first_release(row):
                    if left <= 0:
                        continue  # max_pages reached: skipped above, or on the next pass
                    left -= 1
                if caps.active and first_release(row):
                    reason = caps.admit(host, row[4])
                    if reason:
                        capped.setdefault(reason, []).append(row[0])
                        continue
                if not _pace.take(job.pk, host, delay, wait, now, horizon):
                    by_host.pop(host, None)
                    continue
                taken[host] += 1
                chosen.append(row)
                if len(chosen) >= budget:
                    break
        for reason, ids in capped.items():
            FrontierURL.objects.filter(pk__in=ids, state=URLState.QUEUED).update(
                state=URLState.SKIPPED, error_reason=reason
            )
        if not chosen:
            return 0
        FrontierURL.objects.filter(pk__in=[r[0] for r in chosen], state=URLState.QUEUED).update(
            state=URLState.SCHEDULED, scheduled_at=timezone.now()
        )
        first = [r for r in chosen if first_release(r)]
        if first:
            CrawlJob.objects.filter(pk=job.pk).update(released=job.released + len(first))
            job.released += len(first)
        messages = [(r[0], job.pk, priority(r[1], job.priority)) for r in chosen]
        transaction.on_commit(lambda: publish(messages))
    _flow.released(job.pk, outstanding + len(chosen), now)
    caps.save([(r[2], r[4]) for r in first])
    return len(chosen)


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
            swept = transitions.sweep_expired_leases()
            if swept:
                log.warning("sweep: %d expired leases returned to the queue", swept)
            reconcile()
            _pace.forget_before(now)
        if now - self._last_checkpoint >= setting("CHECKPOINT_INTERVAL_S"):
            self._last_checkpoint = now
            for job in running:
                jobs.checkpoint(job, "periodic")
        return released

    @staticmethod
    def pause() -> float:
        """Seconds until the next pass: half the lookahead while workers take messages (the
        broker holds about a lookahead of them), ``SCHEDULER_TICK_S`` when idle."""
        tick = setting("SCHEDULER_TICK_S")
        if _flow.busy(time.monotonic()):
            tick = min(tick, setting("DISPATCH_LOOKAHEAD_S") / 2)
        return tick

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
                Path(setting("SCHEDULER_HEARTBEAT_FILE")).touch()
                if released < setting("SCHEDULER_BATCH"):  # else more is due right now
                    self.stop.wait(self.pause())
        finally:
            self.resign()
            connections.close_all()
            log.info("scheduler %s stopped", self.identity[:8])
