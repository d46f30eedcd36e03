"""The gates before a URL's fetch and the feedback after it: robots.txt, the host's slot
and circuit, and what the host's throttle and circuit learn from the answer.

Reads ``USER_AGENT``, ``SLOT_LATE_S``, ``THROTTLE_SLOW_LATENCY_S`` and
``CIRCUIT_ANSWERED_S``; robots.txt is ``tasks/fetch/robots.py``, the host's slot and throttle
``tasks/fetch/politeness.py``, its circuit ``tasks/fetch/circuit.py``. A gate returns the
URL's new state when the URL must not be fetched now, else None.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from tasks.content.links import JobCache, new_links
from tasks.defaults import setting
from tasks.fetch import circuit, fetching, identity, outcomes, politeness, robots, sessions
from tasks.frontier.claims import Claim
from tasks.frontier.db import with_retries
from tasks.frontier.transitions import ROBOTS_FORBIDDEN, defer, insert_urls, record_failure
from tasks.rules.urls import host_of
from web.models import CrawlJob

log = logging.getLogger(__name__)
Failer = Callable[[Claim, outcomes.CrawlOutcome], str]  # records an outcome, returns the state
_slept = threading.local()  # seconds this thread has slept for its hosts' slots, in all


def slept() -> float:
    """Seconds this thread has slept for its hosts' slots so far, in all."""
    return getattr(_slept, "s", 0.0)


def robots_txt(claimed: Claim, cache: JobCache, fail: Failer = record_failure) -> str | None:
    """Apply robots.txt: the URL's new state if it must not be fetched now, else None;
    ``fail`` records an outcome that ends it (a spider's errback may see it)."""
    job = claimed.job
    decision = robots.check(job, claimed.url.url, setting("USER_AGENT", job))
    host = host_of(claimed.url.url)
    if decision.fetched and job.delay:  # robots.txt was a request to the host: pace the next
        politeness.hold(job.pk, host, job.delay)
    if decision.failure is not None:  # robots.txt unavailable, or its host unreachable
        return fail(claimed, decision.failure)
    if decision.retry_in is not None:
        return defer(claimed, decision.retry_in, decision.reason)
    if not decision.allowed:
        return fail(claimed, ROBOTS_FORBIDDEN)
    if host not in cache.robots_seen:
        cache.robots_seen.put(host)
        politeness.set_floor(job.pk, host, decision.crawl_delay)
        if job.use_sitemaps and decision.sitemaps:
            with_retries(lambda: insert_urls(job.pk, new_links(cache, "", decision.sitemaps), 0))
    return None


class Passage(NamedTuple):
    """What the host's slot let through: the slot, and the identity the request goes out as."""

    slot: politeness.Slot
    who: identity.Identity


def acquire(claimed: Claim, host: str, again: bool = False) -> Passage:
    """Ask for the host's next slot as its current identity, in the cookie session the
    request names (a spider's ``cookiejar``; the same round trip says whether that jar
    exists, and whether the identity is in a run of refusals); the URL runs at the ladder
    level the slot reports. ``again``: refused because the place of a host of one request at
    a time is taken, while its next slot is due within ``HOST_MAX_WAIT_S`` (a URL reached
    ahead of its slot, the request before still out, which ends by then and holds the slot a
    pace past its answer), wait for that slot and ask once more, rather than put the URL back
    to be released, claimed and asked for all over; not for a host with circuit state or
    above the ladder's first rung, whose URL may not be this worker's to fetch."""
    job = claimed.job
    who = identity.current(job, host)  # no round trip unless the job has pools
    if jar := sessions.jar_of(claimed.url.request):
        who = replace(who, jar=jar)
    jar_key = sessions.key(job.pk, host, who.key)
    slot = politeness.acquire(job.pk, host, job.delay, job.host_concurrency, job, jar_key,
                              identity.run_field(job, host, who))  # fmt: skip
    if again and worth_waiting(job, slot):
        _sleep(slot.full_for)
        return acquire(claimed, host)
    claimed.level = slot.ladder
    return Passage(slot, who)


def worth_waiting(job: CrawlJob, slot: politeness.Slot) -> bool:
    """Whether a URL refused ``slot`` may wait for the host's next slot and ask again (see
    :func:`acquire`)."""
    return (job.host_concurrency == 1 and not slot.circuit and slot.ladder == 0
            and 0 < slot.full_for <= setting("HOST_MAX_WAIT_S", job))  # fmt: skip


def _sleep(seconds: float) -> None:
    """Sleep for a host's slot, counted in :func:`slept`."""
    began = time.monotonic()
    time.sleep(seconds)
    _slept.s = slept() + time.monotonic() - began


def wait_turn(job: CrawlJob, host: str, passage: Passage, opens_at: float | None = None) -> Passage:
    """Wait until the slot opens (``opens_at``, monotonic, for a URL that waited aside); the
    identity the host has then."""
    slot, who = passage
    wait = (slot.opens if opens_at is None else opens_at) - time.monotonic()
    if wait > 0:
        _sleep(wait)
    if wait > 0 or opens_at is not None:
        now = replace(identity.current(job, host), jar=who.jar)  # another request may
        if now != who:  # have rotated it meanwhile
            who, slot.jar = now, True
    return Passage(slot, who)


