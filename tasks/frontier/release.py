"""Release: move a job's due URLs from the frontier to SCHEDULED and publish their messages.

Each pass, for a running job: move up to a batch (``SCHEDULER_BATCH``) of due QUEUED URLs
(``not_before`` past, shallowest first) to SCHEDULED in one transaction, then publish their
messages, after the commit. A message carries one URL, or several when pages are fast: about
``DISPATCH_BATCH_S`` of a worker slot's time at the time a slot spends on each of the job's
URLs (at most ``DISPATCH_BATCH``; ``pacing.py``), but never so many that a worker slot would
have none while the job's released URLs are fewer than its slots can hold (a crawl's first
pages, and its last ones as far as those in flight leave slots free), packed so that the slot
reaches each URL no sooner than its host's slot opens; the worker claims them in one statement
and does them in turn, so Celery's and the claim's per-message costs are shared. The broker
therefore holds ready work only, and just in time (``tasks/frontier/pacing.py`` sets how much):
a message waits tens of milliseconds in the broker, not the time the workers need to drain a
deep queue; URLs that must wait, or that no worker is free for, stay in the frontier, where
pause, cancel and priorities still apply to them (and where the autoscaler counts them:
``crawlplatform_frontier_due_urls``). A polite host gets no more URLs than it can be sent
within ``SCHEDULER_HORIZON_S``; per-host and per-pattern caps and ``max_pages`` skip what is
beyond them. Queued URLs of a host whose circuit is open fail there, in bulk, without a
message.

Reads ``SCHEDULER_HORIZON_S``, ``SCHEDULER_BATCH`` and ``SCHEDULER_TICK_S`` (and, through
``pacing``, the settings it lists).
"""

from __future__ import annotations

import logging
import time
from typing import NamedTuple

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from tasks import broker
from tasks.defaults import setting
from tasks.dispatch import Message, priority, publish
from tasks.fetch import circuit, outcomes, politeness
from tasks.frontier import channels, leadership, requeue, transitions
from tasks.frontier.pacing import Pace, Pacing
from tasks.rules import patterns
from web.models import CrawlJob, FrontierURL, URLState, pending_only

log = logging.getLogger(__name__)
LATER = "later"  # a first release whose path caps were not matched before the transaction


class Candidate(NamedTuple):
    """A due URL as a release reads it."""

    id: int
    depth: int
    host: str
    released: bool  # released before: a retry, not a first release (caps and max_pages)
    url: str
    error_reason: str  # its last attempt's reason (``lease_expired``: its worker was lost)


def _candidates(
    job: CrawlJob, limit: int, blocked: list[str], lock: bool = True
) -> list[Candidate]:
    """The job's due URLs, highest priority first (a spider request's ``priority``), then
    shallowest; ``lock``: locked for this transaction (rows another release holds are passed
    over)."""
    qs = FrontierURL.objects.filter(
        job_id=job.pk, state=URLState.QUEUED, not_before__lte=timezone.now()
    )
    if connection.vendor == "sqlite":  # the partial index that keeps this order
        qs = pending_only(qs)
    if blocked:
        qs = qs.exclude(host__in=blocked)
    qs = qs.order_by("-priority", "depth", "id")
    if lock and connection.features.has_select_for_update_skip_locked:
        qs = qs.select_for_update(skip_locked=True)
    found = qs.values_list("id", "depth", "host", "released", "url", "error_reason")
    return [Candidate._make(row) for row in found[:limit]]


