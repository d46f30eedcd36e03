"""Pacing: how fast the scheduler may release each job's URLs, and when to look again.

The leader's view of each polite host (how far ahead of now it has released URLs), each job's
flow (the rate at which its workers take its messages, which sets how many may wait in the
broker: about what they take in ``DISPATCH_LOOKAHEAD_S``, between ``READY_MIN`` and
``READY_PER_JOB`` messages), the workers' slots (their registry, read at most every
``SLOTS_CACHE_S``), the seconds a slot spends on each of a job's URLs (as its workers report
them), how many URLs a message carries (``DISPATCH_BATCH``, ``DISPATCH_BATCH_S``; never so
many that a slot goes without) and in how many seconds a job may have something to release
(``SCHEDULER_TICK_S``).

Reads ``DISPATCH_LOOKAHEAD_S``, ``READY_MIN``, ``READY_PER_JOB``, ``DISPATCH_BATCH``,
``DISPATCH_BATCH_S``, ``SLOT_TIME_MEMORY`` and ``SCHEDULER_TICK_S``.
"""

from __future__ import annotations

import contextlib
import math
import time

from django.conf import settings
from django.db import connection
from django.db.models import Min
from django.utils import timezone
from redis.exceptions import RedisError

from tasks import broker
from tasks.defaults import setting
from tasks.frontier import wakeup
from tasks.worker import registry
from web.models import CrawlJob, FrontierURL, URLState, pending_only


class Pace:
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


class Flow:
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




class SlotTime:
    """How long a worker slot spends on each of a job's URLs, as its workers report it after
    each message (``wakeup.PACE``: seconds and URLs, summed; a sleep for a host's slot not
    counted, since a larger message spends it on its other URLs): what the workers' slots
    take per URL measured where it is spent, from a crawl's first pages on. The job's rate tells
    it only once every slot is busy, which in a crawl's first second it is not."""

    def __init__(self) -> None:
        self.totals: dict[int, tuple[float, int]] = {}  # job -> (seconds, URLs) last read
        self.seconds: dict[int, float] = {}  # job -> smoothed seconds per URL
        self.counted: dict[int, int] = {}  # job -> URLs smoothed in

    def read(self, job_id: int, least: int = 1) -> float | None:
        """Seconds per URL of the job's slots, once its workers have reported ``least`` URLs
        (None before: a seed or two fetched fast say little of the pages that follow)."""
        with contextlib.suppress(RedisError):  # Redis away: the last estimate holds
            found = broker.client().hmget(wakeup.PACE.format(job=job_id), "s", "n")
            if found[1] is None:
                self.totals.pop(job_id, None)  # expired: the next totals begin again
            else:
                self.take(job_id, float(found[0]), int(found[1]))
        return self.seconds.get(job_id) if self.counted.get(job_id, 0) >= least else None

    def take(self, job_id: int, seconds: float, urls: int) -> None:
        """The job's totals as last read: the URLs reported since the read before, smoothed
        in (totals that went down were forgotten and begun again: taken as they are)."""
        before_s, before_n = self.totals.get(job_id, (0.0, 0))
        if urls < before_n or seconds < before_s:
            before_s, before_n = 0.0, 0
        self.totals[job_id] = (seconds, urls)
        if urls == before_n:
            return
        sample = (seconds - before_s) / (urls - before_n)
        self.counted[job_id] = self.counted.get(job_id, 0) + urls - before_n
        known = self.seconds.get(job_id)
        memory = setting("SLOT_TIME_MEMORY")
        weight = 1.0 if known is None else 1 - math.exp(-(urls - before_n) / memory)
        self.seconds[job_id] = sample if known is None else known + weight * (sample - known)


