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

Reads ``BATCH_BUDGET_S``, ``DB_RETRY_S``, ``JOB_STATE_CHECK_S``, ``SLOT_ASIDE_S``,
``TASK_SOFT_TIME_LIMIT_S`` and the fetch settings (``fetching.limits_for``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from dataclasses import replace
from typing import NamedTuple

from celery.exceptions import SoftTimeLimitExceeded
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from redis.exceptions import RedisError

from crawlplatform import logs
from tasks.content import answers, callbacks, pages, rows
from tasks.content.links import JobCache, cache_for, in_scope
from tasks.defaults import setting
from tasks.fetch import antibot, fetching, gates, outcomes, politeness, refusals, render, sessions
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
    state of each one that was ours to do, in the order they ended.

    The message's URLs can all be fetched by the time the worker reaches them
    (``tasks/frontier/release.py`` packs them so) and are held by this worker's lease
    renewal from the claim on. A URL whose host's slot opens more than ``SLOT_ASIDE_S`` later
    (its robots.txt was just fetched, or the host is slower than the packing thought) waits
    aside with its slot while the message's next URLs go first, rather than asleep in the
    worker's slot; back late for it, it takes a new one (unless its place on a host of one
    request at a time still holds it). The message ends early when it has
    worked ``BATCH_BUDGET_S``, the worker is shutting down, or the job stopped running (looked
    up at most every ``JOB_STATE_CHECK_S``): the URLs it has not fetched (not started, or
    waiting aside: their slots freed) go back to the frontier, due now, their attempts given
    back (skipped, if the job has ended).
    """
    with logs.about(crawl_job=job_id):
        return _process_claims(claim_many(url_ids, job_id), job_id, rendering)


class _Aside(NamedTuple):
    """A URL of the message waiting for its host's slot while the message's next URLs go first."""

    opens_at: float  # when its slot opens (monotonic)
    claimed: Claim
    passage: gates.Passage  # the slot it holds, and the identity it goes out as
    spent: float  # seconds of its own work before it went aside (robots.txt, the gates)


def _process_claims(claims: list[Claim], job_id: int, rendering: bool) -> list[str | None]:
    for claimed in claims:
        leases.hold(claimed.url.pk, claimed.attempt)
    states: list[str | None] = []
    unstarted, aside = list(claims), []
    began = checked = time.monotonic()
    slept = gates.slept()
    last: Claim | None = None  # the URL done last
    steps = 0  # URLs done or set aside
    try:
        while unstarted or aside:
            if len(unstarted) < len(claims):  # one has started: the message may end here
                ends = last is not None and last.closed_crawl  # its spider ended the crawl
                if not ends and time.monotonic() - checked >= setting("JOB_STATE_CHECK_S"):
                    checked = time.monotonic()
                    ends = not CrawlJob.objects.filter(pk=job_id, state=JobState.RUNNING,
                                                       close_reason="").exists()  # fmt: skip
                if ends or lifecycle.stopping.is_set() or _past_budget(claims[0], began):
                    _give_back(unstarted + [turn.claimed for turn in aside])
                    break
            per_url = (time.monotonic() - began) / steps if steps else 0.0
            if aside and (not unstarted or aside[0].opens_at - time.monotonic() <= per_url):
                # its slot opens within a mean step: resume it rather than start another
                turn = aside.pop(0)
                claimed = turn.claimed
                done = _process_one(claimed, rendering, turn)
            else:
                claimed = unstarted.pop(0)
                done = _process_one(claimed, rendering, may_wait_aside=bool(unstarted or aside))
            steps += 1
            if isinstance(done, _Aside):
                aside = sorted([*aside, done], key=lambda turn: turn.opens_at)
            else:
                last = claimed
                states.append(done)
    finally:
        for turn in aside:  # given back, or left by an error: their slots are no one's
            _free_slot(turn.claimed, turn.passage.slot)
        for claimed in claims:
            leases.let_go(claimed.url.pk)
    if claims:  # work again (new links, retries, URLs given back), or the job's last URL ended
        # and the slot's time, which sizes the job's fetch messages: a render's is not theirs,
        # nor the sleeps for a host's slot, which a larger message spends on its other URLs
        # (counted, a polite broad crawl's robots.txt then page, a delay apart, sized its
        # messages at one URL, each page asleep in its slot for the delay). A sleep chosen
        # over starting another URL (one due within a mean step) is left out with them.
        busy = time.monotonic() - began - (gates.slept() - slept)
        wakeup.nudge(job_id, busy, 0 if rendering else len(states))
    return states


def _past_budget(claimed: Claim, began: float) -> bool:
    return time.monotonic() - began > setting("BATCH_BUDGET_S", claimed.job)


def _give_back(claims: list[Claim]) -> None:
    """Claimed, not fetched: back to the frontier now (else the lease sweep does it later)."""
    if not claims:
        return
    try:
        given = with_retries(lambda: give_back(claims))
        log.info("job=%s: %d URLs of a message given back unfetched", claims[0].job.pk, given)
    except DatabaseError as exc:
        connection.close()
        log.warning("job=%s: %d unfetched URLs left to the lease sweep (%s)", claims[0].job.pk,
                    len(claims), exc)  # fmt: skip


def _free_slot(claimed: Claim, slot: politeness.Slot) -> None:
    """The in-flight place of a request never sent given back to its host (a job with an
    in-flight cap takes one with each slot), with no pause after it."""
    job = claimed.job
    if job.host_concurrency and slot.granted:
        with contextlib.suppress(RedisError):  # else the place lapses with its lease
            politeness.finish(job.pk, host_of(claimed.url.url), slot, signal=politeness.NEUTRAL,
                              job=job)  # fmt: skip


def _process_one(
    claimed: Claim, rendering: bool, resumed: _Aside | None = None, may_wait_aside: bool = False
) -> str | None | _Aside:
    """The URL's new state; or, ``may_wait_aside`` (the message has other URLs to do, unstarted
    or waiting aside), the URL waiting aside for its host's slot, to be ``resumed`` (a resumed
    URL never waits aside again)."""
    began = time.monotonic() - (0.0 if resumed is None else resumed.spent)
    if resumed is None:
        leases.hold(claimed.url.pk, claimed.attempt)  # its time limit runs from its own start
    state: str | None | gates.Passage = None
    try:
        lend_connection_back()  # a fetch takes long: the pool serves other threads meanwhile
        with logs.about(url_id=claimed.url.pk, url=claimed.url.url, spider=claimed.job.spider):
            state = _process_safely(claimed, rendering, resumed, may_wait_aside)
    finally:
        if not isinstance(state, gates.Passage):
            leases.let_go(claimed.url.pk)
    if isinstance(state, gates.Passage):
        return _Aside(state.slot.opens, claimed, state, time.monotonic() - began)
    canary.count(state, claimed.reason, claimed.deferred, time.monotonic() - began,
                 pinned=bool(claimed.job.channel))  # fmt: skip
    if state is not None:
        metrics.outcome(claimed.job.pk, state, claimed.reason)
    return state


def _process_safely(
    claimed: Claim, rendering: bool = False, resumed: _Aside | None = None,
    may_wait_aside: bool = False,
) -> str | None | gates.Passage:  # fmt: skip
    """The pipeline, with every way it can go wrong turned into the URL's outcome (or the
    slot of a URL that waits aside)."""
    job, url = claimed.job, claimed.url.url
    try:
        if resumed is None and past_last_attempt(claimed):
            return give_up(claimed)
        return _process_claimed(claimed, rendering, resumed, may_wait_aside)
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


def _process_claimed(
    claimed: Claim, rendering: bool = False, resumed: _Aside | None = None,
    may_wait_aside: bool = False,
) -> str | gates.Passage:  # fmt: skip
    """One claimed URL, step by step: gates, fetch, classify, ladder, record, then parse, links
    and commit (``pages.store``). A step that ends the URL returns its new state; a URL that
    ``may_wait_aside`` and whose host's slot opens after ``SLOT_ASIDE_S`` (or whose host's
    place is taken until its next slot: ``_slot``) returns that slot, to wait aside, and is
    ``resumed`` from it: in that slot while it is still its own, else in a new one, waited
    for in the worker's slot."""
    job, cache, host = claimed.job, cache_for(claimed.job), host_of(claimed.url.url)
    fail = functools.partial(_fail, cache=cache)
    if resumed is not None and _slot_still_its_own(job, resumed):
        passage = gates.wait_turn(job, host, resumed.passage, resumed.opens_at)
    else:
        if resumed is None:
            passage = _through_gates(claimed, cache, host, rendering, fail, may_wait_aside)
        else:  # back late: the host's next slot may be another request's by now
            _free_slot(claimed, resumed.passage.slot)
            passage = _slot(claimed, host, rendering, fail)
        if isinstance(passage, str):
            return passage
        if not passage.slot.granted:
            return passage  # its host's place is taken until its next slot: it waits aside
        if resumed is None and may_wait_aside and passage.slot.wait > setting("SLOT_ASIDE_S"):
            return passage  # its slot opens later: it waits aside
        passage = gates.wait_turn(job, host, passage)
    try:
        session = antibot.open_session(job, host, passage.who, passage.slot.jar)
    except outcomes.ProxyFailed as exc:
        return antibot.proxy_failed(claimed, host, passage, exc)
    if (state := antibot.warm_session(claimed, cache, host, passage, session)) is not None:
        return state  # the warm-up page took this slot
    takes = answers.takes(job, claimed.url.request) if job.spider else _NOTHING_TAKEN
    fetched = _fetch(claimed, cache, host, passage, session, rendering, takes)
    blocked = antibot.ban(job, host, fetched.resp, fetched.outcome)
    theirs = _the_spiders_answer(fetched, takes)  # asked for by the callback: no block
    banned = None if theirs else blocked
    outcome = gates.classify(claimed, cache, host, passage.slot, fetched, banned)
    sessions.save(job.pk, host, passage.who.key, session.jar, session.visitor.set_cookies)
    if banned is not None:
        if not rendering and antibot.passes_in_a_browser(job, banned):
            return antibot.hand_to_render(claimed)  # a JavaScript challenge: a browser passes it
        if (state := refusals.judge(claimed, cache, host, passage, session, banned)) is not None:
            return state  # the identity's refusal (or a warm-up first): it waits, attempt kept
    else:
        if not theirs and (state := refusals.suspected(claimed, cache, host, passage, session,
                                                       outcome)):  # fmt: skip
            return state  # a reset or a 503 that refuses the identity: as a ban
        antibot.count_answer(claimed, host, passage, fetched, outcome, let_in=blocked is None)
    return _record(claimed, cache, fetched, banned if banned is not None else outcome, rendering)


