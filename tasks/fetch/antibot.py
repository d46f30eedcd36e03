"""The anti-bot policy of one URL: is the answer a ban, and what a URL needs before and
instead of a plain fetch (its identity's proxy and cookies, a session's warm-up page, a render
worker).

Reads ``RENDER_WORKERS`` and, for the warm-up page, the fetch settings
(``tasks/fetch/fetching.py``). Ban detection is ``tasks/fetch/bans.py``, whose refusal a ban
is ``tasks/fetch/refusals.py``, the ladder's levels ``tasks/fetch/ladder.py``, identities
``tasks/fetch/identity.py``.
"""

from __future__ import annotations

import logging
import time
from typing import NamedTuple
from urllib.parse import urljoin

from django.db import transaction

from tasks import dispatch
from tasks.content.links import JobCache, in_scope
from tasks.defaults import setting
from tasks.fetch import (
    bans,
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
from tasks.frontier.claims import Claim
from tasks.frontier.transitions import (
    RENDER_QUEUED,
    defer,
    park,
    record_failure,
    to_render,
)
from tasks.rules import guard, proxy_urls
from tasks.rules.urls import canonicalize, host_of
from web.models import CrawlJob, FrontierURL, URLState

log = logging.getLogger(__name__)


def may_render(job: CrawlJob) -> bool:
    """May the job's pages go to a render worker: it renders, and render workers serve the
    platform (``RENDER_WORKERS``)?"""
    return job.render != "never" and setting("RENDER_WORKERS")


def wants_render(job: CrawlJob, level: int, rendering: bool) -> bool:
    """Should this URL go to a render worker instead of a plain fetch?"""
    if rendering or not may_render(job):
        return False
    return job.render == "always" or level >= ladder.RENDER


def passes_in_a_browser(job: CrawlJob, banned: outcomes.Banned) -> bool:
    """A JavaScript challenge (``bans.script_challenge``: a page whose script sets a cookie
    and reloads, whatever its status) on a job that renders where needed (``--render auto``):
    its URL goes to a render worker, as a page whose content comes from JavaScript does,
    rather than wait for the ladder to climb to rendering one ban at a time."""
    return (job.render == "auto" and may_render(job)
            and bans.script_challenge(job, banned.body or b""))  # fmt: skip


def render_elsewhere(
    claimed: Claim, host: str, slot: politeness.Slot, rendering: bool
) -> str | None:
    """The URL's new state if this worker does not fetch it: it is a render worker's (its job
    or its host's level asks for rendering), or this render worker cannot render."""
    job = claimed.job
    if wants_render(job, slot.ladder, rendering):
        gates.report(claimed, host, slot, politeness.NEUTRAL)
        return hand_to_render(claimed)
    if rendering and render.unavailable():
        gates.report(claimed, host, slot, politeness.NEUTRAL)
        log.warning("job=%s url=%s: render step skipped: %s", job.pk, claimed.url.url,
                    render.unavailable())  # fmt: skip
        return park(claimed, outcomes.Banned(f"render step skipped: {render.unavailable()}"))
    return None


def hand_to_render(claimed: Claim) -> str:
    """The URL goes to a render worker (its own queue); this attempt did not fetch it."""
    to_render(claimed)
    url_id, job_id = claimed.url.pk, claimed.job.pk
    message = dispatch.Message(
        [url_id], job_id, dispatch.priority(claimed.url.depth, claimed.job.priority), ""
    )
    transaction.on_commit(lambda: dispatch.publish([message], render=True))
    claimed.reason = RENDER_QUEUED
    return URLState.SCHEDULED


class Session(NamedTuple):
    """How a URL's request goes out: as whom, and with the host's cookie jar."""

    visitor: fetching.Visitor
    jar: sessions.Jar


def open_session(job: CrawlJob, host: str, who: identity.Identity, jar_exists: bool) -> Session:
    """The request's proxy, headers and cookies for ``who``; ``ProxyFailed`` if its proxy
    cannot be named in this worker."""
    try:
        proxy = who.proxy
    except KeyError as exc:  # a ${VAR} of the proxy URL is not in this worker's environment
        missing = exc.args[0]
        raise outcomes.ProxyFailed(
            f"proxy {proxies.label(who.proxy_template)} needs ${{{missing}}}, not set here"
        ) from None
    except proxy_urls.Unusable as exc:  # a template stored before the rule on variables held
        raise outcomes.ProxyFailed(f"proxy {proxies.label(who.proxy_template)}: {exc}") from None
    jar = sessions.load(job.pk, host, who.key) if jar_exists else sessions.Jar()
    visitor = fetching.Visitor(proxy=proxy, headers=dict(job.headers or {}),
                               cookies=jar.for_requests())  # fmt: skip
    return Session(visitor, jar)


def proxy_failed(
    claimed: Claim, host: str, passage: gates.Passage, exc: outcomes.ProxyFailed
) -> str:
    """The identity's proxy cannot be named in this worker: the slot is freed, the proxy
    counts an error, and the URL fails with the reason."""
    job = claimed.job
    gates.report(claimed, host, passage.slot, politeness.NEUTRAL)
    log.warning("job=%s: %s", job.pk, exc)
    proxies.record(job.pk, passage.who.proxy_id, "errors", job=job)
    return record_failure(claimed, exc)


def warm_session(
    claimed: Claim, cache: JobCache, host: str, passage: gates.Passage, session: Session
) -> str | None:
    """A new session of a host whose job names a warm-up page: the warm-up takes this URL's
    slot and the URL comes back at once (its new state); None if there is nothing to warm."""
    job, who, jar = claimed.job, passage.who, session.jar
    if not job.warmup_path or jar.version:
        return None
    if not warm_up(claimed, cache, who, session.visitor, urljoin(claimed.url.url, job.warmup_path)):
        return None
    sessions.save(job.pk, host, who.key, jar, session.visitor.set_cookies, mark=True)
    gates.report(claimed, host, passage.slot, politeness.NEUTRAL)
    # the warm-up took this slot; the URL keeps the reason its last fetch ended with
    return defer(claimed, 0.0, claimed.previous_reason or "warming_up")


def warm_after_block(
    claimed: Claim, cache: JobCache, host: str, passage: gates.Passage, session: Session
) -> str | None:
    """An identity that met a block on a host where it held no session warms up by itself
    before anything else (a cookie gate never depends on which identity fetched the home
    page): the job's warm-up page, else the job's seed on that host, else the page that
    linked there. If that gave it cookies, the URL comes back at once, its attempt given back
    (its new state). None if the identity had a session there, or the warm-up gave it none:
    the block is a ban."""
    if session.jar.version:
        return None
    job, who, visitor = claimed.job, passage.who, session.visitor
    for url in _warmup_candidates(claimed):
        before = len(visitor.set_cookies)
        if not warm_up(claimed, cache, who, visitor, url):
            continue  # the URL itself, or another host
        sessions.save(job.pk, host, who.key, session.jar, visitor.set_cookies, mark=True)
        if len(visitor.set_cookies) == before:
            return None  # no session to be had: the block is a ban
        gates.report(claimed, host, passage.slot, politeness.NEUTRAL)
        return defer(claimed, 0.0, claimed.previous_reason or "warming_up")
    return None


def _warmup_candidates(claimed: Claim) -> list[str]:
    """Pages a new session of the URL's host may start on, best first."""
    job, url = claimed.job, claimed.url.url
    if job.warmup_path:
        return [urljoin(url, job.warmup_path)]
    seeds = [s for s in job.seeds or [] if isinstance(s, str) and host_of(s) == host_of(url)]
    referrer = (
        FrontierURL.objects.filter(pk=claimed.url.pk)
        .values_list("discovered_from__url", flat=True)
        .first()
    )
    return [*seeds[:1], *([referrer] if referrer else [])]


def warm_up(
    claimed: Claim,
    cache: JobCache,
    who: identity.Identity,
    visitor: fetching.Visitor,
    url: str,
) -> bool:
    """A new session of a host: fetch its warm-up page ``url`` first (the home page that sets
    the cookie a site wants back) in this URL's slot; what it answers is not stored, its
    cookies are. False if ``url`` is the URL itself (then it is fetched as usual) or leaves
    its host."""
    return visit(claimed, cache, who, visitor, url) is not None


def visit(
    claimed: Claim,
    cache: JobCache,
    who: identity.Identity,
    visitor: fetching.Visitor,
    url: str,
) -> fetching.Response | outcomes.CrawlOutcome | None:
    """Fetch ``url``, another page of the URL's host (a warm-up page, a probe), as ``who``:
    its answer, or the outcome it ended in; it is not stored, the cookies it sets are collected
    in ``visitor``. None if ``url`` is the URL itself or leaves its host."""
    job = claimed.job
    if canonicalize(url) == claimed.url.url or host_of(url) != host_of(claimed.url.url):
        return None  # the URL is the warm-up page itself, or a stored path leaves its host
    kind, started = "ok", time.monotonic()
    try:
        answer = fetching.fetch(url, user_agent=who.user_agent, limits=fetching.limits_for(job),
                                allow=guard.allowed(job), visitor=visitor,
                                in_scope=lambda u: bool(in_scope(cache, u)))  # fmt: skip
    except outcomes.CrawlOutcome as exc:
        log.info("job=%s %s as another page of the host: %s", job.pk, url, exc.reason)
        kind = "errors" if isinstance(exc, outcomes.ProxyFailed) else ""
        answer = exc
    if who.proxy_id and kind:
        proxies.record(job.pk, who.proxy_id, kind, time.monotonic() - started, job)
    return answer


def ban(
    job: CrawlJob,
    host: str,
    resp: fetching.Response | None,
    outcome: outcomes.CrawlOutcome | None,
) -> outcomes.Banned | None:
    """A block page, as an outcome carrying the answer (for review); None if not one."""
    if resp is not None:
        reason = bans.detect(job, host, resp.status, resp.final_url, resp.body)
        evidence = (resp.status, resp.headers, resp.body)
    elif outcome is not None and outcome.status:
        reason = bans.detect(job, host, outcome.status, outcome.url or "", outcome.body,
                             outcome.retry_after)  # fmt: skip
        evidence = (outcome.status, outcome.headers, outcome.body)
    else:
        return None
    if not reason:
        return None
    retry_after = outcome.retry_after if resp is None and outcome is not None else None
    banned = outcomes.Banned(reason, status=evidence[0], retry_after=retry_after)
    banned.headers, banned.body = evidence[1], evidence[2]
    banned.screenshot = resp.screenshot if resp is not None else outcome.screenshot
    return banned


def count_answer(
    claimed: Claim,
    host: str,
    passage: gates.Passage,
    fetched: fetching.Fetched,
    outcome: outcomes.CrawlOutcome | None,
    let_in: bool = True,
) -> None:
    """Not a ban: a success for a host the ladder watches if the site answered (its identity's
    run of rests ends), and the proxy's tally. Not ``let_in``: an answer the ladder would
    take for a block, which a spider's callback asked for: the proxy's tally alone."""
    job, slot, who = claimed.job, passage.slot, passage.who
    answered = fetched.resp is not None or (outcome is not None and bool(outcome.status))
    if let_in and answered and (slot.ladder or slot.ban_streak):  # the site let us in
        ladder.signal(job, host, banned=False)
        identity.answered(job, host, who)
    if who.proxy_id:
        failed = isinstance(outcome, outcomes.ProxyFailed)
        proxies.record(job.pk, who.proxy_id, "errors" if failed else "ok", fetched.elapsed, job)
