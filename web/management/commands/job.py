"""``python manage.py job pause|resume|cancel|recrawl|status|delete JOB``: control a job
from the shell (``JOB``: its name or id).

Each action is safe to repeat and safe while workers come and go; it says what it did.
``status`` shows a spider job's stats too (its ``crawler.stats``: Scrapy's built-in stats and
those its code set, over every worker), in text or as JSON (``-o json``).
``delete`` removes the job, its rows (in batches) and its stored bodies, once confirmed (or
with ``--yes``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.management.base import CommandParser

from tasks.frontier import jobs
from tasks.frontier.stats import stats_of
from web.management import crawling
from web.management.base import PlatformCommand

ACTIONS = {"pause": jobs.pause, "resume": jobs.resume, "cancel": jobs.cancel,
           "recrawl": jobs.recrawl}  # fmt: skip


class Command(PlatformCommand):
    help = "Pause, resume, cancel, recrawl, show or delete a crawl job."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=[*ACTIONS, "status", "delete"])
        parser.add_argument("job", metavar="JOB", help="the job's name or id")
        parser.add_argument("-o", "--output", choices=["text", "json"], default="text",
                            help="with status: text (default) or json")  # fmt: skip
        parser.add_argument("--yes", "-y", action="store_true",
                            help="delete without asking (default: ask on a terminal)")  # fmt: skip

    def handle(self, *args, **opts) -> None:
        job = crawling.job_named(opts["job"])
        action = opts["action"]
        if action == "delete":
            what = f"job {job.pk} ({job.name}) with its {sum(jobs.counts(job.pk).values())} URLs"
            crawling.confirm(f"delete {what}, its pages and stored bodies", opts["yes"])
            removed = jobs.delete(job.pk)
            self.stdout.write(
                f"job {job.pk} ({job.name}) deleted, with {removed} files of stored bodies"
            )
            return
        if action != "status":
            before = job.state
            if ACTIONS[action](job):
                self.stdout.write(f"job {job.pk}: {before} -> {job.state}")
            else:
                self.stdout.write(f"job {job.pk} is {job.state}: nothing to {action}")
        counts = jobs.counts(job.pk)
        latest = job.checkpoints.order_by("-version").first()
        stats = stats_of(job) if job.spider else {}
        if opts["output"] == "json":
            self.stdout.write(json.dumps({
                "id": job.pk, "name": job.name, "state": job.state, "urls": counts,
                "waiting": jobs.ban_waits(job.pk),
                "checkpoint": None if latest is None else {
                    "version": latest.version, "reason": latest.reason,
                    "created": latest.created_at.isoformat(), "frontier": latest.frontier,
                },
                "stats": stats,
            }, indent=2, default=_iso))  # fmt: skip
            return
        self.stdout.write(f"job {job.pk} ({job.name}): {job.state}")
        self.stdout.write("  urls: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        for wait in jobs.ban_waits(job.pk):
            self.stdout.write(f"  {wait}")
        if latest is not None:
            when = latest.created_at.strftime("%Y-%m-%d %H:%M:%S")
            self.stdout.write(
                f"  checkpoint v{latest.version} ({latest.reason}, {when}): "
                f"{json.dumps(latest.frontier)}"
            )
        if stats:
            self.stdout.write("  stats:")
            for name, value in stats.items():
                self.stdout.write(f"    {name}: {_iso(value)}")


def _iso(value: Any) -> Any:
    """A stat's value as JSON and text show it: a date as its ISO text."""
    return value.isoformat() if isinstance(value, datetime) else value