_NOTHING_TAKEN = answers.Takes(False, ())  # a crawl's URL: no callback to take answers


def _the_spiders_answer(fetched: fetching.Fetched, takes: answers.Takes) -> bool:
    """An answer that is not 2xx and whose status the spider request's callback takes
    (``handle_httpstatus_list``, ``handle_httpstatus_all``, ``HTTPERROR_ALLOWED_CODES``): it
    goes to the callback as Scrapy gives it, a 403 or a 429 included, not to the anti-bot
    ladder as a block (``docs/spiders.md``, "How a request runs")."""
    answer = fetched.resp if fetched.resp is not None else fetched.outcome
    status = getattr(answer, "status", None) or 0
    return takes.errors and status > 0 and not 200 <= status < 300 and takes.status(status)


def _slot_still_its_own(job: CrawlJob, resumed: _Aside) -> bool:
    """Whether a URL back from aside may still go in the slot it holds (one it was granted):
    it is back on time, or its host takes one request at a time and its in-flight place, which
    no other request may have meanwhile, outlasts this request (late by less than half
    ``IN_FLIGHT_SPARE_S``: the rest covers its steps before the fetch). Back late otherwise,
    the host's next slot, a pace after its own, may be another request's by now."""
    if not resumed.passage.slot.granted:
        return False  # it waited for a place: it asks for its slot now
    late = time.monotonic() - resumed.opens_at
    return late <= 0 or (job.host_concurrency == 1 and late < politeness.IN_FLIGHT_SPARE_S / 2)


