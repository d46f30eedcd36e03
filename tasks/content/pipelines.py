"""The item pipelines this worker process holds open, one set per job run, while its pages
run callbacks: opened on a run's first page here, closed when the run ends (finished,
cancelled, failed, deleted, recrawled), so that ``close_spider`` and the spider's ``closed``
run then, not when the worker leaves; and closed at the latest when the process leaves.

Reads ``PIPELINES_CHECK_S`` (how often ended runs are looked for) and
``SPIDER_CALLBACK_TIMEOUT_S`` (how long a leaving process waits for a close under way).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from dataclasses import dataclass

from django.db import connections

from crawlplatform import logs
from crawlplatform.spiders import Spider
from tasks.content import items as itempipes
from tasks.defaults import setting
from tasks.frontier.claims import Claim
from tasks.frontier.stats import finish_reason
from web.models import CrawlJob, JobState

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Held:
    """A job run's pipelines in this process, and the pages using them now (under _opened)."""

    pipes: itempipes.Pipelines
    users: int = 0
    ended: bool = False  # the run ended: the last user closes them
    reason: str = "finished"  # why, as the spider's ``closed`` is told


_pipelines: dict[tuple[int, int], _Held] = {}
_opened = threading.Lock()  # the worker's threads open and give back pipelines one at a time
_looked = [0.0]  # when close_ended last looked at the jobs (monotonic)
_looking = threading.Lock()  # one look at a time, on a thread of its own
_closer: list[threading.Thread] = []  # the thread of the last look, which close_all waits for
LIVE_STATES = (JobState.RUNNING, JobState.PAUSED)  # a paused job's pipelines stay open


def take(claimed: Claim, spider: Spider) -> _Held:
    """This process's pipelines of the claimed URL's job run, opened on first use (the run is
    the claim's, which the cached job may not know yet), held until ``give_back``: pipelines
    whose run ended are closed when the last page using them gives them back."""
    run = (claimed.job.pk, claimed.run)
    with _opened:
        held = _pipelines.get(run)
        if held is None:
            held = _pipelines[run] = _Held(itempipes.Pipelines(spider))
        held.users += 1
    return held


def give_back(held: _Held) -> None:
    with _opened:
        held.users -= 1
        last = held.ended and not held.users
    if last:
        held.pipes.close(held.reason)
    close_ended_soon()


_GONE = ("", "", None, 0)  # the end of a run recrawled since, or of a deleted job: finished


def close_ended(every: float | None = None) -> None:
    """Close this process's pipelines of every job run that ended (finished, cancelled, failed,
    deleted, or recrawled since), so that ``close_spider`` runs when the job ends, not when the
    worker leaves; pipelines a page still uses are closed when it gives them back. Looks at
    the database at most once every ``every`` seconds (``PIPELINES_CHECK_S`` by default)."""
    if not _time_to_look(every):
        return
    _looked[0] = time.monotonic()
    runs = list(_pipelines)  # those opened while the database answers are looked at next time
    jobs = CrawlJob.objects.filter(pk__in={job for job, _ in runs})
    found = jobs.values_list("pk", "run", "state", "close_reason", "max_pages", "released")
    ends = {(pk, run): end for pk, run, *end in found}  # how finish_reason reads a run's end
    for ended in (run for run in runs if ends.get(run, _GONE)[0] not in LIVE_STATES):
        with _opened:
            held = _pipelines.pop(ended, None)
            if held is None:
                continue
            held.ended = True
            held.reason = finish_reason(*ends.get(ended, _GONE))  # Scrapy's reasons
            unused = not held.users
        with logs.about(crawl_job=ended[0]):  # its lines, close_spider's too, name the job
            log.info("job=%s run=%s: its item pipelines are closed", *ended)
            if unused:
                held.pipes.close(held.reason)



def _time_to_look(every: float | None = None) -> bool:
    """Whether this process holds pipelines and last looked at their jobs ``every`` seconds
    ago or more (``PIPELINES_CHECK_S`` by default)."""
    every = setting("PIPELINES_CHECK_S") if every is None else every
    return bool(_pipelines) and time.monotonic() - _looked[0] >= every


def close_ended_soon() -> None:
    """``close_ended`` on a thread of its own, if it is time to look: the database and the
    pipelines' ``close_spider`` (user code) hold up neither the worker's pages nor the loop
    of its heartbeat, which calls this too, so that an idle worker closes them as well."""
    if not _time_to_look() or not _looking.acquire(blocking=False):
        return

    def look() -> None:
        try:
            close_ended()
        except Exception as exc:  # the database may be away: the next call looks again
            log.warning("item pipelines of ended jobs not checked: %s", exc)
        finally:
            connections.close_all()  # this thread's own connection
            _looking.release()

    thread = threading.Thread(target=look, name="close-pipelines", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no thread to be had now (the interpreter is leaving)
        _looking.release()
        return
    _closer[:] = [thread]


def opened() -> int:
    """How many job runs' pipelines this process holds open."""
    return len(_pipelines)


@atexit.register
def close_all(look: bool = False) -> None:
    """The process leaves: a close under way on its thread is waited for (a daemon, cut short
    at exit otherwise), within a callback's time (a ``close_spider`` that hangs holds up the
    exit no longer); with ``look`` (a worker's warm shutdown: a crawl command stops its
    workers as soon as its job finishes, before they looked), the runs that ended are closed
    with their reason; then every pipeline the process still holds is closed as
    ``shutdown``. A forked worker leaves by ``os._exit``, which runs no ``atexit`` hook: its
    shutdown signal calls this."""
    for thread in _closer:
        thread.join(setting("SPIDER_CALLBACK_TIMEOUT_S"))
    if look and _pipelines:
        try:
            close_ended(every=0)
        except Exception as exc:  # the database may be what is going away
            log.warning("item pipelines of ended jobs not checked at shutdown: %s", exc)
    while _pipelines:
        _pipelines.popitem()[1].pipes.close("shutdown")
