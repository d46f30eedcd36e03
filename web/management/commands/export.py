"""``python manage.py export JOB -o FILE|-|FORMAT [--format F] [--items] [--feeds]``: a job's
results, at any time (running, finished, or after a crash), streamed with constant memory.

``-o -`` writes to standard output (with ``--format``), as does ``-o jsonl`` (a format name);
a name ending in ``.gz`` is compressed. Without ``--format`` the file name says it (``.jsonl``,
``.csv``, ``.warc``). On a terminal a progress line counts the rows.

``--items``: a spider job's items (every run's) as Scrapy's ``-O`` writes them, its bytes, with
the spider's feed settings (``FEED_EXPORT_ENCODING``, ``FEED_EXPORT_FIELDS``,
``FEED_EXPORT_INDENT``): jsonl, json, csv or xml, to a file, an ``s3://BUCKET/KEY`` URI (its
``%(name)s`` and ``%(time)s`` filled as a feed's) or standard output. ``--feeds``: the job's
``FEEDS`` written again from its last run's items, as when the run finished (after a feed
could not be written, or for a run that was cancelled).
"""

from __future__ import annotations

import sys
import time

from django.core.management.base import CommandError, CommandParser

from tasks.content import feeds
from web import export
from web.management import crawling
from web.management.base import PlatformCommand
from web.models import CrawlJob


class Command(PlatformCommand):
    help = ("Export a job's results as JSON Lines, CSV or WARC 1.1, a spider job's items as "
            "Scrapy's feeds write them, or write its FEEDS again.")  # fmt: skip

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", metavar="JOB", help="the job's name or id")
        parser.add_argument("--format", choices=crawling.ALL_FORMATS, default=None,
                            help=crawling.FORMAT_HELP)  # fmt: skip
        parser.add_argument("-o", "--output", metavar="FILE|URI|-|FORMAT",
                            help=crawling.OUTPUT_HELP)  # fmt: skip
        parser.add_argument("--items", action="store_true",
                            help="the items a spider job yielded, as Scrapy's -O writes them "
                            "(jsonl, json, csv or xml)")  # fmt: skip
        parser.add_argument("--feeds", action="store_true",
                            help="write the spider job's FEEDS again, from its last run's "
                            "items")  # fmt: skip

    def handle(self, *args, **opts) -> None:
        job = crawling.job_named(opts["job"])
        if opts["feeds"]:
            self._feeds(job, opts)
            return
        if opts["output"] is None:
            raise CommandError("give --output FILE|URI|-|FORMAT (or --feeds)")
        if opts["output"] == "-" and opts["format"] is None:
            raise CommandError("--output -: give --format (or -o jsonl)")
        fmt, target = crawling.output_target(opts["output"], opts["format"], opts["items"])
        if opts["items"]:
            try:
                written = export.save_items(job, fmt, target)
            except (feeds.FeedProblem, OSError) as exc:
                raise CommandError(f"cannot write {target}: {exc}") from None
            where = "standard output" if target == "-" else target
            self.stderr.write(f"job {job.pk} ({job.state}): {written} items written to {where}")
            return
        total = export.count(job.pk)
        tty = sys.stderr.isatty()
        shown = [0.0]

        def progress(running: export.Export) -> None:
            now = time.monotonic()
            if tty and now - shown[0] >= 0.5:
                shown[0] = now
                self.stderr.write(f"\rexported {running.rows}/{total} rows", ending="")

        try:
            done = export.save(job, fmt, target, progress)
        except OSError as exc:
            raise CommandError(f"cannot write {target}: {exc}") from None
        if tty:
            self.stderr.write("")
        what = f"{done.rows} rows" + (f", {done.records} pages" if fmt == "warc" else "")
        where = "standard output" if target == "-" else target
        self.stderr.write(f"job {job.pk} ({job.state}): {what} written to {where}")

    def _feeds(self, job: CrawlJob, opts: dict) -> None:
        if opts["output"] or opts["items"]:
            raise CommandError("--feeds writes the job's FEEDS: no --output or --items with it")
        if not job.spider:
            raise CommandError(f"job {job.pk} is no spider job: it has no feeds")
        written = export.save_feeds(job)
        for feed in written:
            self.stdout.write(crawling.feed_line(feed))
        if not written:
            self.stdout.write(f"job {job.pk}: no feed file written (no FEEDS, or no items and "
                              "store_empty off)")  # fmt: skip
        if any("error" in feed for feed in written):
            raise CommandError("some feeds could not be written")
