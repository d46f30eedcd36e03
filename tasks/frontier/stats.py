"""A spider job's stats (``crawler.stats``) as rows: one per stat a page changed and the way it
changed it (``Stat``), written with the page, and aggregated when they are read.

Reads no setting. A page's rows are written in the page's own transaction: on PostgreSQL two
CTEs of its one statement (``SPIDER_CTES``, in ``pages.py``), elsewhere ``replace``; they
replace the rows the URL's page wrote before (a recrawl), as its items do. Rows changed outside
a page (the job's start, a worker opening or closing the job's pipelines) are written on their
own (``add``). No row is ever updated, so pages never wait on each other's locks.

A stat's value is its rows folded in order (``fold``): the latest ``set`` (or the stat Scrapy
computes, ``builtin``), then the ``inc`` rows since added (to the first ``start`` if nothing
came before), then the highest ``max`` and the lowest ``min`` since; a ``clear`` forgets
every row before it. On PostgreSQL the database sums and compares (one row per stat and kind
comes back); elsewhere the rows are folded here. ``max``/``min`` compare numbers as numbers
and anything else as its text.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import Count, Max

from tasks.frontier.db import insert_rows
from web.models import (
    TERMINAL_STATES,
    CrawlJob,
    FrontierURL,
    Item,
    JobState,
    Stat,
    StatKind,
)

MISSING = object()  # a stat no row gave a value (get_value's default is returned for it)
Groups = dict[str, dict[str, Any]]  # stat name -> {kind: its rows' aggregate}


class StatRow(NamedTuple):
    """One change to a stat, as a row keeps it."""

    name: str
    kind: str  # a StatKind
    value: Any  # JSON


_TABLE = Stat._meta.db_table
# The spider's page statement (``pages.py``) takes these CTEs after its items: the rows the
# URL's page wrote before go, the new ones (a JSON array of [name, kind, value]) come in,
# both only if the lease check (``fin``) passed, in the page's order (a clear before what
# came after it). Each page pays one probe of the url index whether or not it changed a
# stat, as its items do.
SPIDER_CTES = f"""), gone_stats AS (
    DELETE FROM {_TABLE} WHERE url_id IN (SELECT id FROM fin)
), stats AS (
    INSERT INTO {_TABLE} (job_id, url_id, name, kind, value)
    SELECT fin.job_id, fin.id, e.value ->> 0, e.value ->> 1, e.value -> 2
    FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(value, n) CROSS JOIN fin
    ORDER BY e.n
"""  # noqa: S608 (the table's name, no values)


def statement_params(rows: Sequence[StatRow]) -> list:
    """``SPIDER_CTES``'s parameter: the rows, "[]" when the page changed no stat (the job is
    the URL's, from ``fin``)."""
    return [json.dumps([list(r) for r in rows]) if rows else "[]"]


def replace(job_id: int, url_id: int, rows: Sequence[StatRow]) -> None:
    """Inside the page's transaction, off PostgreSQL's one statement: the URL's rows."""
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {_TABLE} WHERE url_id = %s", [url_id])  # noqa: S608 (name)
    add(job_id, rows, url_id)


def add(job_id: int, rows: Sequence[StatRow], url_id: int | None = None) -> None:
    """Write ``rows`` (``url_id`` None: changed outside a page)."""
    insert_rows(Stat, ("job", "url", "name", "kind", "value"),
                [(job_id, url_id, r.name, r.kind, r.value) for r in rows])  # fmt: skip


# Each stat and kind once, over the rows since the job's latest clear and the stat's latest
# set (both found through the (job, kind, name) index: they are few): the inc rows summed,
# max and min over numbers and over text apart, in one pass over the job's rows; then the
# (one) latest set and the first start of each stat. A read costs a pass over the job's
# rows: the callers keep what it gives in proportion to what it took.
_AGGREGATE = f"""
WITH since AS (
    SELECT name, max(id) AS id FROM {_TABLE} WHERE job_id = %s AND kind = 'set' GROUP BY name
), cleared AS (
    SELECT coalesce(max(id), 0) AS id FROM {_TABLE} WHERE job_id = %s AND kind = 'clear'
)
SELECT r.name, r.kind,
       sum((r.value)::numeric) FILTER (WHERE r.kind = 'inc'),
       max((r.value)::numeric) FILTER (WHERE r.kind = 'max' AND jsonb_typeof(r.value) = 'number'),
       max((r.value #>> '{{}}') COLLATE "C")
           FILTER (WHERE r.kind = 'max' AND jsonb_typeof(r.value) <> 'number'),
       min((r.value)::numeric) FILTER (WHERE r.kind = 'min' AND jsonb_typeof(r.value) = 'number'),
       min((r.value #>> '{{}}') COLLATE "C")
           FILTER (WHERE r.kind = 'min' AND jsonb_typeof(r.value) <> 'number'),
       NULL::jsonb
FROM {_TABLE} r CROSS JOIN cleared LEFT JOIN since ON since.name = r.name
WHERE r.job_id = %s AND r.kind IN ('inc', 'max', 'min') AND r.id > greatest(cleared.id, since.id)
GROUP BY r.name, r.kind
UNION ALL
SELECT * FROM (
    SELECT DISTINCT ON (r.name, r.kind) r.name, r.kind, NULL::numeric, NULL::numeric, NULL,
           NULL::numeric, NULL, r.value
    FROM {_TABLE} r CROSS JOIN cleared LEFT JOIN since ON since.name = r.name
    WHERE r.job_id = %s AND r.kind IN ('set', 'start') AND r.id > cleared.id
          AND r.id >= coalesce(since.id, 0)
    ORDER BY r.name, r.kind, CASE WHEN r.kind = 'set' THEN -r.id ELSE r.id END
) AS kept"""  # noqa: S608 (the table's name, no values)


def aggregate(job_id: int) -> Groups:
    """The job's rows, aggregated by stat and kind (what ``fold`` takes)."""
    if connection.vendor != "postgresql":
        rows = Stat.objects.filter(job_id=job_id).order_by("id")
        return _grouped(rows.values_list("id", "name", "kind", "value"))
    with connection.cursor() as cursor:
        cursor.execute(_AGGREGATE, [job_id] * 4)
        found = cursor.fetchall()
    out: Groups = {}
    for name, kind, total, top, top_text, low, low_text, kept in found:
        if kind == StatKind.INC:
            value = _number(total)
        elif kind == StatKind.MAX:
            value = _number(top) if top is not None else top_text
        elif kind == StatKind.MIN:
            value = _number(low) if low is not None else low_text
        else:
            value = json.loads(kept) if isinstance(kept, str) else kept
        out.setdefault(name, {})[kind] = value
    return out


def _grouped(rows: Iterable[tuple[int, str, str, Any]]) -> Groups:
    """``aggregate``'s answer from the rows themselves, in id order (what the query above
    computes on PostgreSQL)."""
    every = list(rows)
    cleared = max((n for n, (_, _, kind, _) in enumerate(every) if kind == StatKind.CLEAR),
                  default=-1)  # fmt: skip
    out: Groups = {}
    for _, name, kind, value in every[cleared + 1 :]:
        merge(out.setdefault(name, {}), kind, value)
    return out


def merge(changes: dict[str, Any], kind: str, value: Any) -> None:
    """A stat's aggregate ``changes`` (by kind), one change of ``kind`` later: a set replaces
    what came before it, the first start is kept, incs add up, max and min keep the bound."""
    if kind == StatKind.SET:
        changes.clear()
        changes[kind] = value
    elif kind == StatKind.START:
        changes.setdefault(kind, value)
    elif kind == StatKind.INC:
        changes[kind] = changes.get(kind, 0) + value
    else:
        changes[kind] = value if kind not in changes else _compared(changes[kind], value, kind)


def _compared(kept: Any, value: Any, kind: str) -> Any:
    """The higher (``max``) or lower (``min``) of two values, numbers before anything else as
    the query compares them (numbers as numbers, the rest as text)."""
    numbers = [v for v in (kept, value) if _is_number(v)]
    if len(numbers) == 1:
        return numbers[0]
    pair = numbers or [_text(kept), _text(value)]
    return max(pair) if kind == StatKind.MAX else min(pair)


def _text(value: Any) -> str:
    """A value that is no number as the query compares it (``#>> '{}'``): a string itself,
    anything else its JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def is_number(value: Any) -> bool:
    """What ``inc_value`` adds to: a number, or a bool (as Python adds to one)."""
    return isinstance(value, int | float)


def _is_number(value: Any) -> bool:
    """A number as JSON has it (the query's comparisons): a bool is none."""
    return is_number(value) and not isinstance(value, bool)


def _number(value: Decimal | None) -> int | float | None:
    """A sum or bound the database computed, as the JSON numbers it came from: an int where
    they were (no fractional digits), else a float."""
    if value is None:
        return None
    return int(value) if value.as_tuple().exponent >= 0 else float(value)


def fold(changes: dict[str, Any] | None, base: Any = MISSING) -> Any:
    """A stat's value: ``base`` (MISSING: none) changed by its rows' aggregate ``changes``."""
    if not changes:
        return base
    value = changes.get(StatKind.SET, base)
    if StatKind.INC in changes:
        start = changes.get(StatKind.START, 0)
        counted = start if value is MISSING else value
        if is_number(counted):  # else another worker's set_value came first: its text stays
            value = counted + changes[StatKind.INC]
    for kind in (StatKind.MAX, StatKind.MIN):
        if kind in changes:
            value = changes[kind] if value is MISSING else _compared(value, changes[kind], kind)
    return value


# Scrapy's built-in stats that the job's tables already hold: computed, never written.
BUILTIN_PREFIXES = ("item_dropped_reasons_count/", "downloader/response_status_count/")
BUILTIN_NAMES = frozenset({"start_time", "finish_time", "elapsed_time_seconds",
                           "finish_reason", "item_scraped_count", "item_dropped_count",
                           "response_received_count", "request_depth_max"})  # fmt: skip
_FINISHED_AS = {JobState.FINISHED: "finished", JobState.CANCELLED: "cancelled",
                JobState.FAILED: "failed"}  # fmt: skip
PIPELINE_ERROR = "pipeline_error"  # Scrapy's item_error, not a drop (tasks/content/items.py)
SCHEMA = "schema"  # counted by kind, not by the path and message after it


def finish_reason(state: str, close_reason: str, max_pages: int | None, released: int) -> str:
    """How a run ended, as Scrapy names it: the reason of the CloseSpider that ended it,
    ``closespider_pagecount`` if it finished at its ``max_pages`` (Scrapy's
    ``CLOSESPIDER_PAGECOUNT``), else by its state (a run recrawled since: finished)."""
    if close_reason:
        return close_reason
    if state == JobState.FINISHED and max_pages and released >= max_pages:
        return "closespider_pagecount"
    return _FINISHED_AS.get(state, "finished")


def is_builtin(name: str) -> bool:
    return name in BUILTIN_NAMES or name.startswith(BUILTIN_PREFIXES)


def builtin(job: CrawlJob) -> dict[str, Any]:
    """Scrapy's core stats of ``job`` (``CoreStats``, ``DownloaderStats``, ``DepthMiddleware``),
    from its tables: each URL counted once, by its last answer; only those Scrapy would have
    set (no count of zero)."""
    out: dict[str, Any] = {}
    if job.started_at is not None:
        out["start_time"] = job.started_at
    if job.state in TERMINAL_STATES and job.finished_at is not None:
        out["finish_time"] = job.finished_at
        if job.started_at is not None:
            out["elapsed_time_seconds"] = (job.finished_at - job.started_at).total_seconds()
        out["finish_reason"] = finish_reason(job.state, job.close_reason, job.max_pages,
                                             job.released)  # fmt: skip
    kept, dropped = 0, Counter()
    for reason, n in Item.objects.filter(job_id=job.pk).values_list("dropped").annotate(
            n=Count("id")).order_by():  # fmt: skip
        if not reason:
            kept = n
        elif reason != PIPELINE_ERROR:
            dropped[SCHEMA if reason.startswith(f"{SCHEMA}:") else reason] += n
    if kept:
        out["item_scraped_count"] = kept
    if dropped:
        out["item_dropped_count"] = sum(dropped.values())
        out.update({f"item_dropped_reasons_count/{r}": n for r, n in sorted(dropped.items())})
    answered, deepest = Counter(), 0
    for status, n, depth in (FrontierURL.objects.filter(job_id=job.pk).values_list("http_status")
                             .annotate(n=Count("id"), depth=Max("depth")).order_by()):  # fmt: skip
        deepest = max(deepest, depth or 0)
        if status is not None:
            answered[status] = n
    if answered:
        out["response_received_count"] = sum(answered.values())
        out.update({f"downloader/response_status_count/{s}": n
                    for s, n in sorted(answered.items())})  # fmt: skip
    if deepest:
        out["request_depth_max"] = deepest
    return out


def stats_of(job: CrawlJob) -> dict[str, Any]:
    """What ``crawler.stats.get_stats()`` gives outside a page, for the job's status, the API,
    the dashboard and the metrics: the built-in stats, with the spider's rows on them, by name."""
    found = builtin(job)
    for name, changes in aggregate(job.pk).items():
        value = fold(changes, found.get(name, MISSING))
        if value is not MISSING:
            found[name] = value
    return dict(sorted(found.items()))