class _Caps:
    """Per-host and per-pattern caps on first releases, counted in Redis per job.

    Which path caps a URL falls under is decided before the release's transaction (user
    patterns never run while rows are locked): :meth:`match_ahead` reads the due URLs the
    release will look at, without locks, and a URL it did not see waits for the next pass."""

    def __init__(self, job: CrawlJob) -> None:
        self.key = f"crawl:caps:{job.pk}"
        self.per_host = job.max_pages_per_host
        self.limits = list((job.path_caps or {}).items())
        self.patterns = patterns.compiled(tuple(p for p, _ in self.limits))
        self.active = self.per_host is not None or bool(self.patterns)
        self.counts: dict[str, int] = {}
        self.matched: dict[int, list[tuple[str, int]]] = {}  # URL id -> its caps' fields, limits

    def match_ahead(self, rows: list[Candidate]) -> None:
        """The path caps of each of ``rows`` (first releases only), outside any transaction."""
        for row in rows:
            if not row.released:
                caps = [self.limits[i] for i in self.patterns.matching(row.url)]
                self.matched[row.id] = [(f"p:{p}", n) for p, n in caps]

    def load(self, hosts: set[str]) -> None:
        if not self.active:
            return
        fields = [f"h:{h}" for h in hosts] + [f"p:{p}" for p, _ in self.limits]
        if not fields:
            return
        values = broker.client().hmget(self.key, fields)
        self.counts = {f: int(v or 0) for f, v in zip(fields, values, strict=True)}

    def admit(self, host: str, url_id: int) -> str:
        """'' if one more first release fits (and count it), ``later`` if its path caps are
        not known yet, else the reason it does not fit."""
        host_field = f"h:{host}"
        if self.per_host is not None and self.counts.get(host_field, 0) >= self.per_host:
            return "host_cap"
        matched = self.matched.get(url_id) if self.patterns else []
        if matched is None:
            return LATER
        if any(self.counts.get(f, 0) >= n for f, n in matched):
            return "path_cap"
        for f in [host_field, *(f for f, _ in matched)]:
            self.counts[f] = self.counts.get(f, 0) + 1
        return ""

    def save(self, released: list[Candidate]) -> None:
        if not self.active or not released:
            return
        pipe = broker.client().pipeline(transaction=False)
        for row in released:
            pipe.hincrby(self.key, f"h:{row.host}", 1)
            for field, _ in self.matched.get(row.id, []):
                pipe.hincrby(self.key, field, 1)
        pipe.execute()


def _max_pages_left(job: CrawlJob) -> int | None:
    if job.max_pages is None:
        return None
    left = job.max_pages - job.released
    if left <= 0:
        never = FrontierURL.objects.filter(job_id=job.pk, state=URLState.QUEUED, released=False)
        skipped = requeue.skip(never, "max_pages")
        if skipped:
            log.info("job=%s max_pages reached: %d URLs skipped", job.pk, skipped)
    return left


def _fail_open_hosts(
    job: CrawlJob, by_host: dict[str, list[Candidate]], opened: dict[str, str]
) -> None:
    for host in [h for h in by_host if h in opened]:
        reason = opened[host]
        unreachable = outcomes.HostUnreachable(f"{reason or 'unreachable'} (circuit open)")
        failed = transitions.fail_host(job.pk, host, unreachable)
        log.warning("job=%s host=%s circuit open (%s): %d queued URLs failed", job.pk, host,
                    reason, failed)  # fmt: skip
        if job.spider:  # its requests with an errback stay queued: released to the gate
            ids = [row.id for row in by_host[host]]
            left = FrontierURL.objects.filter(pk__in=ids, state=URLState.QUEUED)
            kept = set(left.values_list("id", flat=True))
            by_host[host] = [row for row in by_host[host] if row.id in kept]
        if not job.spider or not by_host[host]:
            del by_host[host]


def _messages(
    job: CrawlJob, chosen: list[Candidate], opens: dict[int, float], size: int, per_url: float
) -> list[Message]:
    """The release's messages: URLs of one channel queue and priority share a message when
    the slot that takes it reaches each of them no sooner than its host's slot opens.

    URLs are packed in the order their hosts' slots open (``opens``: seconds from now); a
    message reaches its next URL ``per_url`` seconds after the one before (or when that one's
    slot opened). A URL that no message reaches in time starts a message of its own (whose
    worker waits for its slot, as for any URL released ahead of it). A URL whose last worker
    was lost with it (``lease_expired``) goes alone: if its page is what kills workers, it
    takes no other URL's attempts with it again."""
    split, at_once = channels.weights(), setting("DISPATCH_AT_ONCE_S")
    packing: dict[tuple[int, str], list[list]] = {}  # key -> [[reached at, url ids], ...]
    alone: list[Message] = []
    for row in sorted(chosen, key=lambda r: opens[r.id]):
        key = (priority(row.depth, job.priority), channels.route(job.channel, row.host, split))
        if row.error_reason == requeue.LEASE_EXPIRED:
            alone.append(Message([row.id], job.pk, *key))
            continue
        at = opens[row.id]
        filling = packing.setdefault(key, [])
        message = next((m for m in filling if len(m[1]) < size and m[0] + at_once >= at), None)
        if message is None:
            message = [at, []]
            filling.append(message)
        message[1].append(row.id)
        message[0] = max(message[0], at) + per_url
    packed = [Message(ids, job.pk, *key) for key, found in packing.items() for _, ids in found]
    return alone + packed


