"""Process the URLs of one message: claim, then take each through the steps of one URL in
turn. Called by the Celery task.

The pipeline only orchestrates; each step lives in its room: the gates (robots.txt, the
host's slot and circuit: ``tasks/fetch/gates.py``), the fetch (``fetching.py``, ``render.py``),
the classification and the host's anti-bot ladder (``gates.py``, ``antibot.py``), the URL's
recorded move (``tasks/frontier/transitions.py``), and the page's parse, links and commit
(``tasks/content/pages.py``, ``links.py``). Whatever happens while a URL is processed ends in
a recorded outcome: a transient one retries on the URL's own backoff, anything else fails the
URL with its reason, and an unexpected exception becomes an ``internal_error`` with its
traceback in the worker log. Nothing loops: every attempt counts, but a refusal that is the
identity's (``tasks/fetch/refusals.py``), which gives the attempt back and is bounded by the
job's patience (``BAN_PATIENCE_S``).

Reads ``BATCH_BUDGET_S``, ``DB_RETRY_S``, ``TASK_SOFT_TIME_LIMIT_S`` and the fetch settings
(``fetching.limits_for``).
"""

from __future__ import annotations

import functools
import logging
import time

from celery.exceptions import SoftTimeLimitExceeded
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from redis.exceptions import RedisError

from crawlplatform import logs
from tasks.content import callbacks, pages, rows
from tasks.content.links import JobCache, cache_for, in_scope
from tasks.defaults import setting
from tasks.fetch import antibot, fetching, gates, outcomes, refusals, render, sessions
from tasks.frontier import canary, leases, wakeup
from tasks.frontier.claims import Claim, LeaseLost
from tasks.frontier.db import lend_connection_back, with_retries
from tasks.frontier.requeue import give_back
from tasks.frontier.transitions import (
    claim_many,
    defer,
    give_up,
    past_last_attempt,
    record_failure,
    record_unchanged,
)
from tasks.rules import guard
from tasks.rules.urls import host_of
from tasks.worker import lifecycle, metrics
from web.models import CrawlJob, JobState

log = logging.getLogger(__name__)


def process(url_id: int, job_id: int, rendering: bool = False) -> str | None:
    """Fetch and store URL ``url_id`` if it is ours to do; returns the URL's new state.
    ``rendering``: a render worker's task (headless Chromium instead of a plain fetch)."""
    states = process_many([url_id], job_id, rendering)
    return states[0] if states else None


def process_many(url_ids: list[int], job_id: int, rendering: bool = False) -> list[str | None]:
    """The URLs of one message, claimed in one statement and done one after another; the new
    state of each one that was ours to do.

    The message's URLs can all be fetched by the time the worker reaches them
    (``tasks/frontier/release.py`` packs them so) and are held by this worker's lease
    renewal from the claim on. The message ends early when it has worked ``BATCH_BUDGET_S``,
    the worker is shutting down, or the job stopped running (looked up at most every
    ``JOB_STATE_CHECK_S``): the URLs it has not started go back to the frontier, due now, their
    attempts given back (skipped, if the job has ended).
    """
    with logs.about(crawl_job=job_id):
        return _process_claims(claim_many(url_ids, job_id), job_id, rendering)


def _process_claims(claims: list[Claim], job_id: int, rendering: bool) -> list[str | None]:
    for claimed in claims:
        leases.hold(claimed.url.pk, claimed.attempt)
    states: list[str | None] = []
    began = checked = time.monotonic()
    try:
        for n, claimed in enumerate(claims):
            if n and claims[n - 1].closed_crawl:  # its spider ended the crawl: no more of it
                _give_back(claims[n:])
                break
            if n and time.monotonic() - checked >= setting("JOB_STATE_CHECK_S"):
                checked = time.monotonic()
                if not CrawlJob.objects.filter(pk=job_id, state=JobState.RUNNING,
                                               close_reason="").exists():  # fmt: skip
                    _give_back(claims[n:])
                    break
            if n and (lifecycle.stopping.is_set() or _past_budget(claimed, began)):
                _give_back(claims[n:])
                break
            states.append(_process_one(claimed, rendering))
    finally:
        for claimed in claims:
            leases.let_go(claimed.url.pk)
    if claims:  # work again (new links, retries, URLs given back), or the job's last URL ended
        wakeup.nudge()
    return states




def _past_budget(claimed: Claim, began: float) -> bool:
    return time.monotonic() - began > setting("BATCH_BUDGET_S", claimed.job)


