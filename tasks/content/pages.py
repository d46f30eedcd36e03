"""Store a fetched page: what its body means (HTML, sitemap, something else), the links it
adds, the robots directives and extraction rules that apply to it, its raw body, and the one
transaction that commits page, links and the URL's new state.

Reads ``ROBOTS_AGENT``, ``FETCH_MAX_BYTES`` (a sitemap's cap) and ``BODY_MAX_BYTES``. Every
page is marked with the channel and version of the worker that stored it.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime
from typing import NamedTuple

from tasks.content import bodies, extraction, parsing, sitemaps
from tasks.content.links import JobCache, in_scope, new_links
from tasks.defaults import setting
from tasks.fetch import antibot, bans, fetching, outcomes, robots
from tasks.frontier import channels
from tasks.frontier.claims import Claim
from tasks.frontier.db import with_retries
from tasks.frontier.pages import TRUNCATED
from tasks.frontier.transitions import record_failure, record_page
from tasks.rules import selectors
from tasks.rules.urls import host_of
from web.models import CrawlJob, Page

log = logging.getLogger(__name__)
CHANNEL, VERSION = channels.mine(), channels.version()  # marked on every page stored here


NOINDEX = "noindex"  # a done URL's note: fetched, not kept as content (robots directives)


def validators(claimed: Claim) -> dict[str, str] | None:
    """A recrawl's conditional request headers, from the page the previous run stored."""
    if claimed.run <= 1:
        return None
    http = Page.objects.filter(url_id=claimed.url.pk).values_list("http", flat=True).first()
    if not http:
        return None
    sent = {}
    for name, value in http.get("response", []):
        if name.lower() == "etag":
            sent["If-None-Match"] = value
        elif name.lower() == "last-modified":
            sent["If-Modified-Since"] = value
    return sent or None


def store(claimed: Claim, cache: JobCache, resp: fetching.Response, rendering: bool = False) -> str:
    """Parse the fetched page, find its links and commit it with them; the URL's new state."""
    job = claimed.job
    note = TRUNCATED if resp.truncated else ""
    is_html = resp.content_type in parsing.HTML_TYPES
    parsed = None
    if is_html and parsing.looks_binary(resp.body):
        note = "binary"
    elif is_html:
        try:
            parsed = parsing.parse_html(resp.body, resp.content_type_header, resp.final_url,
                                        setting("ROBOTS_AGENT", job))  # fmt: skip
        except Exception as exc:  # a page must never crash the worker, whatever it holds
            log.exception("job=%s url=%s: parser failed", job.pk, claimed.url.url)
            return record_failure(claimed, outcomes.ParseError(f"{type(exc).__name__}: {exc}"))
        if (job.render == "auto" and not rendering and antibot.may_render(job)
                and parsing.needs_javascript(parsed, resp.body)):  # fmt: skip
            return antibot.hand_to_render(claimed)  # its content and links come from JavaScript
        bans.learn_size(job.pk, host_of(claimed.url.url), len(resp.body))
    found = _links(claimed, cache, resp, parsed, note)
    return _commit(claimed, cache, resp, parsed, found)


class _Found(NamedTuple):
    """What a page adds to the frontier, and what its URL keeps."""

    links: list[str]  # new work for the scheduler
    forbidden: list[str]  # into the frontier as skipped: robots.txt forbids them
    note: str  # the done URL's note: truncated, binary, sitemap, not_html, or ""
    noindex: bool  # robots directives: fetched, its links followed, not kept as content


def _links(
    claimed: Claim,
    cache: JobCache,
    resp: fetching.Response,
    parsed: parsing.Parsed | None,
    note: str,
) -> _Found:
    """A sitemap's URLs, or an HTML page's links unless its robots directives say nofollow;
    split by the robots.txt this worker holds for their hosts."""
    job = claimed.job
    links: list[str] = []
    if resp.content_type not in parsing.HTML_TYPES:
        if job.use_sitemaps and sitemaps.looks_like_sitemap(resp.final_url, resp.content_type):
            listed = sitemaps.parse_sitemap(resp.body, setting("FETCH_MAX_BYTES", job))
            links = new_links(cache, resp.final_url, listed)
            note = note or ("sitemap" if listed else "not_html")
        else:
            note = note or "not_html"
    directives = _directives(job, resp, parsed)
    if parsed is not None and claimed.url.depth < job.max_depth and "nofollow" not in directives:
        hrefs = parsed.hrefs
        if job.obey_nofollow and parsed.nofollow_hrefs:
            hrefs = [h for h in hrefs if h not in parsed.nofollow_hrefs]
        links = new_links(cache, parsed.base, hrefs)
    queued, forbidden = _robots_split(job, links)
    return _Found(queued, forbidden, note, "noindex" in directives)


