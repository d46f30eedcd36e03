"""Whose refusal it is, and how the crawl waits for a ban to lapse.

Reads ``BAN_PATIENCE_S``, ``LADDER_BACKOFF_DELAY_S`` and ``RETRY_BACKOFF_MAX_S``.

When a host refuses a request (``tasks/fetch/bans.py`` names the signs; a connection reset or
a plain 503 may be one too), the refusal is one of two things:

* **the page's own**: the page is refused to every visitor (a forbidden page, a CAPTCHA on that
  page alone). It spends an attempt like any error of the page, and after its last one it is
  parked for review with the site's answer;
* **the identity's**: the site refuses this visitor (its user agent, its address, its session)
  for a while. Nothing of the URL's is spent: the identity is parked on the host
  (``identity.rest``: as long as the site said with ``Retry-After``, else as long as the last
  ban seen to lapse there, doubling while it is refused again), the host moves to an identity
  that shares no part with a parked one (``identity.rotate``), and the URL goes back with its
  attempt given back, due when that identity may ask: at once, or when the first park lapses
  if every identity is parked. The host's slot is then held that long (``politeness.hold``:
  the URLs wait in the frontier, no worker sleeps), the wait is logged once and shown by
  ``job status`` and the dashboard (``identity.lapses``).

How they are told apart: a refusal that matches the challenge the URL's last attempt met,
when that was found to be the page's, is the page's again; a 429, or a 503 that says when to
come back, is the identity's, unless what it says outlasts ``BAN_PATIENCE_S`` and the identity
is let in nearby (below): a section refused for longer than the crawl waits, whose URL then
ends banned alone while the rest of the host goes on (not let in nearby, the identity rests as
for any ban, and patience decides, not the long ``Retry-After``); so is any refusal of an identity
already parked (a request of it in flight when it was banned). Otherwise the identity asks at
once for the page of the host nearest to the URL that was let in before (its neighbour in the
frontier's order: the same section, where a site bans by section; the home page where none
was yet): answered
(a page, or an error answer such as a 404), the refusal was the page's; refused too (a
block page, a reset, a 502 or 503, no answer at all), the identity's. A connection reset,
or a 502 or 503 without ``Retry-After`` (what a proxy answers when the site reset it; a
site that says it is busy), is the URL's own error unless that same question is refused
(or the identity is parked).

Patience (``BAN_PATIENCE_S``, a job may set it): a host that has let no page in for that long,
or would not before its first park lapses, ends: its waiting URLs are parked for review as
``banned``, all at once, with the count in the log and the job's summary. A URL refused for
that long since its first refusal while the host lets others in is parked alone.
"""

from __future__ import annotations

import logging
import os
from urllib.parse import urlsplit

from django.db.models import Q
from django.utils import timezone

from tasks.content.links import JobCache
from tasks.defaults import setting
from tasks.fetch import (
    antibot,
    fetching,
    gates,
    identity,
    ladder,
    outcomes,
    politeness,
    proxies,
    robots,
    sessions,
)
from tasks.frontier import review
from tasks.frontier.claims import Claim
from tasks.frontier.transitions import park, retry_banned
from web.models import FrontierURL, URLState

log = logging.getLogger(__name__)
_CERTAIN = (429, 503)  # refusals that say so: never the page's own
_SUSPECT = (502, 503)  # may be a refusal: a reset behind a proxy, a site that says "busy"


def judge(
    claimed: Claim,
    cache: JobCache,
    host: str,
    passage: gates.Passage,
    session: antibot.Session,
    banned: outcomes.Banned,
) -> str | None:
    """A refusal (``banned``): the URL's new state if it is the identity's (or the host's
    patience ran out), after a session's warm-up if the identity had none; None if it is the
    page's own, which then spends an attempt."""
    certain = banned.status in _CERTAIN
    if not certain and (state := antibot.warm_after_block(claimed, cache, host, passage,
                                                          session)) is not None:  # fmt: skip
        return state  # a block met without a session: the identity warms up, then tries again
    if same_challenge(claimed, banned):
        return None
    patience = setting("BAN_PATIENCE_S", claimed.job)
    outlasting = banned.retry_after is not None and banned.retry_after >= patience
    if (not certain or outlasting) and not parked(claimed, host, passage.who):
        if let_in_nearby(claimed, cache, host, passage, session) is True:
            if outlasting:  # a section refused for longer than patience: this URL ends alone
                log.warning("job=%s url=%s refused (%s) while its identity is let in nearby: "
                            "banned", claimed.job.pk, claimed.url.url, banned)  # fmt: skip
                return park(claimed, _past_patience(
                    banned, f"this URL refused for {banned.retry_after:.0f} s more while its "
                    "identity is let in nearby", patience))
            log.info("job=%s url=%s refused (%s) while its identity is let in nearby: the "
                     "page's", claimed.job.pk, claimed.url.url, banned.reason)  # fmt: skip
            return None
    if outlasting:  # not waited out at once: the identity rests as for any ban (it may be
        banned.retry_after = None  # refused nearby for a ban of its own), patience decides
    return identity_refused(claimed, host, passage.who, banned)


