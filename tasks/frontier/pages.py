"""Writing a fetched page: on PostgreSQL, the one statement that commits the URL's DONE state,
its page and its new links (the lease check a CTE the inserts are joined to, so that a lost
lease writes nothing), and for a spider's page its items, stat rows and requests too; on
SQLite the same rows by plain statements in one transaction (``record_page_rows``, no ORM:
it cost a third of an embedded crawl's CPU); for redirects, the page's own upsert.

Reads no setting of its own (its cursor, ``db.prepared_cursor``, reads ``DB_PREPARE``). A
page the job's previous run stored is replaced: it keeps the run that found it, and the run
that last changed it unless its content hash is the same.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from django.db import connection, transaction
from django.db.models import JSONField
from django.utils import timezone

from tasks.fetch import outcomes
from tasks.frontier import stats
from tasks.frontier.claims import Claim, LeaseLost
from tasks.frontier.db import insert_rows, prepared, prepared_cursor
from tasks.rules.urls import host_of
from tasks.worker import metrics
from web.models import FrontierURL, Item, Page, URLState

TRUNCATED = "truncated"  # a done URL's note: its body was cut at FETCH_MAX_BYTES
_PAGE_FIELDS = tuple(f for f in Page._meta.concrete_fields if not f.primary_key)
_PAGE_JSON = frozenset(f.attname for f in _PAGE_FIELDS if isinstance(f, JSONField))


# Data-modifying CTEs run to completion whether or not the final SELECT reads them.
# Table and column names come from the models; every value is a bound parameter. The links
# and their hosts go as one text each, a line per link: canonical URLs hold no line breaks
# (URL parsing drops them), and one text costs the driver a tenth of a list's adaptation.
# Every frontier row it reads is found by key, whatever the planner's statistics say: the
# URL by its primary key alone (its lease check sits in a CASE, as the claim's statement in
# ``transitions.py``), each
# link by the unique (job, url) index. OFFSET 0 keeps the known-link test a probe per link:
# as an anti-join, the planner may read and sort every URL of the job for each page (it does
# while its statistics are older than the job), a cost that grows with the crawl.
_DONE = """
    UPDATE {frontier} SET state = %s, lease_until = NULL, http_status = %s, error_reason = %s,
                          error_message = '', updated_at = %s, ladder_level = %s
    WHERE id = %s AND CASE WHEN state = %s THEN attempts = %s ELSE false END"""
_PAGE_UPSERT = """
    ON CONFLICT (url_id) DO UPDATE SET {page_updates},
        modified_run = CASE WHEN {page}.content_hash = EXCLUDED.content_hash
                            THEN {page}.modified_run ELSE EXCLUDED.modified_run END"""
_FINISH_AND_PAGE = (
    "\nWITH fin AS (" + _DONE + "\n    RETURNING id, job_id, updated_at\n), page AS (\n"  # noqa: S608
    "    INSERT INTO {page} ({page_columns}) SELECT {page_values} FROM fin" + _PAGE_UPSERT + "\n)"
)
_NEW_LINKS = """
    INSERT INTO {frontier} (job_id, url, host, depth, state, attempts, not_before, error_reason,
                            error_message, updated_at, discovered_from_id{request_columns})
    SELECT %s, t.url, t.host, %s, CASE WHEN t.n > %s THEN %s ELSE %s END, 0, %s,
           CASE WHEN t.n > %s THEN %s ELSE '' END, CASE WHEN t.n > %s THEN %s ELSE '' END,
           %s, fin.id{request_values}
    FROM unnest(string_to_array(%s, E'\\n'), string_to_array(%s, E'\\n'){request_arrays})
         WITH ORDINALITY AS t(url, host{request_names}, n)
    CROSS JOIN fin
    WHERE NOT EXISTS (SELECT 1 FROM {frontier} f WHERE f.job_id = %s AND f.url = t.url OFFSET 0)
    ORDER BY t.url
    ON CONFLICT DO NOTHING
    RETURNING state"""
_COUNTS = """
SELECT (SELECT count(*) FROM fin), (SELECT count(*) FROM links WHERE state = %s)"""
_RECORD_SQL = _FINISH_AND_PAGE + ", links AS (" + _NEW_LINKS + "\n)" + _COUNTS
# A spider's page: the same, its items and its stat rows (``stats.py``) replacing those of the
# URL's previous run (a DELETE sees the statement's snapshot, so not the rows it inserts), and
# the requests' stored form (one JSON array, an element per line of the links' text; null for
# a plain GET). Items and stat rows take the URL's job and time from ``fin``, not from
# parameters of their own: psycopg keeps the parse of a statement's text for the next run only
# up to 50 parameters (``MAX_CACHED_STATEMENT_PARAMS``), and parses this one's 2.9 KB again
# for every page above that (0.11 ms).
_SPIDER_SQL = _FINISH_AND_PAGE + """, gone AS (
    DELETE FROM {item} WHERE url_id IN (SELECT id FROM fin)
), items AS (
    INSERT INTO {item} (job_id, url_id, spider, data, dropped, fields, run, created)
    SELECT fin.job_id, fin.id, %s, e.value -> 0, e.value ->> 1, NULLIF(e.value -> 2, 'null'),
           %s, fin.updated_at
    FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(value, n) CROSS JOIN fin
    ORDER BY e.n
""" + stats.SPIDER_CTES + "), links AS (" + _NEW_LINKS + "\n)" + _COUNTS  # noqa: S608 (names)
_NAMES = {
    "frontier": FrontierURL._meta.db_table,
    "page": Page._meta.db_table,
    "item": Item._meta.db_table,
    "page_columns": ", ".join(f.column for f in _PAGE_FIELDS),
    "page_values": ", ".join(["%s"] * len(_PAGE_FIELDS)),
    "page_updates": ", ".join(
        f"{f.column} = EXCLUDED.{f.column}"
        for f in _PAGE_FIELDS
        if f.name not in ("job", "url", "first_run", "modified_run")
    ),
}
_RECORD_SQL = _RECORD_SQL.format(**_NAMES, request_columns="", request_values="",
                                 request_arrays="", request_names="")  # fmt: skip
# Elsewhere (SQLite) the same steps as statements of their own, in one transaction: the URL
# done (``_DONE``), its page inserted or replaced, its links inserted (``db.insert_rows``), a
# link the frontier holds left as it is.
_DONE_SQL = _DONE.format(**_NAMES)
_SAVE_PAGE_SQL = (
    "INSERT INTO {page} ({page_columns}) VALUES ({page_values})" + _PAGE_UPSERT  # noqa: S608
).format(**_NAMES)
_SPIDER_SQL = _SPIDER_SQL.format(
    **_NAMES, request_columns=", request, priority",
    request_values=", NULLIF(%s::jsonb -> (t.n::int - 1), 'null'::jsonb), t.priority::smallint",
    request_arrays=", string_to_array(%s, E'\\n')", request_names=", priority",
)  # fmt: skip


def _page_values(page: Page) -> list:
    """The page's column values for the statement above. The engine sets each field to a
    value of its column's type, which Django's preparation (``get_db_prep_save``, a fifth of
    the statement's Python time) passes through unchanged on PostgreSQL, JSON apart: those
    are adapted as Django adapts them."""
    values = page.__dict__
    adapt = connection.ops.adapt_json_value
    return [
        adapt(values[f.attname], f.encoder) if f.attname in _PAGE_JSON else values[f.attname]
        for f in _PAGE_FIELDS
    ]


def record_page_statement(
    claim: Claim,
    page: Page,
    links: list[str],
    forbidden: list[str],
    note: str,
    skip: outcomes.Skip,
) -> None:
    """The statement above; the links to queue come first, then the forbidden ones (each
    link's line number tells them apart), which enter skipped with ``skip``."""
    _record(_RECORD_SQL, claim, page, note, [*links, *forbidden], len(links), skip)


def record_spider_statement(
    claim: Claim,
    page: Page,
    requests: list[tuple[str, dict | None, int]],
    forbidden: list[tuple[str, dict | None, int]],
    items: list[tuple[dict, str, list | None]],
    spider: str,
    skip: outcomes.Skip,
    changed: Sequence[stats.StatRow] = (),
) -> None:
    """``_SPIDER_SQL``: as ``record_page_statement``, with the page's items (data, the reason
    a pipeline dropped it, its field names), the stats it ``changed``, and its requests as
    (frontier key, stored request or None, priority), those robots.txt forbids entering
    skipped with ``skip``; a body cut at ``FETCH_MAX_BYTES`` noted ``truncated`` on the URL,
    as a crawl's page is."""
    now = timezone.now()
    every = [*requests, *forbidden]
    note = TRUNCATED if page.truncated else ""
    _record(_SPIDER_SQL, claim, page, note, [k for k, _, _ in every], len(requests), skip, now,
            items=[spider, claim.run, json.dumps(items), *stats.statement_params(changed)],
            stored=[json.dumps([r for _, r, _ in every])],
            ranks="\n".join(str(p) for _, _, p in every))  # fmt: skip


def _record(
    sql: str,
    claim: Claim,
    page: Page,
    note: str,
    keys: list[str],
    queued: int,
    skip: outcomes.Skip,
    now: datetime | None = None,
    items: list | None = None,
    stored: list | None = None,
    ranks: str | None = None,
) -> None:
    """Run one of the statements above: the URL done with ``note``, its page, the parameters
    of a spider's ``items`` and of its requests' ``stored`` form and priorities (``ranks``, a
    line each), and ``keys`` into the frontier, the first ``queued`` of them queued, the
    others skipped with ``skip``."""
    now = now or timezone.now()
    with prepared_cursor() as cursor:
        cursor.execute(sql, [
            URLState.DONE, page.status, note, now, claim.level, claim.url.pk, URLState.LEASED,
            claim.attempt,
            *_page_values(page),
            *(items or []),
            claim.job.pk, claim.url.depth + 1, queued, URLState.SKIPPED, URLState.QUEUED, now,
            queued, skip.reason, queued, str(skip), now, *(stored or []),
            "\n".join(keys), "\n".join(host_of(k) for k in keys),
            *([] if ranks is None else [ranks]), claim.job.pk, URLState.SKIPPED,
        ])  # fmt: skip
        finished, skipped = cursor.fetchone()
    if not finished:
        raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")
    metrics.skipped_at_discovery(claim.job.pk, skip.reason, skipped)


def record_page_rows(
    claim: Claim,
    page: Page,
    links: list[str],
    forbidden: list[str],
    note: str,
    skip: outcomes.Skip,
) -> None:
    """``record_page_statement`` where the database has no data-modifying CTE (SQLite): the
    same rows, written by the statements above in one transaction."""
    now = timezone.now()
    with transaction.atomic():
        finish_done(claim, page.status, note, now)
        save_page(page)
        _insert_links(claim, links, now)
        skipped = _insert_links(claim, forbidden, now, skip)
    metrics.skipped_at_discovery(claim.job.pk, skip.reason, skipped)


_LINK_FIELDS = ("job", "url", "host", "depth", "state", "attempts", "not_before",
                "error_reason", "error_message", "updated_at", "discovered_from")


def _insert_links(
    claim: Claim, urls: list[str], now: datetime, skip: outcomes.Skip | None = None
) -> int:
    """The page's new links, queued (or ended with ``skip``); how many were not there yet."""
    state, reason, message = (
        (URLState.QUEUED, "", "") if skip is None else (URLState.SKIPPED, skip.reason, str(skip))
    )
    job, depth, parent = claim.job.pk, claim.url.depth + 1, claim.url.pk
    rows = [(job, u, host_of(u), depth, state, 0, now, reason, message, now, parent) for u in urls]
    return insert_rows(FrontierURL, _LINK_FIELDS, rows, skip_existing=True)


def finish_done(claim: Claim, status: int, note: str, now: datetime) -> None:
    """Inside a transaction: the leased URL done with ``status`` and ``note``; LeaseLost (and
    nothing written) if its lease ended."""
    with connection.cursor() as cursor:
        cursor.execute(_DONE_SQL, [
            URLState.DONE, status, note, connection.ops.adapt_datetimefield_value(now),
            claim.level, claim.url.pk, URLState.LEASED, claim.attempt,
        ])  # fmt: skip
        if cursor.rowcount != 1:
            raise LeaseLost(f"lease on URL {claim.url.pk} (attempt {claim.attempt}) ended")


def save_page(page: Page) -> None:
    """Insert the page, or replace the one the job's previous run stored (same rules as the
    statement above): one statement."""
    values = page.__dict__
    with connection.cursor() as cursor:
        cursor.execute(_SAVE_PAGE_SQL,
                       prepared(_PAGE_FIELDS, [values[f.attname] for f in _PAGE_FIELDS]))
