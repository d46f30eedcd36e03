"""The database plumbing the frontier's statements share: a cursor that prepares the hot
statements on PostgreSQL, a condition that keeps the planner on primary keys, rows inserted
without model instances, the retry of a transaction the database aborted, and the pooled
connection given back while a worker waits.

Reads ``DB_PREPARE``.
"""

from __future__ import annotations

import functools
import random
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TypeVar

from django.db import OperationalError, connection
from django.db.models import BooleanField, Case, DateTimeField, Field, JSONField, Model, Value, When

from tasks.defaults import setting

_T = TypeVar("_T")
_TRANSIENT_SQLSTATES = {"40P01", "40001", "55P03"}  # deadlock, serialization, lock timeout


class _BoundCursor:
    """A psycopg cursor that binds on the server, run as Django runs its own: through the
    connection's execute wrappers (``connection.execute_wrapper``), refused inside a broken
    atomic block, with Django's errors. Django's debug log of queries does not list it."""

    def __init__(self, cursor) -> None:
        self.cursor = cursor

    def execute(self, sql: str, params: list) -> None:
        connection.validate_no_broken_transaction()
        run = self._run
        for wrapper in reversed(connection.execute_wrappers):
            run = functools.partial(wrapper, run)
        with connection.wrap_database_errors:
            run(sql, params, False, {"connection": connection, "cursor": self})

    def _run(self, sql: str, params: list, many: bool, context: dict) -> None:
        self.cursor.execute(sql, params)

    def fetchone(self):
        return self.cursor.fetchone()

    def fetchall(self):
        return self.cursor.fetchall()

    @property
    def rowcount(self) -> int:
        return self.cursor.rowcount


# Connections whose prepared statements take the generic plan from their first run: planned
# once per connection (and again after an analysis of the table), not at each of its first
# runs, and at each run for good when PostgreSQL finds the custom plans no dearer (planning
# the page's statement costs more than running it). Every statement prepared here finds its
# rows by key on a generic plan too (``tests/test_frontier.py``). Behind a pooler in
# transaction mode the SET lands on the server connection that ran it, and the others plan as
# PostgreSQL's default does (``docs/operations.md``).
_GENERIC: weakref.WeakSet = weakref.WeakSet()


@contextmanager
def prepared_cursor() -> Iterator:
    """A cursor for the statements every page, message and release runs. On PostgreSQL it
    binds parameters on the server and prepares each statement at its first run on a
    connection (``DB_PREPARE``; psycopg keeps one per text and parameter types, a hundred at
    most), on a generic plan (``_GENERIC``), so that PostgreSQL parses and plans it once per
    connection instead of at every run, and no parameter is quoted into the text in Python.
    Django's own cursors bind on the client, which never prepares, so the ORM's statements
    are not affected by the connection's threshold nor its plan mode. Elsewhere it is
    Django's cursor."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    import psycopg

    connection.ensure_connection()
    raw = connection.connection
    prepare = setting("DB_PREPARE")
    raw.prepare_threshold = 0 if prepare else None
    if prepare and raw not in _GENERIC and raw.autocommit:  # a SET outside any transaction
        with connection.wrap_database_errors:
            raw.execute("SET plan_cache_mode = force_generic_plan")
        _GENERIC.add(raw)
    with connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        yield _BoundCursor(cursor)


def in_state(state: str) -> Case:
    """``state = X`` as a condition no index matches: a statement that names its rows by key
    then finds them by the primary key alone, never through an index of states (see the
    claim's statement in ``transitions.py``), whatever the planner's statistics say."""
    return Case(
        When(state=state, then=Value(True)), default=Value(False), output_field=BooleanField()
    )


def lend_connection_back() -> None:
    """With a connection pool, give this thread's connection back while it waits on the
    network; the next statement borrows one again (any transaction must be over)."""
    if connection.settings_dict.get("OPTIONS", {}).get("pool"):
        connection.close()


def with_retries(commit: Callable[[], _T], attempts: int = 3) -> _T | None:
    """Run a transaction again if the database aborted it as a deadlock or a lock timeout."""
    for attempt in range(1, attempts + 1):
        try:
            return commit()
        except OperationalError as exc:
            transient = getattr(exc.__cause__, "sqlstate", None) in _TRANSIENT_SQLSTATES or (
                "database is locked" in str(exc)
            )
            if not transient or attempt == attempts:
                raise
            time.sleep(random.uniform(0.01, 0.1) * attempt)  # noqa: S311 (jitter)
    return None


@functools.cache
def _typed(fields: tuple[Field, ...]) -> dict[int, Field]:
    return {i: f for i, f in enumerate(fields) if isinstance(f, DateTimeField | JSONField)}


def prepared(fields: Sequence[Field], row: Sequence) -> list:
    """``row``'s values for ``fields`` as the ORM sends them to this database: times and JSON
    prepared, the others (each of its column's type) as they are."""
    return _prepare(_typed(tuple(fields)), row, None)


def _prepare(typed: dict[int, Field], row: Sequence, times: dict | None) -> list:
    """``prepared``, with its fields' ``_typed`` found once for many rows; ``times``: the
    times prepared so far for rows that share them (each prepared once)."""
    values = list(row)
    for i, field in typed.items():
        value = values[i]
        if times is not None and isinstance(value, datetime):
            if value not in times:
                times[value] = field.get_db_prep_save(value, connection)
            values[i] = times[value]
        else:
            values[i] = field.get_db_prep_save(value, connection)
    return values


# Parameters a statement may take on every SQLite build (its default limit before 3.32).
_MAX_PARAMS = 999


@functools.cache
def _insert(model: type[Model], names: tuple[str, ...], skip_existing: bool) -> tuple[str, ...]:
    fields = tuple(model._meta.get_field(name) for name in names)
    head = "INSERT INTO {} ({}) VALUES ".format(  # noqa: S608 (the model's names)
        model._meta.db_table, ", ".join(f.column for f in fields)
    )
    row = "({})".format(", ".join(["%s"] * len(fields)))
    return head, row, " ON CONFLICT DO NOTHING" if skip_existing else "", fields


def insert_rows(
    model: type[Model], names: Sequence[str], rows: Sequence[Sequence], skip_existing: bool = False
) -> int:
    """Insert ``rows`` (values in the order of the fields ``names``) into ``model``'s table with
    no model instance, the values ``prepared``, in statements of many rows each (as the ORM's
    ``bulk_create``: psycopg runs an ``executemany`` in pipeline mode, and a row the database
    refuses there leaves the connection unusable). ``skip_existing``: a row that meets a
    unique key already there is left out. How many rows were inserted."""
    head, one, tail, fields = _insert(model, tuple(names), skip_existing)
    typed, per = _typed(fields), max(1, _MAX_PARAMS // len(fields))
    times: dict = {}  # a time most rows share is prepared once
    inserted = 0
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per):
            batch = rows[start : start + per]
            cursor.execute(head + ", ".join([one] * len(batch)) + tail,
                           [v for row in batch for v in _prepare(typed, row, times)])  # fmt: skip
            inserted += cursor.rowcount
    return inserted
