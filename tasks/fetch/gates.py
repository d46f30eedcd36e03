"""The gates before a URL's fetch and the feedback after it: robots.txt, the host's circuit,
and what the host's throttle learns from the answer.

Reads ``THROTTLE_SLOW_LATENCY_S``; robots.txt is ``tasks/fetch/robots.py``, the host's slot
and throttle ``tasks/fetch/politeness.py``, its circuit ``tasks/fetch/circuit.py``. A gate
returns the URL's new state when the URL must not be fetched now, else None.
"""

from __future__ import annotations

import logging

from tasks.content.links import JobCache, new_links
from tasks.defaults import setting
from tasks.fetch import circuit, outcomes, politeness, robots
from tasks.frontier.transitions import (
    ROBOTS_FORBIDDEN,
    Claim,
    defer,
    insert_urls,
    record_failure,
    with_retries,
)
from tasks.rules.urls import host_of
from web.models import CrawlJob

log = logging.getLogger(__name__)


def robots_txt(claimed: Claim, cache: JobCache, user_agent: str) -> str | None:
    """Apply robots.txt: the URL's new state if it must not be fetched now, else None."""
    job = claimed.job
    decision = robots.check(job, claimed.url.url, user_agent)
    if decision.failure is not None:  # robots.txt unavailable, or its host unreachable
        return record_failure(claimed, decision.failure)
    if decision.retry_in is not None:
        return defer(claimed, decision.retry_in, decision.reason)
    if not decision.allowed:
        return record_failure(claimed, ROBOTS_FORBIDDEN)
    host = host_of(claimed.url.url)
    if host not in cache.robots_seen:
        cache.robots_seen.put(host)
        politeness.set_floor(job.pk, host, decision.crawl_delay)
        if job.use_sitemaps and decision.sitemaps:
            with_retries(lambda: insert_urls(job.pk, new_links(cache, "", decision.sitemaps), 0))
    return None


def through_circuit(claimed: Claim, host: str, slot: politeness.Slot) -> str | None:
    """A host with circuit state: fail the URL if it is open, wait while a probe runs."""
    job = claimed.job
    gate = circuit.check(job.pk, host, job)
    if gate.state == circuit.OPEN:
        report(claimed, host, slot, politeness.NEUTRAL)
        unreachable = outcomes.HostUnreachable(
            f"{gate.reason or 'unreachable'} (circuit open, next probe in {gate.retry_in:.0f} s)"
        )
        return record_failure(claimed, unreachable)
    if gate.state == circuit.WAIT:
        report(claimed, host, slot, politeness.NEUTRAL)
        return defer(claimed, 1.0, "circuit_probe")
    return None


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
                          latency=latency, job=job)  # fmt: skip


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
    opened = circuit.record(job.pk, failed_host, failed=True, reason=outcome.summary, job=job)
    if opened:
        log.warning("job=%s host=%s unreachable (%s): circuit open", job.pk, failed_host,
                    outcome.summary)  # fmt: skip
        return outcomes.HostUnreachable(f"{outcome.summary} (circuit opened: {outcome})"[:2000])
    return outcome
