"""Committing what a spider's callback yielded: the URL's DONE state, its page, its items, the
stats it changed (``stats.py``) and the new requests, in one transaction (or, for an errback,
the URL's failure and what the errback yielded), so that a worker killed at any moment leaves
each item and stat stored once (or not yet, and the URL's lease sweep runs the callback
again).

Reads no setting. The new requests enter the frontier with ``ON CONFLICT DO NOTHING`` on the
unique (job, url) index, whose key is the request's fingerprint (``tasks/content/rows.py``):
a request already there is not added twice. A recrawl replaces the items (and stat rows) the
URL's page yielded in the run before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from django.db import connection, transaction
from django.utils import timezone

from tasks.fetch import outcomes
from tasks.frontier import requeue, stats
from tasks.frontier.claims import Claim
from tasks.frontier.db import insert_rows
from tasks.frontier.pages import TRUNCATED, finish_done, record_spider_statement, save_page
from tasks.frontier.transitions import (
    ROBOTS_FORBIDDEN,
    duplicate_redirect,
    mark_redirect_target,
    record_failure,
    take_redirect_target,
)
from tasks.rules.urls import host_of
from tasks.worker import metrics
from web.models import CrawlJob, FrontierURL, Item, Page, URLState


class NewRequest(NamedTuple):
    """A request a callback yielded, as its frontier row will hold it."""

    key: str  # the frontier's URL column: the canonical URL, with the fingerprint if needed
    request: dict | None  # method, headers, body, callback, ...; None: a plain GET for parse
    skip: outcomes.Skip | None  # enters ended with this outcome (robots.txt forbids it)
    priority: int = 0  # released before lower ones (the frontier's column's range)
    depth: int | None = None  # its own depth (see ``callbacks.new_requests``); None: the page's + 1


class Redirect(NamedTuple):
    """Where a spider request's redirects led: the target's frontier key, and whether a
    queued row of it (a request that would run the same callback) may be taken."""

    target: str
    take_queued: bool


class NewItem(NamedTuple):
    data: dict
    dropped: str  # the reason a pipeline dropped it; "": kept
    fields: list | None = None  # its fields in the order feeds write them (items.field_names)


_REQUEST_FIELDS = ("job", "url", "host", "depth", "state", "attempts", "not_before",
                   "error_reason", "error_message", "updated_at", "discovered_from", "request",
                   "priority")  # fmt: skip
_ITEM_FIELDS = ("job", "url", "spider", "data", "dropped", "fields", "run", "created")
_DELETE_ITEMS_SQL = f"DELETE FROM {Item._meta.db_table} WHERE url_id = %s"  # noqa: S608 (name)


def insert_requests(job_id: int, requests: Sequence[NewRequest], depth: int,
                    parent_id: int | None) -> int:  # fmt: skip
    """Frontier rows for requests (sorted, as every insert of links is, so that two pages
    inserting the same keys take the index's locks in the same order), at ``depth`` unless a
    request has its own; how many were new."""
    now = timezone.now()
    rows = [
        (job_id, r.key, host_of(r.key), depth if r.depth is None else r.depth,
         URLState.QUEUED if r.skip is None else URLState.SKIPPED, 0, now,
         "" if r.skip is None else r.skip.reason, "" if r.skip is None else str(r.skip), now,
         parent_id, r.request, r.priority)
        for r in sorted(requests, key=lambda r: r.key)
    ]  # fmt: skip
    return insert_rows(FrontierURL, _REQUEST_FIELDS, rows, skip_existing=True)


def _add(claim: Claim, requests: Sequence[NewRequest], items: Sequence[NewItem], spider: str,
         now, changed: Sequence[stats.StatRow]) -> None:  # fmt: skip
    with connection.cursor() as cursor:  # a recrawl's run replaces them
        cursor.execute(_DELETE_ITEMS_SQL, [claim.url.pk])
    stats.replace(claim.job.pk, claim.url.pk, changed)
    insert_rows(Item, _ITEM_FIELDS, [
        (claim.job.pk, claim.url.pk, spider, i.data, i.dropped[:200], i.fields, claim.run, now)
        for i in items
    ])  # fmt: skip
    if requests:
        insert_requests(claim.job.pk, requests, claim.url.depth + 1, claim.url.pk)


def _added(claim: Claim, requests: Sequence[NewRequest]) -> None:
    claim.new_links = any(r.skip is None for r in requests)
    forbidden = [r for r in requests if r.skip is not None]
    if forbidden:
        metrics.skipped_at_discovery(claim.job.pk, forbidden[0].skip.reason, len(forbidden))


def record_spider_failure(
    claim: Claim,
    outcome: outcomes.CrawlOutcome,
    requests: Sequence[NewRequest],
    items: Sequence[NewItem],
    spider: str,
    closing: str | None = None,
    changed: Sequence[stats.StatRow] = (),
    reached: str | None = None,
) -> str:
    """One transaction: the URL ended with ``outcome``, what its errback yielded and the
    stats it ``changed`` (and, if it raised CloseSpider, the crawl's end: ``close``).
    ``reached``: the URL its redirects led to, where the failure came (``record_reached``)."""
    with transaction.atomic():
        if reached is not None and not mark_redirect_target(claim, reached):
            return duplicate_redirect(claim, reached, outcome.status)
        state = record_failure(claim, outcome)
        _add(claim, requests, items, spider, timezone.now(), changed)
        if closing is not None:
            close(claim, closing)
    _added(claim, requests)
    return state


def record_reached(claim: Claim, outcome: outcomes.CrawlOutcome, reached: str) -> str:
    """One transaction: the URL ended with ``outcome`` at ``reached``, a URL its redirects led
    to, which is marked as seen (``mark_redirect_target``); if the frontier holds that URL as
    its own by now, this URL is skipped as a duplicate redirect instead."""
    with transaction.atomic():
        if not mark_redirect_target(claim, reached):
            return duplicate_redirect(claim, reached, outcome.status)
        return record_failure(claim, outcome)


def record_spider_page(
    claim: Claim,
    page: Page,
    requests: Sequence[NewRequest],
    items: Sequence[NewItem],
    spider: str,
    redirect: Redirect | None = None,
    closing: str | None = None,
    changed: Sequence[stats.StatRow] = (),
) -> str:
    """One transaction: the URL done, its page, its items, the stats its callback, pipelines
    and signal handlers ``changed``, and its new requests; a lost lease writes nothing
    (LeaseLost). On PostgreSQL one statement (``pages.py``), elsewhere (and for
    a page reached through a redirect) plain statements in one transaction.

    A page reached through ``redirect`` is stored once, as a crawl's (``record_page``): if
    its target is fetched as its own URL, or another redirect took it, this URL is skipped as
    ``duplicate_redirect`` with nothing of what the callback yielded, as Scrapy's duplicate
    filter drops a redirect to a request it has seen. ``closing``: the callback raised
    CloseSpider with this reason (``close``, in the same transaction). Requests of a depth
    of their own (a meta refresh's, ``depth_reset``) take the plain statements too."""
    below = claim.url.depth + 1
    if (connection.vendor == "postgresql" and redirect is None and closing is None
            and all(r.depth in (None, below) for r in requests)):  # fmt: skip
        ordered = sorted(requests, key=lambda r: r.key)
        record_spider_statement(
            claim, page, [(r.key, r.request, r.priority) for r in ordered if r.skip is None],
            [(r.key, r.request, r.priority) for r in ordered if r.skip is not None],
            [(i.data, i.dropped[:200], i.fields) for i in items], spider, ROBOTS_FORBIDDEN,
            changed,
        )  # fmt: skip
        claim.new_links = any(r.skip is None for r in requests)
        return URLState.DONE
    now = timezone.now()
    with transaction.atomic():
        if redirect is not None and not take_redirect_target(claim, redirect.target,
                                                             redirect.take_queued):  # fmt: skip
            return duplicate_redirect(claim, redirect.target, page.status)
        finish_done(claim, page.status, TRUNCATED if page.truncated else "", now)
        save_page(page)
        _add(claim, requests, items, spider, now, changed)
        if closing is not None:
            close(claim, closing)
    _added(claim, requests)
    return URLState.DONE


def close_crawl(claim: Claim, reason: str) -> None:
    """``close`` in a transaction of its own: after the page that ended the crawl committed."""
    with transaction.atomic():
        close(claim, reason)


def close(claim: Claim, reason: str) -> None:
    """Inside the page's transaction: its spider ends the crawl (CloseSpider). The URLs not
    yet fetched are skipped as ``close_spider``; the job keeps the reason, which claims and
    release honour (what pages in flight add, or give back, is skipped too). The frontier's
    rows are written before the job's, in the order a release takes its locks. A page of a
    previous run (in flight across a recrawl) closes nothing."""
    run = CrawlJob.objects.filter(pk=claim.job.pk, run=claim.run)
    if not run.exists():
        return
    requeue.skip(FrontierURL.objects.filter(job_id=claim.job.pk), requeue.CLOSE_SPIDER,
                 reason[:2000])  # fmt: skip
    run.filter(close_reason="").update(close_reason=reason[:200])
    claim.closed_crawl = True
