"""Bulk seeding: stream a file of URLs into a job's frontier, durable and schedulable.

Reads ``SEED_CHUNK`` and ``MAX_URL_LENGTH``. A seed file holds one URL per line (blank lines
and lines starting with ``#`` are ignored; ``.gz`` files are read compressed). Lines are read
in chunks, so memory stays bounded whatever the file's size; each chunk is canonicalized in
worker processes (w3lib's canonicalizer is pure Python: both cores help), then inserted at
depth 0 with ``ON CONFLICT DO NOTHING``, so seeding twice, or a file that repeats itself,
adds each URL once. On PostgreSQL a chunk goes in by ``COPY`` into a temporary table and one
``INSERT ... SELECT``; elsewhere by batched inserts. Each chunk commits on its own: an
interrupted seeding keeps what it committed, and running it again adds only the rest.

Seeds are not held to the job's domains (they are the start of the crawl, like the seeds given
at creation); the job's exclude patterns and the URL length limit do apply.
"""

from __future__ import annotations

import gzip
import itertools
import multiprocessing
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from django.db import connection, transaction
from django.utils import timezone

from tasks.defaults import setting
from tasks.frontier import transitions
from tasks.rules import patterns
from tasks.rules.urls import canonicalize, host_of
from web.models import CrawlJob, FrontierURL, URLState

_Chunk = list[tuple[str, str]]  # (canonical URL, host)


@dataclass
class SeedReport:
    read: int = 0  # lines with a URL on them
    added: int = 0  # new frontier rows
    duplicates: int = 0  # already in the job's frontier, or repeated in the file
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> count

    def reject(self, reason: str, n: int = 1) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + n


_exclude = patterns.Patterns(())
_max_length = 0


def _init_worker(exclude: list[str], max_length: int) -> None:
    global _exclude, _max_length
    _exclude = patterns.compiled(tuple(exclude))
    _max_length = max_length


def _canonicalize_chunk(lines: list[str]) -> tuple[_Chunk, dict[str, int]]:
    """Canonical (URL, host) pairs of one chunk, and how many lines were turned away, by why."""
    out: _Chunk = []
    rejected: dict[str, int] = {}
    for line in lines:
        url = canonicalize(line)
        if url is None:
            why = "not_http_url"
        elif len(url) > _max_length:
            why = "too_long"
        elif _exclude.any(url):
            why = "excluded"
        else:
            out.append((url, host_of(url)))
            continue
        rejected[why] = rejected.get(why, 0) + 1
    return out, rejected


def seed_lines(stream: IO[str]) -> Iterator[str]:
    """The URLs of a seed file: its lines, stripped, but blank ones and # comments."""
    for raw in stream:
        line = raw.strip()
        if line and not line.startswith("#"):
            yield line


def _chunks(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    while chunk := list(itertools.islice(lines, size)):
        yield chunk


def open_seed_file(path: str) -> IO[str]:
    """A text stream over ``path`` ('-' is standard input; ``.gz`` is decompressed)."""
    if path == "-":  # closing it leaves descriptor 0 open (a socket must not take it)
        return open(sys.stdin.fileno(), encoding="utf-8", errors="replace", closefd=False)
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return Path(path).open(encoding="utf-8", errors="replace")


def _copy_insert(job_id: int, rows: _Chunk) -> int:
    """PostgreSQL: COPY the chunk into a temporary table, then one INSERT ... SELECT."""
    table = FrontierURL._meta.db_table
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMPORARY TABLE IF NOT EXISTS seed_chunk (url text, host text) ON COMMIT DROP"
        )
        with cursor.cursor.copy("COPY seed_chunk (url, host) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute(
            f"""
            INSERT INTO {table} (job_id, url, host, depth, state, attempts, not_before,
                                 error_reason, error_message, updated_at)
            SELECT %s, url, host, 0, %s, 0, %s, '', '', %s FROM seed_chunk
            ON CONFLICT DO NOTHING
            """,  # noqa: S608 (the table name is the model's; values are bound)
            [job_id, URLState.QUEUED, now, now],
        )
        return cursor.rowcount


def _orm_insert(job_id: int, rows: _Chunk) -> int:
    before = FrontierURL.objects.filter(job_id=job_id).count()
    with transaction.atomic():
        transitions.insert_urls(job_id, [url for url, _ in rows], depth=0)
    return FrontierURL.objects.filter(job_id=job_id).count() - before


def seed(
    job: CrawlJob,
    stream: IO[str],
    progress: Callable[[SeedReport], None] | None = None,
    processes: int | None = None,
) -> SeedReport:
    """Add every URL of ``stream`` to ``job``'s frontier at depth 0; returns the tally.

    At most two chunks per process are read ahead of the database, so memory is bounded by
    ``SEED_CHUNK`` (and at most eight processes) whatever the file's size. ``progress`` is
    called after each chunk commits.
    """
    size = setting("SEED_CHUNK", job)
    insert = _copy_insert if connection.vendor == "postgresql" else _orm_insert
    init_args = (list(job.exclude_patterns), setting("MAX_URL_LENGTH", job))
    # Cores this process may use (a container's cpuset), and no more than eight: each holds
    # two chunks, and the database, not canonicalizing, bounds the rate beyond that.
    processes = processes or min(8, len(os.sched_getaffinity(0)))
    report = SeedReport()
    chunks = _chunks(seed_lines(stream), size)
    connection.close()  # the forked canonicalizers must not share this process's connection
    with multiprocessing.get_context("fork").Pool(processes, _init_worker, init_args) as pool:
        pending: deque = deque()
        while True:
            while len(pending) < 2 * processes:
                lines = next(chunks, None)
                if lines is None:
                    break
                report.read += len(lines)
                pending.append(pool.apply_async(_canonicalize_chunk, (lines,)))
            if not pending:
                break
            rows, rejected = pending.popleft().get()
            for reason, n in rejected.items():
                report.reject(reason, n)
            added = insert(job.pk, rows) if rows else 0
            report.added += added
            report.duplicates += len(rows) - added
            if progress is not None:
                progress(report)
    return report