def _through_gates(
    claimed: Claim, cache: JobCache, host: str, rendering: bool, fail: functools.partial,
    may_wait_aside: bool = False,
) -> str | gates.Passage:  # fmt: skip
    """robots.txt, the host's slot, its circuit and the render step: the URL's new state if one
    of them ends it, else what the slot let through (see ``_slot``)."""
    obeys = claimed.job.obey_robots and not rows.ignores_robots(
        (claimed.url.request or {}).get("meta"))  # fmt: skip
    if obeys and (state := gates.robots_txt(claimed, cache, fail)) is not None:
        return state  # robots.txt forbids it, or cannot be read now
    return _slot(claimed, host, rendering, fail, may_wait_aside)


def _slot(
    claimed: Claim, host: str, rendering: bool, fail: functools.partial,
    may_wait_aside: bool = False,
) -> str | gates.Passage:  # fmt: skip
    """The host's slot, its circuit and the render step (see ``_through_gates``). Refused
    because the place of a host of one request at a time is taken until its next slot
    (``gates.worth_waiting``), a URL that ``may_wait_aside`` waits aside until then, its slot
    not granted, and asks again when it is resumed; one that may not waits for it in the
    worker's slot and asks again (``gates.acquire``), unless the worker is stopping."""
    again = not may_wait_aside and not lifecycle.stopping.is_set()
    passage = gates.acquire(claimed, host, again)
    if not passage.slot.granted:
        if may_wait_aside and gates.worth_waiting(claimed.job, passage.slot):
            opens = time.monotonic() + passage.slot.full_for
            return passage._replace(slot=replace(passage.slot, opens=opens))
        return defer(claimed, passage.slot.wait, "throttled")
    if (state := gates.through_circuit(claimed, host, passage.slot, fail)) is not None:
        return state  # the host's circuit is open, or its probe is under way
    if (state := antibot.render_elsewhere(claimed, host, passage.slot, rendering)) is not None:
        return state  # a render worker's URL, or a render step this worker cannot take
    return passage


