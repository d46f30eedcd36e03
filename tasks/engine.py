"""Process the URLs of one message: claim, then fetch, classify, parse and commit each in
turn. Called by the Celery task.

The pipeline only orchestrates: robots.txt (``tasks/fetch/robots.py``), the host's slot and
circuit (``politeness.py``, ``circuit.py``), the fetch (``fetching.py``), the anti-bot policy
(``antibot.py``), the page (``tasks/content/``) and the URL's move
(``tasks/frontier/transitions.py``). Whatever happens while a URL is processed ends in a
recorded outcome: a transient one retries on the URL's own backoff, anything else fails the
URL with its reason, and an unexpected exception becomes an ``internal_error`` with its
traceback in the worker log. Nothing loops: every attempt counts.

Reads the fetch settings and ``BATCH_BUDGET_S``; a page's links go through this process's
link caches (``tasks/content/links.py``).
"""

from __future__ import annotations

import logging
import time

from celery.exceptions import SoftTimeLimitExceeded
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from redis.exceptions import RedisError

from tasks.content import pages
from tasks.content.links import cache_for, in_scope
from tasks.defaults import setting
from tasks.fetch import (
    antibot,
    circuit,
    fetching,
    gates,
    identity,
    ladder,
    outcomes,
    politeness,
    proxies,
    render,
    sessions,
)
from tasks.frontier import canary, leases, wakeup
from tasks.frontier.transitions import (
    Claim,
    LeaseLost,
    claim_many,
    defer,
    give_back,
    give_up,
    lend_connection_back,
    park,
    past_last_attempt,
    record_failure,
    record_unchanged,
    retry_banned,
    with_retries,
)
from tasks.rules import guard
from tasks.rules.urls import host_of
from tasks.worker import lifecycle, loop, metrics
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
    (``tasks/frontier/scheduler.py`` packs them so) and are held by this worker's lease
    renewal from the claim on. The message ends early when it has worked ``BATCH_BUDGET_S``,
    the worker is shutting down, or the job stopped running (looked up at most every
    ``JOB_STATE_CHECK_S``): the URLs it has not started go back to the frontier, due now, their
    attempts given back (skipped, if the job has ended).
    """
    claims = claim_many(url_ids, job_id)
    for claimed in claims:
        leases.hold(claimed.url.pk, claimed.attempt)
    states: list[str | None] = []
    began = checked = time.monotonic()
    gave_back = False
    try:
        for n, claimed in enumerate(claims):
            if n and time.monotonic() - checked >= JOB_STATE_CHECK_S:
                checked = time.monotonic()
                if not CrawlJob.objects.filter(pk=job_id, state=JobState.RUNNING).exists():
                    gave_back = _give_back(claims[n:])
                    break
            if n and (lifecycle.stopping.is_set() or _past_budget(claimed, began)):
                gave_back = _give_back(claims[n:])
                break
            states.append(_process_one(claimed, rendering))
    finally:
        for claimed in claims:
            leases.let_go(claimed.url.pk)
    if gave_back or "queued" in states or any(c.new_links for c in claims):
        wakeup.nudge()  # a sleeping scheduler has work again
    return states


JOB_STATE_CHECK_S = 1.0  # a message looks whether its job still runs at most this often


def _past_budget(claimed: Claim, began: float) -> bool:
    return time.monotonic() - began > setting("BATCH_BUDGET_S", claimed.job)


def _give_back(claims: list[Claim]) -> bool:
    """Claimed, not started: back to the frontier now (else the lease sweep does it later)."""
    try:
        given = with_retries(lambda: give_back(claims))
        log.info("job=%s: %d URLs of a message given back unstarted", claims[0].job.pk, given)
        return True
    except DatabaseError as exc:
        connection.close()
        log.warning("job=%s: %d unstarted URLs left to the lease sweep (%s)", claims[0].job.pk,
                    len(claims), exc)  # fmt: skip
        return False


def _process_one(claimed: Claim, rendering: bool) -> str | None:
    began = time.monotonic()
    leases.hold(claimed.url.pk, claimed.attempt)  # its time limit runs from its own start
    try:
        lend_connection_back()  # a fetch takes long: the pool serves other threads meanwhile
        state = _process_safely(claimed, rendering)
    finally:
        leases.let_go(claimed.url.pk)
    canary.count(state, claimed.reason, claimed.deferred, time.monotonic() - began)
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
    job = claimed.job
    cache = cache_for(job)
    host = host_of(claimed.url.url)
    if job.obey_robots:
        state = gates.robots_txt(claimed, cache, setting("USER_AGENT", job))
        if state is not None:
            return state
    who = identity.current(job, host)  # no round trip unless the job has pools
    jar_key = sessions.key(job.pk, host, who.key)
    slot = politeness.acquire(job.pk, host, job.delay, job.host_concurrency, job, jar_key)
    claimed.level = slot.ladder
    if not slot.granted:
        return defer(claimed, slot.wait, "throttled")
    if slot.circuit:
        state = gates.through_circuit(claimed, host, slot)
        if state is not None:
            return state
    if antibot.wants_render(job, slot.ladder, rendering):
        gates.report(claimed, host, slot, politeness.NEUTRAL)
        return antibot.hand_to_render(claimed)
    if rendering and render.unavailable():
        gates.report(claimed, host, slot, politeness.NEUTRAL)
        log.warning("job=%s url=%s: render step skipped: %s", job.pk, claimed.url.url,
                    render.unavailable())  # fmt: skip
        return park(claimed, outcomes.Banned(f"render step skipped: {render.unavailable()}"))
    if slot.wait > 0:
        loop.wait(slot.wait)  # for the host's slot: not work, the worker's loop may rest
        now = identity.current(job, host)  # another request may have rotated it meanwhile
        if now != who:
            who, slot.jar = now, True
    try:
        visitor, jar = antibot.visitor(job, host, who, slot.jar)
    except outcomes.ProxyFailed as exc:
        gates.report(claimed, host, slot, politeness.NEUTRAL)
        log.warning("job=%s: %s", job.pk, exc)
        proxies.record(job.pk, who.proxy_id, "errors", job=job)
        return record_failure(claimed, exc)
    if job.warmup_path and not jar.version and antibot.warm_up(claimed, cache, who, visitor):
        sessions.save(job.pk, host, who.key, jar, visitor.set_cookies, mark=True)
        gates.report(claimed, host, slot, politeness.NEUTRAL)
        # the warm-up took this slot; the URL keeps the reason its last fetch ended with
        return defer(claimed, 0.0, claimed.previous_reason or "warming_up")
    outcome: outcomes.CrawlOutcome | None = None
    resp = None
    conditional = None if rendering else pages.validators(claimed)
    started = time.monotonic()
    metrics.IN_FLIGHT.inc()
    try:
        kwargs = {"conditional": conditional} if conditional else {}
        get = render.fetch if rendering else fetching.fetch
        resp = get(
            claimed.url.url,
            user_agent=who.user_agent,
            limits=fetching.limits_for(job),
            allow=guard.allowed(job),
            in_scope=lambda u: bool(in_scope(cache, u)),
            visitor=visitor,
            **kwargs,
        )
    except outcomes.CrawlOutcome as exc:
        outcome = exc
    finally:
        metrics.IN_FLIGHT.dec()
        elapsed = time.monotonic() - started
        metrics.FETCH_SECONDS.observe(elapsed)
    banned = antibot.ban(job, host, resp, outcome)
    retry_after = outcome.retry_after if outcome is not None else None
    signal = politeness.OK if banned else gates.throttle_signal(outcome, elapsed, job)
    gates.report(claimed, host, slot, signal, retry_after, elapsed)
    if outcome is not None and outcome.host_level:
        outcome = gates.host_failure(claimed, outcome)
    elif slot.circuit:
        circuit.record(job.pk, host, failed=False, job=job)  # the host answered
    sessions.save(job.pk, host, who.key, jar, visitor.set_cookies)
    if banned is not None:
        hosts_fault = antibot.after_ban(claimed, host, who, banned)
        if claimed.level >= ladder.PARK:
            return park(claimed, banned)  # the top of the ladder: a person decides
        if hosts_fault:
            log.info("job=%s url=%s banned (%s): the host's, tried again", job.pk,
                     claimed.url.url, banned.reason)  # fmt: skip
            return retry_banned(claimed, banned)
        outcome = banned
    else:
        answered = resp is not None or (outcome is not None and bool(outcome.status))
        if answered and (slot.ladder or slot.ban_streak):  # the site let us in: a success
            ladder.signal(job, host, banned=False)
        if who.proxy_id:
            failed = isinstance(outcome, outcomes.ProxyFailed)
            proxies.record(job.pk, who.proxy_id, "errors" if failed else "ok", elapsed, job)
    if outcome is not None:
        state = record_failure(claimed, outcome)
        log.info(
            "job=%s url=%s outcome=%s state=%s", job.pk, claimed.url.url, outcome.reason, state
        )
        return state
    if resp.status == 304 and conditional:
        return record_unchanged(claimed)  # the previous run's page stands
    metrics.FETCHED_BYTES.inc(len(resp.raw_body or resp.body))
    return pages.store(claimed, cache, resp, rendering)


