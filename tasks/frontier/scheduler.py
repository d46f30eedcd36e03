"""The scheduler: releases due URLs from the frontier into the broker, and keeps the books.

Reads ``SCHEDULER_TICK_S``, ``SCHEDULER_IDLE_S``, ``SCHEDULER_BATCH``, ``READY_PER_JOB``,
``READY_MIN``, ``DISPATCH_LOOKAHEAD_S``, ``DISPATCH_BATCH``, ``DISPATCH_BATCH_S``,
``SCHEDULER_HORIZON_S``, ``SWEEP_INTERVAL_S``, ``SCHEDULED_STALE_S`` and
``CHECKPOINT_INTERVAL_S``.

Each pass, for every running job: move up to a batch of due QUEUED URLs (``not_before`` past,
shallowest first) to SCHEDULED in one transaction, then publish their messages, after the
commit. A message carries one URL, or several when pages are fast: about
``DISPATCH_BATCH_S`` of a worker slot's time at the rate the job's URLs are taken (at most
``DISPATCH_BATCH``), packed so that the slot reaches each URL no sooner than its host's slot
opens; the worker claims them in one statement and does them in turn, so Celery's and the
claim's per-message costs are shared. The broker therefore holds ready work only, and just
in time: about what the job's workers consume in ``DISPATCH_LOOKAHEAD_S`` (the scheduler
measures the rate at which the job's URLs are taken), never fewer than ``READY_MIN`` nor more
than ``READY_PER_JOB`` messages. A message thus waits tens of milliseconds in the broker, not
the time the workers need to drain a deep queue; URLs that must wait, or that no worker is
free for, stay in the frontier, where pause, cancel and priorities still apply to them (and
where the autoscaler counts them: ``crawlplatform_frontier_due_urls``). A job with no queued,
scheduled or leased URL left is finished (decided by the database, never by an empty list
in Redis). Queued URLs of a host whose circuit is open fail there, in bulk, without a
message.

Between passes it sleeps as long as nothing can be due: while workers take messages, half
the time its ready messages last at their rate, at most two ``SCHEDULER_TICK_S``, else until
the next URL's ``not_before`` or a polite host's next slot, at most ``SCHEDULER_IDLE_S``; a
worker that adds work wakes it at once (``tasks/frontier/wakeup.py``).
An idle platform costs a pass every few seconds; a polite crawl about a pass per release.

Every ``SWEEP_INTERVAL_S`` it also returns expired leases to the queue and re-publishes
scheduled URLs whose messages are gone (Redis flushed) or stuck (reserved by a worker that
died) once they have waited ``SCHEDULED_STALE_S``.

One scheduler is active at a time: leadership is a Redis key with a short expiry that the
leader renews each pass; if the leader dies, another takes over within ``LEADER_TTL_S``. A
new leader also raises the fencing epoch in the database (``SchedulerFence``), and every
release checks, in its own transaction, that the epoch is still its leader's: a leader whose
lease ran out during a slow pass writes nothing. Standbys loop too (touching the heartbeat
file their probes read), ready to take over. A database or Redis outage is ridden out: the
loop logs one line, waits with a bounded backoff and carries on.
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
from django.db import DatabaseError, close_old_connections, connection, connections, transaction
from django.db.models import F, Min
from django.utils import timezone
from redis.exceptions import RedisError

from tasks import broker, live
from tasks.defaults import setting
from tasks.dispatch import Message, publish
from tasks.fetch import circuit, outcomes, politeness
from tasks.frontier import canary, channels, db, jobs, transitions, wakeup, webhooks
from tasks.worker import registry
from web.models import PENDING_STATES, CrawlJob, FrontierURL, JobState, SchedulerFence, URLState

log = logging.getLogger(__name__)

LEADER_KEY = "crawl:scheduler:leader"
LEADER_TTL_S = 5.0
FENCE = "scheduler"
OUTAGE_BACKOFF_MAX_S = 10.0  # longest wait between two tries while the database or Redis is away

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 2 end
return 0
"""