def release(job: CrawlJob, pacing: Pacing, epoch: int | None = None) -> tuple[int, float | None]:
    """Move due URLs of ``job`` to SCHEDULED, host-fair and paced, and publish them.

    Hosts take turns (round-robin over the shallowest due URLs), a polite host gets no more
    URLs than it can be sent within ``SCHEDULER_HORIZON_S``, and hosts that are paced out are
    left out of the query so that they cannot crowd the others out (if a look at the due URLs
    ends with every host in it paced out, the pass looks again past them). ``pacing`` is the
    calling scheduler's memory of its passes; ``epoch`` its fencing epoch (None: unfenced).
    Returns how many, and in how many seconds the job may have more to release (None: not
    before new work). A job pinned to a channel that no online worker consumes releases
    nothing: its URLs wait in the frontier until the channel's workers are back, and a spider
    job is released only while an online worker has its spider installed (the workers'
    registry).
    """
    if job.close_reason:  # its spider ended the crawl: what pages in flight add is not fetched
        requeue.skip(FrontierURL.objects.filter(job_id=job.pk), requeue.CLOSE_SPIDER,
                     job.close_reason)  # fmt: skip
        return 0, None  # nothing more: the job finishes once its pages in flight are stored
    if job.channel and job.channel not in channels.served():
        if pacing.note(f"unserved {job.pk}"):
            log.warning("job=%s: pinned to channel %s, which no online worker consumes: its URLs "
                        "wait in the frontier", job.pk, job.channel)  # fmt: skip
        return 0, setting("CHANNEL_SERVED_CACHE_S")
    if job.spider and job.spider not in pacing.spiders():
        return 0, setting("NO_SLOTS_CACHE_S")  # no online worker has its spider: it waits
    outstanding, leased = transitions.count_outstanding(job.pk)
    now, horizon = time.monotonic(), setting("SCHEDULER_HORIZON_S", job)
    size, per_url = pacing.pace_per_slot(job)
    slots = pacing.worker_slots()  # read here: no Redis call while rows are locked
    target = pacing.flow.ready_target(job, outstanding, now, size, slots)
    pacing.flow.released(job.pk, outstanding, now)
    batch = setting("SCHEDULER_BATCH", job)
    budget = min(target - outstanding, batch)
    if budget <= 0:
        refill = pacing.refill_in(job.pk)
        return 0, setting("SCHEDULER_TICK_S") if refill is None else refill
    selection = _Selection(job, budget, now, horizon, pacing.pace)
    # Pacing and caps turn some candidates down: look further ahead when they may apply.
    window = (
        budget * 4 if job.delay > 0 or job.host_concurrency or selection.caps.active else budget
    )
    # Outside the transaction: no user pattern and no Redis call while rows are locked.
    selection.read_ahead(_candidates(job, window * 3, sorted(selection.excluded), lock=False))
    with transaction.atomic():
        leadership.check_fence(epoch)
        selection.left = _max_pages_left(job)  # first releases allowed; retries not counted
        for _ in range(3):
            rows = _candidates(job, window, sorted(selection.excluded))
            selection.look(rows)
            if len(rows) < window or selection.full:
                break
        else:
            selection.held_back = True  # more due rows than three looks took in
        if not selection.chosen:
            return 0, pacing.hint(job, now, horizon, held_back=selection.held_back)
        chosen = selection.chosen
        first = [r for r in chosen if not r.released]
        if first:
            CrawlJob.objects.filter(pk=job.pk).update(released=F("released") + len(first))
            job.released += len(first)
        size = pacing.spread(size, outstanding + len(chosen) + leased, slots)
        messages = _messages(job, chosen, selection.opens, size, per_url)
        transaction.on_commit(lambda: publish(messages))
    pacing.flow.released(job.pk, outstanding + len(chosen), now)
    selection.caps.save(first)
    more = selection.full and budget == batch  # cut by the batch, not by the ready target
    return len(chosen), pacing.hint(job, now, horizon, more=more, held_back=selection.held_back)