def suspected(
    claimed: Claim,
    cache: JobCache,
    host: str,
    passage: gates.Passage,
    session: antibot.Session,
    outcome: outcomes.CrawlOutcome | None,
) -> str | None:
    """A connection reset, or a 502 or 503 without ``Retry-After`` (a proxy's answer when the
    site reset it, a site that says it is busy): the URL's new state if it is the identity's
    refusal (the identity is parked already, or is refused the page nearest the URL that was
    let in before); None if it is the URL's own error."""
    gateway = isinstance(outcome, outcomes.ServerError) and outcome.status in _SUSPECT
    if not (gateway or isinstance(outcome, outcomes.ConnectionReset)):
        return None
    if not parked(claimed, host, passage.who):
        nearby = let_in_nearby(claimed, cache, host, passage, session)
        if nearby is not False:
            log.info("job=%s url=%s %s, its identity %s: the URL's own error", claimed.job.pk,
                     claimed.url.url, outcome.reason, "let in nearby" if nearby else
                     "with no page let in nearby to ask")  # fmt: skip
            return None
    banned = outcomes.Banned(f"{outcome.reason}, the identity refused nearby too: {outcome}"[:500],
                             status=outcome.status)  # fmt: skip
    banned.headers, banned.body = outcome.headers, outcome.body
    return identity_refused(claimed, host, passage.who, banned)


def same_challenge(claimed: Claim, banned: outcomes.Banned) -> bool:
    """Did this URL's last attempt end on the same challenge (a CAPTCHA marker, a challenge
    redirect), found then to be the page's own? Then it is again, without asking. A challenge
    an identity met is not (sites challenge whoever made a burst), nor is a bare 403."""
    evidence = str(banned)
    return (
        evidence.startswith(("challenge", "redirected to a challenge"))
        and claimed.previous_reason == outcomes.Banned.reason
        and claimed.previous_message == evidence
    )


def parked(claimed: Claim, host: str, who: identity.Identity) -> bool:
    """Is ``who`` parked on the host already (this refusal is old news about it)?"""
    return identity.rest_left(claimed.job, host, who) > 0


def nearest_let_in(claimed: Claim) -> str | None:
    """The URL of the host nearest to this one (the longest common start, among its two
    neighbours in the frontier's order) whose page was let in with a 2xx answer to a GET (or
    a recrawl's 304; not a spider's error answer or other request, which a GET of its URL
    would not get again): a page of the same section where the host has one. Where the host
    let none in yet, its home page, unless that is this URL or robots.txt keeps the job out
    of it; else None."""
    url = claimed.url.url
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    done = FrontierURL.objects.filter(job_id=claimed.job.pk, state=URLState.DONE).filter(
        Q(http_status__gte=200, http_status__lt=300) | Q(http_status=304))  # 304: a recrawl's
    done = done.exclude(url__contains="#")  # a spider's POST, say: its key is no URL to GET
    below = done.filter(url__gte=origin + "/", url__lt=url).order_by("-url")
    above = done.filter(url__gt=url, url__lt=origin + "0").order_by("url")  # "0" follows "/"
    found = [u for q in (below, above) if (u := q.values_list("url", flat=True).first())]
    if found:
        return max(found, key=lambda u: len(os.path.commonprefix([u, url])))
    home = origin + "/"
    if home == url or (claimed.job.obey_robots and robots.forbidden(claimed.job, [home])):
        return None
    return home