class NotLeader(Exception):
    """A newer leader raised the fencing epoch: this scheduler must write nothing more."""


def priority(depth: int, job_priority: int) -> int:
    """Seeds and shallow URLs first; a job's priority moves all its URLs ahead."""
    return max(0, min(9, depth - job_priority))


class _Pace:
    """The leader's view of each polite host: how far ahead of now it has released URLs."""

    def __init__(self) -> None:
        self.released_until: dict[tuple[int, str], float] = {}

    def blocked(self, job_id: int, now: float, horizon: float) -> list[str]:
        return [h for (j, h), t in self.released_until.items() if j == job_id and t > now + horizon]

    def next_opening(self, job_id: int, now: float, horizon: float) -> float | None:
        """Seconds until the first paced-out host of the job may be released again."""
        times = [t for (j, _), t in self.released_until.items() if j == job_id]
        return min((t - now - horizon for t in times if t > now + horizon), default=None)

    def take(
        self, job_id: int, host: str, delay: float, wait: float, now: float, horizon: float
    ) -> float | None:
        """Release one more URL of ``host`` if it will be fetched within the horizon: in how
        many seconds its slot opens; None: not released."""
        if wait > horizon:
            self.released_until[(job_id, host)] = now + wait
            return None
        if delay <= 0:
            return wait
        start = max(self.released_until.get((job_id, host), now), now + wait)
        if start > now + horizon:
            return None
        self.released_until[(job_id, host)] = start + delay
        return start - now

    def forget_before(self, now: float) -> None:
        self.released_until = {k: t for k, t in self.released_until.items() if t > now}


_pace = _Pace()