class _Selection:
    """The URLs one release picks, look after look at the due URLs (inside its transaction).

    What Redis knows of the hosts (open circuits, delays and next free slots, cap counts) is
    read before the transaction, for the hosts of the due URLs seen then (:meth:`read_ahead`):
    no Redis call waits while rows are locked. A host that shows up only inside the
    transaction (its URLs became due meanwhile) waits for the next pass."""

    def __init__(self, job: CrawlJob, budget: int, now: float, horizon: float, pace: Pace) -> None:
        self.job, self.budget, self.now, self.horizon, self.pace = job, budget, now, horizon, pace
        self.caps = _Caps(job)
        self.left: int | None = None
        self.chosen: list[Candidate] = []
        self.excluded = set(pace.blocked(job.pk, now, horizon))  # hosts not to look at again
        self.taken: dict[str, int] = {}
        self.opens: dict[int, float] = {}  # chosen URL -> seconds until its host's slot
        self.held_back = False  # due URLs wait for a free in-flight place of their host
        self.opened: dict[str, str] = {}  # host -> the failure that opened its circuit
        self.delays: dict[str, tuple[float, float]] = {}  # host -> (delay, wait), seconds

    def read_ahead(self, rows: list[Candidate]) -> None:
        """Read the hosts of ``rows`` from Redis and match their path caps, outside the
        transaction."""
        hosts = list({row.host for row in rows})
        self.opened = circuit.open_hosts(self.job.pk, hosts)
        self.delays = politeness.host_delays(self.job.pk, hosts, self.job.delay, self.job)
        self.caps.load(set(hosts))
        if self.caps.patterns:
            self.caps.match_ahead(rows)

    @property
    def full(self) -> bool:
        return len(self.chosen) >= self.budget

    def look(self, rows: list[Candidate]) -> None:
        """Choose among ``rows`` round-robin by host; schedule the chosen ones."""
        job, before = self.job, len(self.chosen)
        by_host: dict[str, list[Candidate]] = {}
        for row in rows:
            if row.host in self.delays:
                by_host.setdefault(row.host, []).append(row)
            else:
                self.held_back = True  # not read ahead: on the next pass
        _fail_open_hosts(job, by_host, self.opened)
        self.excluded.update(h for h in {r.host for r in rows} if h not in by_host)
        delays = self.delays
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
                first = not row.released
                if self.left is not None and first:
                    if self.left <= 0:
                        continue  # max_pages reached: skipped above, or on the next pass
                    self.left -= 1
                if self.caps.active and first:
                    reason = self.caps.admit(host, row.id)
                    if reason == LATER:
                        self.held_back = True  # its caps are matched on the next pass
                        continue
                    if reason:
                        capped.setdefault(reason, []).append(row.id)
                        continue
                delay, wait = delays[host]
                opens_in = self.pace.take(job.pk, host, delay, wait, self.now, self.horizon)
                if opens_in is None:
                    by_host.pop(host, None)
                    self.excluded.add(host)
                    continue
                self.opens[row.id] = opens_in
                self.taken[host] = self.taken.get(host, 0) + 1
                self.chosen.append(row)
                if self.full:
                    break
        for reason, ids in capped.items():
            requeue.skip(FrontierURL.objects.filter(pk__in=ids), reason)
        transitions.schedule([r.id for r in self.chosen[before:]])