def _fetch(
    claimed: Claim,
    cache: JobCache,
    host: str,
    passage: gates.Passage,
    session: antibot.Session,
    rendering: bool,
    takes: answers.Takes,
) -> fetching.Fetched:
    """The request, plain or rendered (a recrawl's conditional one if the previous run kept
    validators), sent in ``passage``'s slot of ``host`` (``gates.leave``): its answer, or the
    outcome it ended in."""
    job = claimed.job
    outcome: outcomes.CrawlOutcome | None = None
    resp = None
    asked = claimed.url.request  # a spider's request: method, headers, body, cookies
    conditional = None if rendering or asked else pages.validators(claimed)
    anywhere = bool(asked) and rows.leaves_domains(asked.get("dont_filter"), asked.get("meta"))
    started = time.monotonic()
    metrics.IN_FLIGHT.inc()
    try:
        kwargs = {"conditional": conditional} if conditional else {}
        if job.spider and not rendering:  # a spider's request, as Scrapy's middlewares see it
            kwargs["request"] = fetching.Asked.of(asked, session.visitor, takes.redirects,
                                                  cookies=takes.cookies,
                                                  proxies=job.proxies)  # fmt: skip
        get = render.fetch if rendering else fetching.fetch
        gates.leave(job, host, passage.slot)
        resp = get(
            asked["url"] if asked else claimed.url.url,
            user_agent=passage.who.user_agent,
            limits=fetching.limits_for(job, takes.errors, rows.download_timeout(asked)),
            allow=guard.allowed(job),
            in_scope=lambda u: bool(in_scope(cache, u, anywhere)),
            visitor=session.visitor,
            **kwargs,
        )
    except outcomes.CrawlOutcome as exc:
        outcome = rows.not_retried(asked, exc, claimed.attempt)
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
    if outcome is None and fetched.resp.status == 304 and fetched.conditional:
        return record_unchanged(claimed)  # the previous run's page stands
    if outcome is None and claimed.job.spider:
        outcome = answers.unfollowed(fetched.resp)  # a 3xx answer left as it came
    if outcome is not None:
        state = _fail(claimed, outcome, cache)
        log.info("job=%s url=%s outcome=%s state=%s", claimed.job.pk, claimed.url.url,
                 outcome.reason, state)  # fmt: skip
        return state
    metrics.FETCHED_BYTES.inc(len(fetched.resp.raw_body or fetched.resp.body))
    if claimed.job.spider:
        return callbacks.store(claimed, cache, fetched.resp)  # the spider's callback decides
    return pages.store(claimed, cache, fetched.resp, rendering)
