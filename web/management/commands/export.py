"""``python manage.py export JOB -o FILE|-|FORMAT [--format jsonl|csv|warc] [--items]``: a
job's results, at any time (running, finished, or after a crash), streamed with constant
memory. ``--items``: a spider job's items instead (jsonl or csv).

``-o -`` writes to standard output (with ``--format``), as does ``-o jsonl`` (a format name);
a name ending in ``.gz`` is compressed. Without ``--format`` the file name says it (``.jsonl``,
``.csv``, ``.warc``). On a terminal a progress line counts the rows.
"""

from __future__ import annotations

import sys
import time

from django.core.management.base import CommandError, CommandParser

from web import export
from web.management import crawling
from web.management.base import PlatformCommand


class Command(PlatformCommand):
    help = "Export a job's results as JSON Lines, CSV or WARC 1.1."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", metavar="JOB", help="the job's name or id")
        parser.add_argument("--format", choices=export.FORMATS, default=None,
                            help=crawling.FORMAT_HELP)  # fmt: skip
        parser.add_argument("-o", "--output", required=True, metavar="FILE|-|FORMAT",
                            help=crawling.OUTPUT_HELP)  # fmt: skip
        parser.add_argument("--items", action="store_true",
                            help="the items a spider job yielded (jsonl or csv)")  # fmt: skip

    def handle(self, *args, **opts) -> None:
        job = crawling.job_named(opts["job"])
        if opts["output"] == "-" and opts["format"] is None:
            raise CommandError("--output -: give --format jsonl, csv or warc (or -o jsonl)")
        fmt, target = crawling.output_target(opts["output"], opts["format"])
        if opts["items"] and fmt == "warc":
            raise CommandError("--items are exported as jsonl or csv")
        total = export.count_items(job.pk) if opts["items"] else export.count(job.pk)
        tty = sys.stderr.isatty()
        shown = [0.0]

        def progress(running: export.Export) -> None:
            now = time.monotonic()
            if tty and now - shown[0] >= 0.5:
                shown[0] = now
                self.stderr.write(f"\rexported {running.rows}/{total} rows", ending="")

        try:
            done = export.save(job, fmt, target, progress, items=opts["items"])
        except OSError as exc:
            raise CommandError(f"cannot write {target}: {exc}") from None
        if tty:
            self.stderr.write("")
        what = f"{done.rows} {'items' if opts['items'] else 'rows'}"
        what += f", {done.records} pages" if fmt == "warc" else ""
        where = "standard output" if target == "-" else target
        self.stderr.write(f"job {job.pk} ({job.state}): {what} written to {where}")
