"""The anti-bot policy of one URL: is the answer a ban, what the host's ladder makes of it,
and what a URL needs before and instead of a plain fetch (its identity's proxy and cookies, a
session's warm-up page, a render worker).

Reads ``LADDER_BACKOFF_DELAY_S`` and, for the warm-up page, the fetch settings
(``tasks/fetch/fetching.py``). Ban detection is ``tasks/fetch/bans.py``, the ladder's levels
``tasks/fetch/ladder.py``, identities ``tasks/fetch/identity.py``.
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
    IDENTITY_BANNED,
    RENDER_QUEUED,
    defer,
    park,
    record_failure,
    retry_banned,
    to_render,
)
from tasks.rules import guard, proxy_urls
from tasks.rules.urls import canonicalize, host_of
from web.models import CrawlJob, URLState

log = logging.getLogger(__name__)


def wants_render(job: CrawlJob, level: int, rendering: bool) -> bool:
    """Should this URL go to a render worker instead of a plain fetch?"""
    if rendering or job.render == "never":
        return False
    return job.render == "always" or level >= ladder.RENDER


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
    if not (job.warmup_path and not jar.version and warm_up(claimed, cache, who, session.visitor)):
        return None
    sessions.save(job.pk, host, who.key, jar, session.visitor.set_cookies, mark=True)
    gates.report(claimed, host, passage.slot, politeness.NEUTRAL)
    # the warm-up took this slot; the URL keeps the reason its last fetch ended with
    return defer(claimed, 0.0, claimed.previous_reason or "warming_up")


def warm_up(
    claimed: Claim, cache: JobCache, who: identity.Identity, visitor: fetching.Visitor
) -> bool:
    """A new session of a host: fetch the job's warm-up page first (the home page that sets
    the cookie a site wants back) in this URL's slot; what it answers is not stored, its
    cookies are. False if the URL is the warm-up page itself (then it is fetched as usual)."""
    job = claimed.job
    url = urljoin(claimed.url.url, job.warmup_path)
    if canonicalize(url) == claimed.url.url or host_of(url) != host_of(claimed.url.url):
        return False  # the URL is the warm-up page itself, or a stored path leaves its host
    kind, started = "ok", time.monotonic()
    try:
        fetching.fetch(url, user_agent=who.user_agent, limits=fetching.limits_for(job),
                       allow=guard.allowed(job), visitor=visitor,
                       in_scope=lambda u: bool(in_scope(cache, u)))  # fmt: skip
    except outcomes.CrawlOutcome as exc:
        log.info("job=%s warm-up %s: %s", job.pk, url, exc.reason)
        kind = "errors" if isinstance(exc, outcomes.ProxyFailed) else ""
    if who.proxy_id and kind:
        proxies.record(job.pk, who.proxy_id, kind, time.monotonic() - started, job)
    return True


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
        reason = bans.detect(job, host, outcome.status, outcome.url or "", outcome.body)
        evidence = (outcome.status, outcome.headers, outcome.body)
    else:
        return None
    if not reason:
        return None
    banned = outcomes.Banned(reason, status=evidence[0])
    banned.headers, banned.body = evidence[1], evidence[2]
    banned.screenshot = resp.screenshot if resp is not None else outcome.screenshot
    return banned


def count_answer(
    claimed: Claim,
    host: str,
    passage: gates.Passage,
    fetched: fetching.Fetched,
    outcome: outcomes.CrawlOutcome | None,
) -> None:
    """Not a ban: a success for a host the ladder watches if the site answered, and the
    proxy's tally."""
    job, slot, who = claimed.job, passage.slot, passage.who
    answered = fetched.resp is not None or (outcome is not None and bool(outcome.status))
    if answered and (slot.ladder or slot.ban_streak):  # the site let us in: a success
        ladder.signal(job, host, banned=False)
    if who.proxy_id:
        failed = isinstance(outcome, outcomes.ProxyFailed)
        proxies.record(job.pk, who.proxy_id, "errors" if failed else "ok", fetched.elapsed, job)


def judge_ban(
    claimed: Claim, host: str, who: identity.Identity, banned: outcomes.Banned
) -> str | None:
    """The ladder's word on a banned URL: parked at the top of the ladder (a person decides),
    tried again if the ban was the host's; None if the ban is the URL's own outcome."""
    hosts_fault = after_ban(claimed, host, who, banned)
    if claimed.level >= ladder.PARK:
        return park(claimed, banned)  # the top of the ladder: a person decides
    if hosts_fault:
        log.info("job=%s url=%s banned (%s): the host's, tried again", claimed.job.pk,
                 claimed.url.url, banned.reason)  # fmt: skip
        return retry_banned(claimed, banned)
    return None


def same_challenge(claimed: Claim, banned: outcomes.Banned) -> bool:
    """Did this URL's last attempt end on the same challenge (a CAPTCHA marker, a challenge
    redirect)? A bare 403 says nothing of the page: identity bans look like that too."""
    evidence = str(banned)
    return (
        evidence.startswith(("challenge", "redirected to a challenge"))
        and claimed.previous_reason in (outcomes.Banned.reason, IDENTITY_BANNED)
        and claimed.previous_message == evidence
    )


def after_ban(claimed: Claim, host: str, who: identity.Identity, banned: outcomes.Banned) -> bool:
    """A ban: the host's ladder counts it and acts on the level it is at. Returns whether the
    ban was the host's rather than the URL's (the URL keeps its attempt): its identity had
    been replaced, or the host had climbed, while it was in flight (stale news, not counted),
    or the host refuses everything lately (bans in a row). A URL that meets the challenge its
    last attempt met is not counted either: that challenge follows the page, not the
    identity."""
    job = claimed.job
    if same_challenge(claimed, banned):
        return False  # the challenge its last attempt met, on another request: the page's
    if who.proxy_id:
        proxies.record(job.pk, who.proxy_id, "bans", job=job)
    if identity.replaced(job, host, who):
        return True
    step = ladder.signal(job, host, banned=True, ran_at=claimed.level)
    if step.run < 0:
        return True  # the host climbed while it was in flight: news already acted on
    if step.after != step.before:
        log.warning("job=%s host=%s ladder %d -> %d", job.pk, host, step.before, step.after)
    claimed.level = max(claimed.level, step.after)
    if step.after >= ladder.BACK_OFF:
        politeness.slow_down(job.pk, host, setting("LADDER_BACKOFF_DELAY_S", job), job)
    if step.after >= ladder.ROTATE and step.run >= 2:  # one ban among successes: the page's
        identity.rotate(job, host, who)
    return step.run >= 2