def _give_back(claims: list[Claim]) -> None:
    """Claimed, not started: back to the frontier now (else the lease sweep does it later)."""
    try:
        given = with_retries(lambda: give_back(claims))
        log.info("job=%s: %d URLs of a message given back unstarted", claims[0].job.pk, given)
    except DatabaseError as exc:
        connection.close()
        log.warning("job=%s: %d unstarted URLs left to the lease sweep (%s)", claims[0].job.pk,
                    len(claims), exc)  # fmt: skip


def _process_one(claimed: Claim, rendering: bool) -> str | None:
    began = time.monotonic()
    leases.hold(claimed.url.pk, claimed.attempt)  # its time limit runs from its own start
    try:
        lend_connection_back()  # a fetch takes long: the pool serves other threads meanwhile
        with logs.about(url_id=claimed.url.pk, url=claimed.url.url, spider=claimed.job.spider):
            state = _process_safely(claimed, rendering)
    finally:
        leases.let_go(claimed.url.pk)
    canary.count(state, claimed.reason, claimed.deferred, time.monotonic() - began,
                 pinned=bool(claimed.job.channel))  # fmt: skip
    if state is not None:
        metrics.outcome(claimed.job.pk, state, claimed.reason)
    return state


def _process_safely(claimed: Claim, rendering: bool = False) -> str | None:
    """The pipeline, with every way it can go wrong turned into the URL's outcome."""
    job, url = claimed.job, claimed.url.url
    try:
        if past_last_attempt(claimed):
            return give_up(claimed)
        return _process_claimed(claimed, rendering)
    except LeaseLost as exc:
        log.warning("discarded work: %s", exc)
        return None
    except RedisError as exc:
        # Robots, politeness and caches live in Redis: without it this URL waits a moment.
        log.warning("job=%s url=%s: Redis unavailable (%s); back in the queue", job.pk, url, exc)
        return _end(
            claimed, lambda: defer(claimed, setting("DB_RETRY_S", job), "redis_unavailable")
        )
    except (OperationalError, InterfaceError) as exc:
        # The database is away or aborted the commit. Nothing was committed; the attempt
        # counts (so a page whose commit always fails still ends), or, if even that cannot be
        # written, its lease expires and the sweep counts it.
        log.warning("job=%s url=%s: database unavailable, page not stored: %s", job.pk, url, exc)
        connection.close()  # the next statement gets a fresh connection
        failure = outcomes.DatabaseUnavailable(f"{type(exc).__name__}: {exc}"[:500])
        return _end(claimed, lambda: record_failure(claimed, failure))
    except DatabaseError as exc:  # the database refused the page's values: permanent
        log.exception("job=%s url=%s: database refused the page", job.pk, url)
        failure = outcomes.StoreRefused(f"{type(exc).__name__}: {exc}"[:500])
        return _end(claimed, lambda: record_failure(claimed, failure))
    except SoftTimeLimitExceeded:
        limit = setting("TASK_SOFT_TIME_LIMIT_S", job)
        failure = outcomes.TaskTimeout(f"still running after {limit:g} s")
        return _end(claimed, lambda: record_failure(claimed, failure))
    except Exception as exc:  # a bug or a case nobody foresaw: recorded, never a loop
        log.exception("job=%s url=%s: unexpected error", job.pk, url)
        failure = outcomes.InternalError(f"{type(exc).__name__}: {exc}"[:500])
        return _end(claimed, lambda: record_failure(claimed, failure))


def _end(claimed: Claim, move) -> str | None:
    """Record the URL's move, best effort: if the database cannot take it, the lease sweep will."""
    try:
        return move()
    except LeaseLost as exc:
        log.warning("discarded work: %s", exc)
    except DatabaseError as exc:
        connection.close()
        log.warning("job=%s url=%s: outcome not recorded (%s); left to the lease sweep",
                    claimed.job.pk, claimed.url.url, exc)  # fmt: skip
    return None