class Pacing:
    """What a scheduler remembers between its passes: its hosts' pace, its jobs' flow and
    slot time, when their next URLs are due and the workers' slots. Each :class:`Scheduler`
    owns one."""

    def __init__(self) -> None:
        self.pace = Pace()
        self.flow = Flow()
        self.slot_time = SlotTime()
        self.due: dict[int, tuple[float, float | None]] = {}  # job -> (when read, s to next due)
        # when the slots were read, how many, and how many the read before found
        self.slots_read: list[float] = [-setting("SLOTS_CACHE_S"), 0, 0]
        self.noted: dict[str, float] = {}  # what was last logged, and when
        self.spiders_read: tuple[float, frozenset[str]] = (-setting("SLOTS_CACHE_S"), frozenset())

    def note(self, what: str) -> bool:
        """Whether to log ``what`` now: once a minute while it lasts."""
        now = time.monotonic()
        if now - self.noted.get(what, -60.0) < 60.0:
            return False
        self.noted[what] = now
        return True

    def next_due(self, job: CrawlJob) -> float | None:
        """Seconds until the job's next waiting URL is due (None: none waits)."""
        now = time.monotonic()
        cached = self.due.get(job.pk)
        if cached is not None and now - cached[0] < setting("DUE_CACHE_S"):
            return None if cached[1] is None else max(0.0, cached[1] - (now - cached[0]))
        at = timezone.now()
        waiting = FrontierURL.objects.filter(
            job_id=job.pk, state=URLState.QUEUED, not_before__gt=at
        )
        if connection.vendor == "sqlite":  # the job's queued URLs alone, by the partial index
            waiting = pending_only(waiting)
        first = waiting.aggregate(t=Min("not_before"))["t"]
        seconds = None if first is None else (first - at).total_seconds()
        self.due[job.pk] = (now, seconds)
        return seconds

    def hint(
        self,
        job: CrawlJob,
        now: float,
        horizon: float,
        *,
        more: bool = False,
        held_back: bool = False,
    ) -> float | None:
        """Seconds until the job may have something to release; None: not before new work.

        ``more``: ``SCHEDULER_BATCH`` cut the pass with URLs still due; ``held_back``: due
        URLs wait for a free in-flight place of their host (freed by a finishing page, which
        does not wake us)."""
        if more:
            return 0.0
        opening = self.pace.next_opening(job.pk, now, horizon)
        hints = [t for t in (opening, self.next_due(job)) if t is not None]
        if held_back:
            hints.append(setting("SCHEDULER_TICK_S"))
        refill = self.refill_in(job.pk)
        if refill is not None:
            hints.append(refill)
        return min(hints, default=None)

    def refill_in(self, job_id: int) -> float | None:
        """Seconds until the job's ready messages are worth topping up (None: it has none):
        half the time they last at its measured rate, and no more than two ticks, since the
        measured rate lags behind a crawl that speeds up (its first seconds) and the broker
        would run dry meanwhile; a tick while no rate is measured yet (its first pass)."""
        if not self.flow.last.get(job_id, (0.0, 0))[1]:
            return None
        tick = setting("SCHEDULER_TICK_S")
        drain = self.flow.drains_in(job_id)
        return tick if drain is None else min(drain / 2, 2 * tick)

    def worker_slots(self) -> int:
        """Pages the online crawl workers work on at once (their registry, ``heartbeat.py``).

        Workers started together register one after another: while the count moves it is
        read again soon, so that a crawl's first seconds are not sized for the first worker
        alone."""
        now = time.monotonic()
        when, count, before = self.slots_read
        settled = count and count == before
        if now - when >= (setting("SLOTS_CACHE_S") if settled else setting("NO_SLOTS_CACHE_S")):
            wall, render = time.time(), {settings.RENDER_QUEUE}
            crawling = [
                w
                for w in registry.workers()
                if registry.online(w, wall) and set(str(w["queues"]).split(",")) - render
            ]
            self.slots_read[:] = [now, sum(int(w["slots"]) for w in crawling), count]
        return int(self.slots_read[1])

    def spiders(self) -> frozenset[str]:
        """The spiders some online crawl worker has installed (their registry), read as often
        as the slots: a spider job is released only while one of them has its spider."""
        now = time.monotonic()
        when, names = self.spiders_read
        if now - when >= setting("SLOTS_CACHE_S" if names else "NO_SLOTS_CACHE_S"):
            wall = time.time()
            names = frozenset(
                name for w in registry.workers() if registry.online(w, wall)
                for name in str(w.get("spiders", "")).split(",") if name
            )  # fmt: skip
            self.spiders_read = (now, names)
        return names

    def pace_per_slot(self, job: CrawlJob) -> tuple[int, float]:
        """URLs per message for the job now, and the seconds one URL takes in a worker slot.

        A message holds a slot for about ``DISPATCH_BATCH_S`` at the seconds the job's URLs
        take in a slot (1 to ``DISPATCH_BATCH`` URLs): as its workers report them, once they
        have reported as many URLs as they have slots (:class:`SlotTime`), else as the rate
        its URLs are taken at says (which assumes every slot busy). Fast pages share
        messages, and so their per-message cost; slow pages, or a job whose pace is not
        known yet, go one by one, so that no URL waits in a slot behind another's slow
        fetch. :meth:`spread` then keeps every slot in work."""
        most, slots = setting("DISPATCH_BATCH", job), self.worker_slots()
        if most <= 1 or slots <= 0:
            return 1, 0.0
        per_url = self.slot_time.read(job.pk, least=slots)  # a URL a slot, at least
        if per_url is None:
            rate = self.flow.rate.get(job.pk, 0.0)
            if rate <= 0:
                return 1, 0.0
            per_url = slots / rate
        size = int(setting("DISPATCH_BATCH_S", job) / max(per_url, 1e-6))
        return max(1, min(most, size)), per_url

    @staticmethod
    def spread(size: int, urls: int, slots: int) -> int:
        """URLs per message when ``urls`` of the job are released, waiting or being fetched,
        for ``slots`` worker slots: no more than ``size``, and few enough that each slot has a
        message of them while they are fewer than the slots can hold (a crawl's first pages;
        its last ones, as far as those in flight leave slots free), which no larger message
        would fetch sooner."""
        return max(1, min(size, urls // slots)) if slots > 0 else 1