def leave(job: CrawlJob, host: str, slot: politeness.Slot) -> None:
    """Just before the request leaves: one that leaves more than ``SLOT_LATE_S`` after its
    slot opened (a busy worker, a slow step before the fetch) holds the host's next slot a pace
    from now, so that the request granted it, on time, still reaches the host a pace after this
    one. A slot handed out already (to another worker, or to a URL waiting aside) keeps its
    time. (Under a cap of one no other request is granted a slot until this one's answer,
    which holds the next a pace away itself: ``politeness.finish``.)"""
    if job.host_concurrency == 1 or slot.pace <= 0:
        return
    if time.monotonic() - slot.opens > setting("SLOT_LATE_S", job):
        politeness.hold(job.pk, host, slot.pace)


def through_circuit(claimed: Claim, host: str, slot: politeness.Slot,
                    fail: Failer = record_failure) -> str | None:  # fmt: skip
    """A host with circuit state: fail the URL if it is open (``fail``), wait while a probe
    runs."""
    if not slot.circuit:
        return None
    job = claimed.job
    gate = circuit.check(job.pk, host, job)
    if gate.state == circuit.OPEN:
        report(claimed, host, slot, politeness.NEUTRAL)
        why = f"{gate.reason or 'unreachable'} (circuit open, next probe in {gate.retry_in:.0f} s)"
        unreachable = outcomes.HostUnreachable.because(gate.reason, why)
        return fail(claimed, unreachable)
    if gate.state == circuit.WAIT:
        report(claimed, host, slot, politeness.NEUTRAL)
        return defer(claimed, 1.0, "circuit_probe")
    return None


def classify(
    claimed: Claim,
    cache: JobCache,
    host: str,
    slot: politeness.Slot,
    fetched: fetching.Fetched,
    banned: outcomes.Banned | None,
) -> outcomes.CrawlOutcome | None:
    """Tell the host's throttle and circuit what the fetch met; the URL's outcome (a
    host-level failure that opens the circuit fails the URL now)."""
    job, outcome = claimed.job, fetched.outcome
    # a refusal's Retry-After parks the identity it was said to (tasks/fetch/refusals.py),
    # which holds the host only when no other identity may ask
    retry_after = outcome.retry_after if outcome is not None and banned is None else None
    signal = politeness.OK if banned else throttle_signal(outcome, fetched.elapsed, job)
    report(claimed, host, slot, signal, retry_after, fetched.elapsed)
    if outcome is not None and outcome.host_level:
        return host_failure(claimed, outcome)
    if fetched.resp is not None or (outcome is not None and outcome.status):
        remember_answer(claimed, cache, host)
    if slot.circuit:
        circuit.record(job.pk, host, failed=False, job=job)  # the host answered
    return outcome


def remember_answer(claimed: Claim, cache: JobCache, host: str) -> None:
    """The host gave an HTTP response: mark it answered in this job, once per tenth of
    ``CIRCUIT_ANSWERED_S`` per worker (the mark lives that long after its last renewal)."""
    job = claimed.job
    marked = cache.answered.get(host)
    if marked is None or time.monotonic() - marked > setting("CIRCUIT_ANSWERED_S", job) / 10:
        circuit.answered(job.pk, host, job)
        cache.answered.put(host, time.monotonic())


def report(
    claimed: Claim,
    host: str,
    slot: politeness.Slot,
    signal: int,
    retry_after: float | None = None,
    latency: float = 0.0,
) -> None:
    """Tell the host's throttle what happened, when it has anything to learn or to free."""
    job = claimed.job
    if signal == politeness.OVERLOAD or retry_after or job.host_concurrency:
        politeness.finish(job.pk, host, slot, signal=signal, retry_after=retry_after,
                          latency=latency, pace=job.delay if job.host_concurrency else None,
                          job=job)  # fmt: skip


def throttle_signal(outcome: outcomes.CrawlOutcome | None, elapsed: float, job: CrawlJob) -> int:
    """What the host's throttle learns from one fetch: overload, success, or nothing."""
    if outcome is None:
        slow = elapsed > setting("THROTTLE_SLOW_LATENCY_S", job)
        return politeness.OVERLOAD if slow else politeness.OK
    if outcome.host_level:
        return politeness.NEUTRAL
    return politeness.OVERLOAD if outcome.overload else politeness.OK


def host_failure(claimed: Claim, outcome: outcomes.CrawlOutcome) -> outcomes.CrawlOutcome:
    """Count a host-level failure toward the circuit; if it opens it, the URL fails now."""
    job = claimed.job
    failed_host = host_of(outcome.url or claimed.url.url)
    opened = circuit.record(job.pk, failed_host, failed=True, reason=outcome.summary,
                            definitive=outcome.definitive, job=job)  # fmt: skip
    if opened:
        log.warning("job=%s host=%s unreachable (%s): circuit open", job.pk, failed_host,
                    outcome.summary)  # fmt: skip
        unreachable = outcomes.HostUnreachable.because(
            outcome.summary, f"{outcome.summary} (circuit opened: {outcome})"[:2000])
        unreachable.url, unreachable.method = outcome.url, outcome.method  # where it failed
        unreachable.redirects, unreachable.redirect_statuses = (outcome.redirects,
                                                                outcome.redirect_statuses)
        return unreachable
    return outcome
