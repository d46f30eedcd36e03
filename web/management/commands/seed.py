"""``python manage.py seed JOB FILE``: add a file of URLs to a job's frontier (``JOB``: its
name or id).

One URL per line ('-' reads standard input, ``.gz`` is decompressed). Streams in chunks, so a
file of millions of URLs seeds in bounded memory; each chunk commits on its own, and running
the command again adds only what is missing. A draft job is started unless ``--no-start``.
"""

from __future__ import annotations

import sys
import time

from django.core.management.base import CommandError, CommandParser

from tasks.frontier import jobs, seeding
from web.management import crawling
from web.management.base import PlatformCommand
from web.models import TERMINAL_STATES, JobState


class Command(PlatformCommand):
    help = "Add the URLs of FILE (one per line; '-' for stdin) to job JOB's frontier."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", metavar="JOB", help="the job's name or id")
        parser.add_argument("file", metavar="FILE")
        parser.add_argument(
            "--no-start", action="store_true", help="leave a draft job in draft after seeding"
        )
        parser.add_argument(
            "--processes", type=int, default=None, help="canonicalizer processes (default: cores)"
        )

    def handle(self, *args, **opts) -> None:
        job = crawling.job_named(opts["job"])
        if job.state in TERMINAL_STATES:
            raise CommandError(f"job {job.pk} is {job.state}: seeds would never be fetched")
        try:
            stream = seeding.open_seed_file(opts["file"])
        except OSError as exc:
            raise CommandError(f"cannot read {opts['file']}: {exc.strerror or exc}") from None
        started = time.monotonic()
        tty = sys.stderr.isatty()

        def progress(report: seeding.SeedReport) -> None:
            rate = report.read / max(time.monotonic() - started, 1e-6)
            line = f"seed: {report.read:,} read, {report.added:,} added ({rate:,.0f} lines/s)"
            self.stderr.write(("\r" + line) if tty else line, ending="" if tty else "\n")

        with stream:
            report = seeding.seed(job, stream, progress, processes=opts["processes"])
        elapsed = time.monotonic() - started
        if tty:
            self.stderr.write("")
        job.refresh_from_db()
        if job.state == JobState.DRAFT and not opts["no_start"]:
            jobs.start(job)
        rejected = ", ".join(f"{k} {v:,}" for k, v in sorted(report.rejected.items()))
        self.stdout.write(
            f"job {job.pk}: {report.added:,} URLs added, {report.duplicates:,} already present, "
            f"{sum(report.rejected.values()):,} rejected{' (' + rejected + ')' if rejected else ''}"
            f" from {report.read:,} lines in {elapsed:.1f} s; job is {job.state}"
        )