def _commit(
    claimed: Claim,
    cache: JobCache,
    resp: fetching.Response,
    parsed: parsing.Parsed | None,
    found: _Found,
) -> str:
    """One transaction: the page (unless noindex), its links and the URL's new state."""
    links, forbidden = found.links, found.forbidden
    if found.noindex:  # fetched, its links followed (unless nofollow), not kept
        state = with_retries(lambda: record_page(claimed, None, links, NOINDEX, None, resp.status,
                                                 forbidden))  # fmt: skip
        _committed(claimed, cache, links, forbidden)
        return state
    data = _extracted(claimed, parsed) if parsed is not None and claimed.job.extract else {}
    redirect_target = None
    if resp.final_url != claimed.url.url:
        redirect_target = in_scope(cache, resp.final_url) or None
    page = page_row(claimed, resp, parsed.title if parsed is not None else "", data)
    state = with_retries(
        lambda: record_page(claimed, page, links, found.note, redirect_target, forbidden=forbidden)
    )
    _committed(claimed, cache, links, forbidden)
    return state


def page_row(claimed: Claim, resp: fetching.Response, title: str, data: dict) -> Page:
    """The page's row, its raw body kept first."""
    job = claimed.job
    now = datetime.now(UTC)
    return Page(
        job_id=job.pk,
        url_id=claimed.url.pk,
        final_url=resp.final_url[:2048],
        status=resp.status,
        content_type=resp.content_type[:200],
        title=title,
        size=len(resp.body),
        truncated=resp.truncated,
        elapsed_ms=int(resp.elapsed * 1000),
        fetched_at=now,
        checked_at=now,
        content_hash=hashlib.sha256(resp.body).hexdigest(),
        data=data,
        body_key=_store_body(claimed, resp),
        http=resp.http,
        run=claimed.run,
        first_run=claimed.run,
        modified_run=claimed.run,
        channel=CHANNEL,
        worker_version=VERSION,
    )


def _directives(job: CrawlJob, resp: fetching.Response, parsed: parsing.Parsed | None) -> set[str]:
    """The page's robots directives, when the job obeys robots."""
    if not job.obey_robots:
        return set()
    pairs = resp.http.get("response") or resp.headers.items()  # one value per header line
    header = [v for k, v in pairs if k.lower() == "x-robots-tag"]
    meta = parsed.robots if parsed is not None else frozenset()
    return parsing.robots_directives(meta, header, setting("ROBOTS_AGENT", job))


def _extracted(claimed: Claim, parsed: parsing.Parsed) -> dict:
    """The job's extraction rules on the page; a page they cannot be applied to keeps its
    other content (the reason is logged)."""
    rules = selectors.applies(selectors.rules_of(claimed.job.extract), claimed.url.url)
    if not rules:
        return {}
    try:
        return extraction.extract(rules, parsed.text, parsed.tree)
    except Exception:  # a page must never crash the worker, whatever it holds
        log.exception("job=%s url=%s: extraction rules failed", claimed.job.pk, claimed.url.url)
        return {}


def _store_body(claimed: Claim, resp: fetching.Response) -> str:
    """Keep the raw body (before the page's commit, so a committed page has it); its name."""
    job = claimed.job
    raw = resp.raw_body or resp.body
    if not job.store_bodies or len(raw) > setting("BODY_MAX_BYTES", job):
        return ""
    return bodies.put(job.pk, raw)


class _Split(NamedTuple):
    queued: list[str]  # new work for the scheduler
    forbidden: list[str]  # into the frontier as skipped: robots.txt forbids them


def _robots_split(job: CrawlJob, links: list[str]) -> _Split:
    """The links to queue, and those the robots.txt this worker holds for their hosts forbids
    (they enter the frontier skipped, as their fetch would have ended: no release, message or
    claim for them, and no turn of their host's politeness)."""
    if not job.obey_robots or not links:
        return _Split(links, [])
    forbidden = robots.forbidden(job, links)
    if not forbidden:
        return _Split(links, [])
    return _Split([u for u in links if u not in forbidden], [u for u in links if u in forbidden])


def _committed(
    claimed: Claim, cache: JobCache, links: list[str], forbidden: list[str] = ()
) -> None:
    """The page's links are in the frontier: this process sends them no more; only those
    queued are new work for the scheduler."""
    for url in [*links, *forbidden]:
        cache.committed.put(url)
    claimed.new_links = bool(links)