class _Flow:
    """How fast each job's workers take its messages: sets how many may wait in the broker."""

    def __init__(self) -> None:
        self.last: dict[int, tuple[float, int]] = {}  # job -> (when, scheduled after release)
        self.rate: dict[int, float] = {}  # job -> URLs taken per second (smoothed)
        self.starved: dict[int, int] = {}  # job -> URLs to release at least: the broker ran dry

    def ready_target(
        self, job: CrawlJob, outstanding: int, now: float, size: int = 1, slots: int = 0
    ) -> int:
        """URLs that may wait in the broker: as many as the job's workers take in
        ``DISPATCH_LOOKAHEAD_S``, between ``READY_MIN`` messages of ``size`` URLs (or one
        message for every two worker slots, when there are more, and a URL for each slot)
        and ``READY_PER_JOB``; while the broker runs dry, twice what they took last."""
        last = self.last.get(job.pk)
        if last is not None and now > last[0]:
            taken = max(0, last[1] - outstanding)
            weight = 1 - math.exp(-(now - last[0]) / 0.5)  # about half a second of memory
            rate = self.rate.get(job.pk, 0.0)
            self.rate[job.pk] = rate + weight * (taken / (now - last[0]) - rate)
            # The broker ran dry: the workers would have taken more than they were given.
            # Twice what they took (as TCP's slow start doubles) lets a new crawl's ready
            # messages grow to its pace in a few passes instead of the second or two the
            # smoothed rate takes; it holds only while the broker runs dry, and sizes no
            # message (idle slots take messages of slow pages as fast as those of fast ones).
            self.starved[job.pk] = 2 * taken if taken and not outstanding else 0
        wanted = math.ceil(self.rate.get(job.pk, 0.0) * setting("DISPATCH_LOOKAHEAD_S", job))
        least = max(setting("READY_MIN", job) * size, slots // 2 * size, slots)
        starved = self.starved.get(job.pk, 0)
        return min(setting("READY_PER_JOB", job) * size, max(least, wanted, starved))

    def released(self, job_id: int, outstanding: int, now: float) -> None:
        self.last[job_id] = (now, outstanding)

    def busy(self, now: float) -> bool:
        """A job's messages were taken within the last second: pass again soon."""
        return any(
            rate > 1.0 and now - self.last.get(job_id, (0.0, 0))[0] < 1.0
            for job_id, rate in self.rate.items()
        )

    def drains_in(self, job_id: int) -> float | None:
        """Seconds until the job's messages in the broker are taken at its current rate."""
        rate = self.rate.get(job_id, 0.0)
        outstanding = self.last.get(job_id, (0.0, 0))[1]
        return outstanding / rate if rate > 0.1 and outstanding else None


_flow = _Flow()


Row = tuple[int, int, str, bool, str, str]  # id, depth, host, released before, url, last reason


def _candidates(job: CrawlJob, limit: int, blocked: list[str]) -> list[Row]:
    qs = FrontierURL.objects.filter(
        job_id=job.pk, state=URLState.QUEUED, not_before__lte=timezone.now()
    )
    if blocked:
        qs = qs.exclude(host__in=blocked)
    qs = qs.order_by("depth", "id")
    if connection.features.has_select_for_update_skip_locked:
        qs = qs.select_for_update(skip_locked=True)
    return list(qs.values_list("id", "depth", "host", "released", "url", "error_reason")[:limit])


class _Caps:
    """Per-host and per-pattern caps on first releases, counted in Redis per job."""

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
        """'' if one more first release fits (and count it), else the reason it does not."""
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
        never = FrontierURL.objects.filter(job_id=job.pk, state=URLState.QUEUED, released=False)
        skipped = transitions.skip(never, "max_pages")
        if skipped:
            log.info("job=%s max_pages reached: %d URLs skipped", job.pk, skipped)
    return left


_FENCE_SQL = f"""
UPDATE {SchedulerFence._meta.db_table} SET epoch = epoch WHERE name = %s AND epoch = %s
"""  # noqa: S608 (the model's table name; every value a bound parameter)


def _check_fence(epoch: int | None) -> None:
    """Inside a release's transaction: the epoch is still ours (and stays so until commit)."""
    if epoch is None:
        return
    with db.prepared_cursor() as cursor:
        cursor.execute(_FENCE_SQL, [FENCE, epoch])
        ours = cursor.rowcount
    if not ours:
        raise NotLeader(f"a newer scheduler leads (this one had epoch {epoch})")


def _fail_open_hosts(job: CrawlJob, by_host: dict[str, list[Row]]) -> None:
    for host, reason in circuit.open_hosts(job.pk, list(by_host)).items():
        unreachable = outcomes.HostUnreachable(f"{reason or 'unreachable'} (circuit open)")
        failed = transitions.fail_host(job.pk, host, unreachable)
        log.warning("job=%s host=%s circuit open (%s): %d queued URLs failed", job.pk, host,
                    reason, failed)  # fmt: skip
        del by_host[host]


_due: dict[int, tuple[float, float | None]] = {}  # job -> (when read, seconds to its next due)
DUE_CACHE_S = 1.0  # the next due time is read at most this often per job (a wake-up rereads)


def _next_due(job: CrawlJob) -> float | None:
    """Seconds until the job's next waiting URL is due (None: none waits)."""
    now = time.monotonic()
    cached = _due.get(job.pk)
    if cached is not None and now - cached[0] < DUE_CACHE_S:
        return None if cached[1] is None else max(0.0, cached[1] - (now - cached[0]))
    at = timezone.now()
    waiting = FrontierURL.objects.filter(job_id=job.pk, state=URLState.QUEUED, not_before__gt=at)
    first = waiting.aggregate(t=Min("not_before"))["t"]
    seconds = None if first is None else (first - at).total_seconds()
    _due[job.pk] = (now, seconds)
    return seconds


def _hint(
    job: CrawlJob, now: float, horizon: float, *, more: bool = False, held_back: bool = False
) -> float | None:
    """Seconds until the job may have something to release; None: not before new work.

    ``more``: ``SCHEDULER_BATCH`` cut the pass with URLs still due; ``held_back``: due URLs
    wait for a free in-flight place of their host (freed by a finishing page, which does not
    wake us)."""
    if more:
        return 0.0
    hints = [t for t in (_pace.next_opening(job.pk, now, horizon), _next_due(job)) if t is not None]
    if held_back:
        hints.append(setting("SCHEDULER_TICK_S"))
    refill = _refill_in(job.pk)
    if refill is not None:
        hints.append(refill)
    return min(hints, default=None)


def _refill_in(job_id: int) -> float | None:
    """Seconds until the job's ready messages are worth topping up (None: it has none): half
    the time they last at its measured rate, and no more than two ticks, since the measured
    rate lags behind a crawl that speeds up (its first seconds) and the broker would run dry
    meanwhile; a tick while no rate is measured yet (its first pass)."""
    if not _flow.last.get(job_id, (0.0, 0))[1]:
        return None
    tick = setting("SCHEDULER_TICK_S")
    drain = _flow.drains_in(job_id)
    return tick if drain is None else min(drain / 2, 2 * tick)


AT_ONCE_S = 0.01  # a message may reach a URL this long before its host's slot opens, s
SLOTS_CACHE_S = 2.0  # the workers' slots are read from their registry at most this often ...
NO_SLOTS_CACHE_S = 0.25  # ... or this often while none is registered or their count moves
_slots_read: list[float] = [-SLOTS_CACHE_S, 0, 0]  # when, how many, how many the read before


def _slots() -> int:
    """Pages the online crawl workers work on at once (their registry, ``heartbeat.py``).

    Workers started together register one after another: while the count moves it is read
    again soon, so that a crawl's first seconds are not sized for the first worker alone."""
    now = time.monotonic()
    when, count, before = _slots_read
    settled = count and count == before
    if now - when >= (SLOTS_CACHE_S if settled else NO_SLOTS_CACHE_S):
        wall, render = time.time(), {settings.RENDER_QUEUE}
        crawling = [
            w
            for w in registry.workers()
            if registry.online(w, wall) and set(str(w["queues"]).split(",")) - render
        ]
        _slots_read[:] = [now, sum(int(w["slots"]) for w in crawling), count]
    return int(_slots_read[1])


def _pace_per_slot(job: CrawlJob) -> tuple[int, float]:
    """URLs per message for the job now, and the seconds one URL takes in a worker slot.

    A message holds a slot for about ``DISPATCH_BATCH_S`` at the rate the job's URLs are
    taken (1 to ``DISPATCH_BATCH`` URLs): fast pages share messages, and so their per-message
    cost; slow pages, or a job whose pace is not known yet, go one by one, so that no URL
    waits in a slot behind another's slow fetch."""
    most, slots = setting("DISPATCH_BATCH", job), _slots()
    rate = _flow.rate.get(job.pk, 0.0)
    if most <= 1 or slots <= 0 or rate <= 0:
        return 1, 0.0
    per_url = slots / rate
    return max(1, min(most, int(setting("DISPATCH_BATCH_S", job) / per_url))), per_url


def _messages(
    job: CrawlJob, chosen: list[Row], opens: dict[int, float], size: int, per_url: float
) -> list[Message]:
    """The release's messages: URLs of one channel queue and priority share a message when
    the slot that takes it reaches each of them no sooner than its host's slot opens.

    URLs are packed in the order their hosts' slots open (``opens``: seconds from now); a
    message reaches its next URL ``per_url`` seconds after the one before (or when that one's
    slot opened). A URL that no message reaches in time starts a message of its own (whose
    worker waits for its slot, as for any URL released ahead of it). A URL whose last worker
    was lost with it (``lease_expired``) goes alone: if its page is what kills workers, it
    takes no other URL's attempts with it again."""
    split = channels.weights()
    packing: dict[tuple[int, str], list[list]] = {}  # key -> [[reached at, url ids], ...]
    alone: list[Message] = []
    for row in sorted(chosen, key=lambda r: opens[r[0]]):
        key = (priority(row[1], job.priority), channels.route(job.channel, row[2], split))
        if row[5] == transitions.LEASE_EXPIRED:
            alone.append(Message([row[0]], job.pk, *key))
            continue
        at = opens[row[0]]
        filling = packing.setdefault(key, [])
        message = next((m for m in filling if len(m[1]) < size and m[0] + AT_ONCE_S >= at), None)
        if message is None:
            message = [at, []]
            filling.append(message)
        message[1].append(row[0])
        message[0] = max(message[0], at) + per_url
    packed = [Message(ids, job.pk, *key) for key, found in packing.items() for _, ids in found]
    return alone + packed


def release(job: CrawlJob, epoch: int | None = None) -> tuple[int, float | None]:
    """Move due URLs of ``job`` to SCHEDULED, host-fair and paced, and publish them.

    Hosts take turns (round-robin over the shallowest due URLs), a polite host gets no more
    URLs than it can be sent within ``SCHEDULER_HORIZON_S``, and hosts that are paced out are
    left out of the query so that they cannot crowd the others out (if a look at the due URLs
    ends with every host in it paced out, the pass looks again past them). Returns how many,
    and in how many seconds the job may have more to release (None: not before new work).
    """
    outstanding = transitions.count_scheduled(job.pk)
    now, horizon = time.monotonic(), setting("SCHEDULER_HORIZON_S", job)
    size, per_url = _pace_per_slot(job)
    target = _flow.ready_target(job, outstanding, now, size, _slots())
    _flow.released(job.pk, outstanding, now)
    batch = setting("SCHEDULER_BATCH", job)
    budget = min(target - outstanding, batch)
    if budget <= 0:
        refill = _refill_in(job.pk)
        return 0, setting("SCHEDULER_TICK_S") if refill is None else refill
    selection = _Selection(job, budget, now, horizon)
    # Pacing and caps turn some candidates down: look further ahead when they may apply.
    window = (
        budget * 4 if job.delay > 0 or job.host_concurrency or selection.caps.active else budget
    )
    with transaction.atomic():
        _check_fence(epoch)
        selection.left = _max_pages_left(job)  # first releases allowed; retries not counted
        for _ in range(3):
            rows = _candidates(job, window, sorted(selection.excluded))
            selection.look(rows)
            if len(rows) < window or selection.full:
                break
        else:
            selection.held_back = True  # more due rows than three looks took in
        if not selection.chosen:
            return 0, _hint(job, now, horizon, held_back=selection.held_back)
        chosen = selection.chosen
        first = [r for r in chosen if not r[3]]
        if first:
            CrawlJob.objects.filter(pk=job.pk).update(released=F("released") + len(first))
            job.released += len(first)
        messages = _messages(job, chosen, selection.opens, size, per_url)
        transaction.on_commit(lambda: publish(messages))
    _flow.released(job.pk, outstanding + len(chosen), now)
    selection.caps.save([(r[2], r[4]) for r in first])
    more = selection.full and budget == batch  # cut by the batch, not by the ready target
    return len(chosen), _hint(job, now, horizon, more=more, held_back=selection.held_back)


class _Selection:
    """The URLs one release picks, look after look at the due URLs (inside its transaction)."""

    def __init__(self, job: CrawlJob, budget: int, now: float, horizon: float) -> None:
        self.job, self.budget, self.now, self.horizon = job, budget, now, horizon
        self.caps = _Caps(job)
        self.left: int | None = None
        self.chosen: list[Row] = []
        self.excluded = set(_pace.blocked(job.pk, now, horizon))  # hosts not to look at again
        self.taken: dict[str, int] = {}
        self.opens: dict[int, float] = {}  # chosen URL -> seconds until its host's slot
        self.held_back = False  # due URLs wait for a free in-flight place of their host

    @property
    def full(self) -> bool:
        return len(self.chosen) >= self.budget

    def look(self, rows: list[Row]) -> None:
        """Choose among ``rows`` round-robin by host; schedule the chosen ones."""
        job, before = self.job, len(self.chosen)
        by_host: dict[str, list[Row]] = {}
        for row in rows:
            by_host.setdefault(row[2], []).append(row)
        _fail_open_hosts(job, by_host)
        self.excluded.update(h for h in {r[2] for r in rows} if h not in by_host)
        delays = politeness.host_delays(job.pk, list(by_host), job.delay, job)
        self.caps.load(set(by_host))
        capped: dict[str, list[int]] = {}
        while not self.full and by_host:
            for host in list(by_host):
                queue = by_host[host]
                row = queue.pop(0)
                if not queue:
                    del by_host[host]
                if job.host_concurrency and self.taken.get(host, 0) >= job.host_concurrency:
                    by_host.pop(host, None)
                    self.excluded.add(host)
                    self.held_back = True  # due, but the host's in-flight places are taken
                    continue
                first = not row[3]
                if self.left is not None and first:
                    if self.left <= 0:
                        continue  # max_pages reached: skipped above, or on the next pass
                    self.left -= 1
                if self.caps.active and first:
                    reason = self.caps.admit(host, row[4])
                    if reason:
                        capped.setdefault(reason, []).append(row[0])
                        continue
                delay, wait = delays[host]
                opens_in = _pace.take(job.pk, host, delay, wait, self.now, self.horizon)
                if opens_in is None:
                    by_host.pop(host, None)
                    self.excluded.add(host)
                    continue
                self.opens[row[0]] = opens_in
                self.taken[host] = self.taken.get(host, 0) + 1
                self.chosen.append(row)
                if self.full:
                    break
        for reason, ids in capped.items():
            transitions.skip(FrontierURL.objects.filter(pk__in=ids), reason)
        transitions.schedule([r[0] for r in self.chosen[before:]])


def finish_if_done(job: CrawlJob) -> bool:
    """Finish ``job`` if the database holds no pending URL for it."""
    if FrontierURL.objects.filter(job_id=job.pk, state__in=PENDING_STATES).exists():
        return False
    if job.transition(JobState.FINISHED):
        jobs.finished(job)
        log.info("job=%s finished", job.pk)
    return True


def reconcile() -> int:
    """Re-publish scheduled URLs whose messages are gone or stuck; returns how many.

    Every SCHEDULED row is in a message (one message may carry several). When the broker's
    ready messages carry fewer URLs than there are scheduled rows, some messages are lost
    (Redis flushed) or reserved by a worker that died (they come back only after the
    visibility timeout); the oldest rows not in a ready message that have waited
    ``SCHEDULED_STALE_S`` are published again. On Redis the ready messages are read in place;
    RabbitMQ only counts them (and not the reserved ones), so there the rows that waited that
    long are published again, up to the difference. A duplicate message is harmless (the claim
    is a compare-and-set), and a flushed broker holds no reserved ones at all, so after a flush
    every scheduled row is published again at once.
    """
    scheduled = FrontierURL.objects.filter(state=URLState.SCHEDULED)
    expected = scheduled.count()
    if not expected:
        return 0
    held = broker.depth()  # unacked: every queue's
    queues = [*channels.queues(), settings.RENDER_QUEUE]
    waiting = channels.waiting(queues)  # URLs of the ready messages; None: cannot be read
    if waiting is None:
        missing = expected - sum(broker.depth(q)["ready"] for q in queues)
    else:
        missing = expected - len(waiting & set(scheduled.values_list("id", flat=True)))
    if missing <= 0:
        return 0
    if held["unacked"] != 0:  # some may be reserved by workers: only those that waited too long
        stale = timezone.now() - timezone.timedelta(seconds=setting("SCHEDULED_STALE_S"))
        scheduled = scheduled.filter(scheduled_at__lt=stale)
    rows = [
        row for row in scheduled.order_by("scheduled_at").values_list(
            "id", "job_id", "depth", "error_reason", "host", "job__channel"
        )[: missing + len(waiting or ())]
        if not waiting or row[0] not in waiting
    ][:missing]  # fmt: skip
    if not rows:
        return 0
    FrontierURL.objects.filter(pk__in=[r[0] for r in rows]).update(scheduled_at=timezone.now())
    split = channels.weights(cached=False)
    messages = [Message([r[0]], r[1], r[2], channels.route(r[5], r[4], split)) for r in rows]
    publish([m for m, r in zip(messages, rows, strict=True) if r[3] != transitions.RENDER_QUEUED])
    publish([m for m, r in zip(messages, rows, strict=True) if r[3] == transitions.RENDER_QUEUED],
            render=True)  # fmt: skip
    log.warning("reconcile: re-published %d scheduled URLs whose messages were lost or stuck",
                len(rows))  # fmt: skip
    return len(rows)


def sweep() -> int:
    """Expired leases back to the queue, lost messages published again (also run by beat)."""
    swept = transitions.reclaim_expired()
    if swept:
        log.warning("sweep: %d expired leases returned to the queue (or failed)", swept)
    if resent := webhooks.resend_pending():
        log.warning("sweep: %d webhook notifications sent again", resent)
    return swept + reconcile()


HEAVY_FIELDS = ("seeds", "allowed_domains", "stats")  # loaded on first use, if ever


class Scheduler:
    """The scheduling loop; ``run`` until ``stop`` is set (or :meth:`shutdown` is called)."""

    def __init__(self) -> None:
        self.identity = uuid.uuid4().hex
        self.stop = threading.Event()
        self.epoch: int | None = None
        self._last_sweep = 0.0
        self._last_analysis = 0.0
        self._last_checkpoint = time.monotonic()
        self._listening = False
        self._checked: dict[int, str] = {}  # job -> the configuration last found applicable
        self._running_sql: tuple[str, tuple] | None = None  # the running jobs' statement

    def shutdown(self) -> None:
        self.stop.set()
        try:
            wakeup.interrupt()
        except RedisError:
            pass

    def is_leader(self) -> bool:
        ttl_ms = int(LEADER_TTL_S * 1000)
        won = int(broker.script(_RENEW)(keys=[LEADER_KEY], args=[self.identity, ttl_ms]))
        if won == 2 or (won and self.epoch is None):
            self.epoch = self._advance_epoch()
            log.info("scheduler %s leads (epoch %d)", self.identity[:8], self.epoch)
        elif not won:
            self.epoch = None
        return bool(won)

    @staticmethod
    def _advance_epoch() -> int:
        with transaction.atomic():
            SchedulerFence.objects.get_or_create(name=FENCE)
            SchedulerFence.objects.filter(name=FENCE).update(epoch=F("epoch") + 1)
            return SchedulerFence.objects.get(name=FENCE).epoch

    def resign(self) -> None:
        client = broker.client()
        if client.get(LEADER_KEY) == self.identity.encode():
            client.delete(LEADER_KEY)
        self.epoch = None

    def _running(self) -> list[CrawlJob]:
        # A broad crawl's job row holds thousands of seeds and allowed domains, which a pass
        # does not read: left out, a pass decodes a few hundred bytes of JSON, not megabytes.
        # The ORM builds the statement once: building it cost a pass more than running it.
        if self._running_sql is None:
            running = CrawlJob.objects.filter(state=JobState.RUNNING).defer(*HEAVY_FIELDS)
            self._running_sql = running.query.sql_with_params()
        return list(CrawlJob.objects.raw(*self._running_sql))

    def _pass_job(self, job: CrawlJob) -> tuple[int, float | None]:
        """Release one job's due URLs; a job whose configuration cannot be applied fails, and
        a job whose pass breaks is logged and skipped: neither holds up the other jobs."""
        signature = repr((job.include_patterns, job.exclude_patterns, job.path_caps,
                          job.settings, job.delay))  # fmt: skip
        problems = {} if self._checked.get(job.pk) == signature else job.problems(seeds=False)
        if not problems:
            self._checked[job.pk] = signature
        else:
            text = "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in problems.items())
            jobs.fail(job, f"configuration cannot be applied: {text}")
            return 0, None
        try:
            released, hint = release(job, self.epoch)
        except (NotLeader, DatabaseError, RedisError):
            raise
        except Exception:
            log.exception("job=%s: release failed; other jobs go on", job.pk)
            return 0, 1.0
        if released == 0 and hint is None:
            finish_if_done(job)
        return released, hint

    def tick(self) -> tuple[int, float]:
        """One pass over the running jobs; returns (URLs released, seconds to the next pass)."""
        running = self._running()
        released, hints = 0, []
        for job in running:
            n, hint = self._pass_job(job)
            released += n
            if hint is not None:
                hints.append(hint)
        now = time.monotonic()
        sweep_every = setting("SWEEP_INTERVAL_S")
        if now - self._last_sweep >= sweep_every:
            self._last_sweep = now
            sweep()
            _pace.forget_before(now)
        if running and now - self._last_analysis >= canary.ANALYSE_EVERY_S:
            self._last_analysis = now
            for decision in canary.analyse():
                log.warning("canary analysis: %s", decision)
        if now - self._last_checkpoint >= setting("CHECKPOINT_INTERVAL_S"):
            self._last_checkpoint = now
            for job in running:
                jobs.checkpoint(job, "periodic")
        pause = min([setting("SCHEDULER_IDLE_S"), *hints])
        if running:
            pause = min(pause, max(0.0, self._last_sweep + sweep_every - now))
        return released, pause

    def _sleep(self, seconds: float) -> None:
        """Sleep until due, or until a worker adds work.

        Work added during a pass is seen by a worker's nudge only if the pass asked for nudges
        before it began (``_listening``): a pass that ends in a sleep without having asked is
        followed by one more pass that asks. While the scheduler keeps sleeping, every pass
        asks. A sleep shorter than ``SCHEDULER_WAKE_S`` is not cut short at all: a polite
        crawl, whose every page adds links, would pay a pass per page for nothing."""
        if seconds <= setting("SCHEDULER_WAKE_S"):
            self._listening = False
            self.stop.wait(seconds)
            return
        asked, self._listening = self._listening, True
        if asked and wakeup.wait(seconds):
            _due.clear()  # new work: what is due next may have changed
        wakeup.listen(setting("SCHEDULER_IDLE_S") + 1)  # for the next pass

    def run(self) -> None:
        log.info("scheduler %s started", self.identity[:8])
        live.start()
        outage_since, backoff = None, 0.5
        try:
            while not self.stop.is_set():
                Path(setting("SCHEDULER_HEARTBEAT_FILE")).touch()
                close_old_connections()
                try:
                    if not self.is_leader():
                        self.stop.wait(LEADER_TTL_S / 2)
                        continue
                    released, pause = self.tick()
                except NotLeader as exc:
                    log.warning("scheduler %s steps down: %s", self.identity[:8], exc)
                    self.epoch = None
                    self.stop.wait(LEADER_TTL_S)
                    continue
                except (DatabaseError, RedisError) as exc:
                    if outage_since is None:  # one line per outage, not a traceback per try
                        outage_since = time.monotonic()
                        log.warning("scheduler: database or Redis unavailable (%s); retrying",
                                    exc)  # fmt: skip
                    connections.close_all()
                    self.stop.wait(backoff)
                    backoff = min(backoff * 2, OUTAGE_BACKOFF_MAX_S)
                    continue
                except Exception:
                    log.exception("scheduler pass failed; retrying")
                    self.stop.wait(1.0)
                    continue
                if outage_since is not None:
                    log.warning("scheduler: back after %.0f s", time.monotonic() - outage_since)
                    outage_since, backoff = None, 0.5
                if released >= setting("SCHEDULER_BATCH"):
                    continue  # more is due right now
                try:
                    self._sleep(pause)
                except RedisError:
                    self.stop.wait(min(pause, 1.0))
        finally:
            try:
                self.resign()
            except RedisError:
                pass
            connections.close_all()
            log.info("scheduler %s stopped", self.identity[:8])