def let_in_nearby(
    claimed: Claim,
    cache: JobCache,
    host: str,
    passage: gates.Passage,
    session: antibot.Session,
) -> bool | None:
    """Ask, as the identity that was refused, for the page nearest the URL that was let in
    before (``nearest_let_in``): True if the site answers it (a page, or an error answer such
    as a 404 or a 500: the identity is let in), False if that answer is a block page too, or
    may be a refusal itself (a 502 or 503, a reset, a timeout), None if there is nothing to
    ask."""
    job, who = claimed.job, passage.who
    nearest = nearest_let_in(claimed)
    if nearest is None:
        return None
    answer = antibot.visit(claimed, cache, who, session.visitor, nearest)
    if answer is None:
        return None
    sessions.save(job.pk, host, who.key, session.jar, session.visitor.set_cookies)
    if isinstance(answer, fetching.Response):
        blocked = antibot.ban(job, host, answer, None)
        # a JavaScript challenge is what the site shows every visitor new to it (a page let in
        # through the browser before): no refusal of this identity
        return blocked is None or antibot.passes_in_a_browser(job, blocked)
    answered = answer.status is not None and answer.status not in _SUSPECT
    return answered and antibot.ban(job, host, None, answer) is None


def identity_refused(
    claimed: Claim, host: str, who: identity.Identity, banned: outcomes.Banned
) -> str:
    """The identity's refusal: it is parked, the host's ladder counts it (if it is news), the
    host moves on to another identity, and the URL waits for it with its attempt given back;
    or the host's or the URL's patience ran out (see the module's docstring)."""
    job = claimed.job
    hold = min(banned.retry_after, setting("RETRY_BACKOFF_MAX_S", job)) if (
        banned.retry_after) else None  # fmt: skip
    news = identity.rest(job, host, who, hold).news
    if news and who.proxy_id:
        proxies.record(job.pk, who.proxy_id, "bans", job=job)
    step = ladder.signal(job, host, banned=True, ran_at=claimed.level, counted=news)
    if step.after != step.before:
        log.warning("job=%s host=%s ladder %d -> %d", job.pk, host, step.before, step.after)
    claimed.level = max(claimed.level, step.after)
    wait = identity.rest_left(job, host, identity.rotate(job, host, who))
    patience = setting("BAN_PATIENCE_S", job)
    if step.refused_s >= patience:
        return _host_out_of_patience(claimed, host, banned,
                                     f"every identity refused for {step.refused_s:.0f} s")
    if wait > 0 and step.refused_s + wait > patience:
        return _host_out_of_patience(claimed, host, banned, f"every identity refused for "
                                     f"{step.refused_s:.0f} s, the first back in {wait:.0f} s")
    if wait > 0:  # every identity is parked: the host waits for the first to come back
        if step.after >= ladder.BACK_OFF:
            politeness.slow_down(job.pk, host, setting("LADDER_BACKOFF_DELAY_S", job), job)
        politeness.hold(job.pk, host, wait)
        if identity.wait_for_lapse(job, host, wait):
            log.warning("job=%s: every identity is banned on %s: waiting %.1f s for a ban to "
                        "lapse", job.pk, host, wait)  # fmt: skip
    since = claimed.banned_since
    if since is not None and (timezone.now() - since).total_seconds() >= patience:
        log.warning("job=%s url=%s refused since %s (%s): banned", job.pk, claimed.url.url,
                    since.isoformat(), banned.reason)  # fmt: skip
        refused_s = (timezone.now() - since).total_seconds()
        return park(claimed, _past_patience(banned, f"this URL refused for {refused_s:.0f} s",
                                            patience))  # fmt: skip
    log.info("job=%s url=%s refused (%s): the identity's, tried again in %.1f s", job.pk,
             claimed.url.url, banned, wait)  # fmt: skip
    return retry_banned(claimed, banned, wait)


def _past_patience(banned: outcomes.Banned, how: str, patience: float) -> outcomes.Banned:
    """The outcome a URL ends with when patience ran out: the last refusal, and ``how`` long
    it was refused."""
    ended = outcomes.Banned(f"{how}, past BAN_PATIENCE_S ({patience:g} s): {banned}"[:2000],
                            status=banned.status)  # fmt: skip
    ended.headers, ended.body, ended.screenshot = banned.headers, banned.body, banned.screenshot
    return ended


def _host_out_of_patience(claimed: Claim, host: str, banned: outcomes.Banned, how: str) -> str:
    """The host let no page in for ``BAN_PATIENCE_S`` (or will not before its first park
    lapses: ``how`` says which): this URL and every URL of the host waiting in the frontier
    end as banned."""
    job = claimed.job
    ended = _past_patience(banned, how, setting("BAN_PATIENCE_S", job))
    state = park(claimed, ended)
    n = review.park_host(job.pk, host, ended, claimed.level)
    identity.stop_waiting(job, host)
    log.warning("job=%s host=%s: %s, past BAN_PATIENCE_S: %d URLs end banned (in review)",
                job.pk, host, how, n + 1)  # fmt: skip
    return state
