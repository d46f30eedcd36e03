"""The scheduler: the loop that releases due URLs of every running job, and keeps the books.

Each pass, for every running job, releases its due URLs (``tasks/frontier/release.py``); a
job with no queued, scheduled or leased URL left is finished (decided by the database, never
by an empty list in Redis). Every ``SWEEP_INTERVAL_S`` it also sweeps and reconciles
(``tasks/frontier/reconcile.py``); every ``CHECKPOINT_INTERVAL_S`` it checkpoints the running
jobs.

Between passes it sleeps as long as nothing can be due: while workers take messages, half
the time its ready messages last at their rate, at most two ``SCHEDULER_TICK_S``, else until
the next URL's ``not_before`` or a polite host's next slot, at most ``SCHEDULER_IDLE_S``
(``tasks/frontier/pacing.py``); a worker that adds work wakes it at once
(``tasks/frontier/wakeup.py``), unless a job's own time (a slot, a due URL, a refill) set
a sleep no longer than ``SCHEDULER_WAKE_S``. A sleep only the next sweep bounds (every job
waits for its pages in flight alone) ends at a nudge however short it is: a worker ending a
job's last URLs sends one, and the job finishes then, not at the next sweep.
An idle platform costs a pass every few seconds; a polite crawl about a pass per release.
A pass that released ``SCHEDULER_BATCH`` URLs is followed by another at once.

One scheduler is active at a time (``tasks/frontier/leadership.py``). Standbys loop too
(touching ``SCHEDULER_HEARTBEAT_FILE``, which their probes read), ready to take over. A
database or Redis outage is ridden out: the loop logs one line, waits with a bounded backoff
and carries on.

Reads ``SCHEDULER_IDLE_S``, ``SCHEDULER_WAKE_S``, ``SCHEDULER_BATCH``,
``SCHEDULER_HEARTBEAT_FILE``, ``SWEEP_INTERVAL_S``, ``CHECKPOINT_INTERVAL_S``,
``CANARY_ANALYSE_EVERY_S`` and ``LEADER_TTL_S``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from django.db import DatabaseError, close_old_connections, connections
from redis.exceptions import RedisError

from crawlplatform import logs
from tasks import live
from tasks.defaults import setting
from tasks.frontier import canary, jobs, leadership, wakeup
from tasks.frontier.jobconfig import HEAVY_FIELDS
from tasks.frontier.leadership import NotLeader
from tasks.frontier.pacing import Pacing
from tasks.frontier.reconcile import sweep
from tasks.frontier.release import release
from tasks.outage import Outage
from web.models import PENDING_STATES, CrawlJob, FrontierURL, JobState

log = logging.getLogger(__name__)
_REDIS_TICK_S = 0.1  # a BLPOP's timeout ends at Redis's next timer tick (its hz, 10 by default)



def finish_if_done(job: CrawlJob) -> bool:
    """Finish ``job`` if the database holds no pending URL for it."""
    if FrontierURL.objects.filter(job_id=job.pk, state__in=PENDING_STATES).exists():
        return False
    if job.transition(JobState.FINISHED):
        jobs.finished(job)
        log.info("job=%s finished", job.pk)
    return True


class Pass(NamedTuple):
    """What one pass did, and how long its scheduler may sleep after it."""

    released: int  # URLs released
    pause: float  # seconds to the next pass
    timed: bool  # a job's own time set the pause: a nudge would not bring its work sooner


class Scheduler:
    """The scheduling loop; ``run`` until ``stop`` is set (or :meth:`shutdown` is called).
    ``on_finished(job_id)``, if given, is called when a pass finds a job done (the crawl
    command's progress wakes at its job's end instead of at its next look)."""

    def __init__(self, on_finished: Callable[[int], None] | None = None) -> None:
        self.on_finished = on_finished
        self.identity = uuid.uuid4().hex
        self.stop = threading.Event()
        self.epoch: int | None = None
        self.pacing = Pacing()
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
        won = leadership.renew(self.identity)
        if won == 2 or (won and self.epoch is None):
            self.epoch = leadership.advance_epoch()
            log.info("scheduler %s leads (epoch %d)", self.identity[:8], self.epoch)
        elif not won:
            self.epoch = None
        return bool(won)

    def resign(self) -> None:
        leadership.resign(self.identity)
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
            released, hint = release(job, self.pacing, self.epoch)
        except (NotLeader, DatabaseError, RedisError):
            raise
        except Exception:
            log.exception("job=%s: release failed; other jobs go on", job.pk)
            return 0, 1.0
        if released == 0 and hint is None and finish_if_done(job) and self.on_finished:
            self.on_finished(job.pk)
        return released, hint

    def tick(self) -> Pass:
        """One pass over the running jobs."""
        running = self._running()
        released, hints = 0, []
        for job in running:
            with logs.about(crawl_job=job.pk):
                n, hint = self._pass_job(job)
            released += n
            if hint is not None:
                hints.append(hint)
        now = time.monotonic()
        sweep_every = setting("SWEEP_INTERVAL_S")
        if now - self._last_sweep >= sweep_every:
            self._last_sweep = now
            sweep()
            self.pacing.pace.forget_before(now)
        if running and now - self._last_analysis >= setting("CANARY_ANALYSE_EVERY_S"):
            self._last_analysis = now
            for decision in canary.analyse():
                log.warning("canary analysis: %s", decision)
        if now - self._last_checkpoint >= setting("CHECKPOINT_INTERVAL_S"):
            self._last_checkpoint = now
            for job in running:
                jobs.checkpoint(job, "periodic")
        # the leader wakes to renew its lease before it runs out, however long it may idle
        pause = min([setting("SCHEDULER_IDLE_S"), setting("LEADER_TTL_S") / 2, *hints])
        if running:
            pause = min(pause, max(0.0, self._last_sweep + sweep_every - now))
        return Pass(released, pause, timed=bool(hints) and pause >= min(hints))

    def _sleep(self, seconds: float, timed: bool) -> None:
        """Sleep until due, or until a worker adds work.

        Work added during a pass is seen by a worker's nudge only if the pass asked for nudges
        before it began (``_listening``): a pass that ends in a sleep without having asked is
        followed by one more pass that asks. While the scheduler keeps sleeping, every pass
        asks. A sleep no longer than ``SCHEDULER_WAKE_S`` that a job's own time set (``timed``)
        is not cut short at all: a polite crawl, whose every page adds links, would pay a pass
        per page for nothing. Without such a time, what a nudge says (new links, URLs ended: a
        job may be over) is all the scheduler waits for; but Redis ends a wait at its own timer
        ticks only, so a sleep shorter than one is plain."""
        if seconds < _REDIS_TICK_S or (timed and seconds <= setting("SCHEDULER_WAKE_S")):
            self._listening = False
            self.stop.wait(seconds)
            return
        asked, self._listening = self._listening, True
        if asked and wakeup.wait(seconds):
            self.pacing.due.clear()  # new work: what is due next may have changed
        wakeup.listen(setting("SCHEDULER_IDLE_S") + 1)  # for the next pass

    def run(self) -> None:
        log.info("scheduler %s started", self.identity[:8])
        live.start()
        outage = Outage(log, "scheduler: database or Redis")
        try:
            while not self.stop.is_set():
                Path(setting("SCHEDULER_HEARTBEAT_FILE")).touch()
                close_old_connections()
                try:
                    if not self.is_leader():
                        self.stop.wait(setting("LEADER_TTL_S") / 2)
                        continue
                    last = self.tick()
                    leadership.count_pass()
                except NotLeader as exc:
                    log.warning("scheduler %s steps down: %s", self.identity[:8], exc)
                    self.epoch = None
                    self.stop.wait(setting("LEADER_TTL_S"))
                    continue
                except (DatabaseError, RedisError) as exc:
                    connections.close_all()
                    self.stop.wait(outage.failed(exc))  # one line per outage, not per try
                    continue
                except Exception:
                    log.exception("scheduler pass failed; retrying")
                    self.stop.wait(1.0)
                    continue
                outage.recovered()
                if last.released >= setting("SCHEDULER_BATCH"):
                    continue  # more is due right now
                try:
                    self._sleep(last.pause, last.timed)
                except RedisError:
                    self.stop.wait(min(last.pause, 1.0))
        finally:
            try:
                self.resign()
            except RedisError:
                pass
            connections.close_all()
            log.info("scheduler %s stopped", self.identity[:8])