def _process_claimed(claimed: Claim, rendering: bool = False) -> str:
    """One claimed URL, step by step: gates, fetch, classify, ladder, record, then parse, links
    and commit (``pages.store``). A step that ends the URL returns its new state."""
    job, cache, host = claimed.job, cache_for(claimed.job), host_of(claimed.url.url)
    fail = functools.partial(_fail, cache=cache)
    if job.obey_robots and (state := gates.robots_txt(claimed, cache, fail)) is not None:
        return state  # robots.txt forbids it, or cannot be read now
    passage = gates.acquire(claimed, host)
    if not passage.slot.granted:
        return defer(claimed, passage.slot.wait, "throttled")
    if (state := gates.through_circuit(claimed, host, passage.slot, fail)) is not None:
        return state  # the host's circuit is open, or its probe is under way
    if (state := antibot.render_elsewhere(claimed, host, passage.slot, rendering)) is not None:
        return state  # a render worker's URL, or a render step this worker cannot take
    passage = gates.wait_turn(job, host, passage)
    try:
        session = antibot.open_session(job, host, passage.who, passage.slot.jar)
    except outcomes.ProxyFailed as exc:
        return antibot.proxy_failed(claimed, host, passage, exc)
    if (state := antibot.warm_session(claimed, cache, host, passage, session)) is not None:
        return state  # the warm-up page took this slot
    fetched = _fetch(claimed, cache, passage, session, rendering)
    banned = antibot.ban(job, host, fetched.resp, fetched.outcome)
    outcome = gates.classify(claimed, cache, host, passage.slot, fetched, banned)
    sessions.save(job.pk, host, passage.who.key, session.jar, session.visitor.set_cookies)
    if banned is None:
        if (state := refusals.suspected(claimed, cache, host, passage, session, outcome)):
            return state  # a reset or a 503 that refuses the identity: as a ban
        antibot.count_answer(claimed, host, passage, fetched, outcome)
    elif (state := refusals.judge(claimed, cache, host, passage, session, banned)) is not None:
        return state  # the identity's refusal (or a warm-up first): it waits, its attempt kept
    return _record(claimed, cache, fetched, banned if banned is not None else outcome, rendering)


def _fetch(
    claimed: Claim,
    cache: JobCache,
    passage: gates.Passage,
    session: antibot.Session,
    rendering: bool,
) -> fetching.Fetched:
    """The request, plain or rendered (a recrawl's conditional one if the previous run kept
    validators): its answer, or the outcome it ended in."""
    job = claimed.job
    outcome: outcomes.CrawlOutcome | None = None
    resp = None
    asked = claimed.url.request  # a spider's request: method, headers, body, cookies
    conditional = None if rendering or asked else pages.validators(claimed)
    takes = callbacks.takes(job, asked) if job.spider else callbacks.Takes(False, ())
    started = time.monotonic()
    metrics.IN_FLIGHT.inc()
    try:
        kwargs = {"conditional": conditional} if conditional else {}
        if (asked or takes.redirects) and not rendering:
            kwargs["request"] = fetching.Asked.of(asked, session.visitor, takes.redirects,
                                                  job.proxies)  # fmt: skip
        get = render.fetch if rendering else fetching.fetch
        resp = get(
            asked["url"] if asked else claimed.url.url,
            user_agent=passage.who.user_agent,
            limits=fetching.limits_for(job, takes.errors, rows.download_timeout(asked)),
            allow=guard.allowed(job),
            in_scope=lambda u: bool(in_scope(cache, u)),
            visitor=session.visitor,
            **kwargs,
        )
    except outcomes.CrawlOutcome as exc:
        outcome = rows.not_retried(asked, exc)
    finally:
        metrics.IN_FLIGHT.dec()
        elapsed = time.monotonic() - started
        metrics.FETCH_SECONDS.observe(elapsed)
    return fetching.Fetched(resp, outcome, elapsed, bool(conditional))


def _fail(claimed: Claim, outcome: outcomes.CrawlOutcome, cache: JobCache) -> str:
    """Record the URL's ``outcome``; a spider request's callback or errback sees it where it
    may (``callbacks.failed``), whether the fetch or a gate before it (robots.txt, an open
    circuit) ended it."""
    if claimed.job.spider and callbacks.for_the_spider(claimed, outcome):
        return callbacks.failed(claimed, cache, outcome)
    return record_failure(claimed, outcome)


def _record(
    claimed: Claim,
    cache: JobCache,
    fetched: fetching.Fetched,
    outcome: outcomes.CrawlOutcome | None,
    rendering: bool,
) -> str:
    """The URL's outcome if the fetch ended in one; else its page, unchanged or stored."""
    if outcome is not None:
        state = _fail(claimed, outcome, cache)
        log.info("job=%s url=%s outcome=%s state=%s", claimed.job.pk, claimed.url.url,
                 outcome.reason, state)  # fmt: skip
        return state
    if fetched.resp.status == 304 and fetched.conditional:
        return record_unchanged(claimed)  # the previous run's page stands
    metrics.FETCHED_BYTES.inc(len(fetched.resp.raw_body or fetched.resp.body))
    if claimed.job.spider:
        return callbacks.store(claimed, cache, fetched.resp)  # the spider's callback decides
    return pages.store(claimed, cache, fetched.resp, rendering)
