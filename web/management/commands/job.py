"""``python manage.py job pause|resume|cancel|recrawl|status|delete JOB_ID``: control a job
from the shell.

Each action is safe to repeat and safe while workers come and go; it says what it did.
``delete`` removes the job, its rows (in batches) and its stored bodies.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tasks.frontier import jobs
from web.models import CrawlJob

ACTIONS = {"pause": jobs.pause, "resume": jobs.resume, "cancel": jobs.cancel,
           "recrawl": jobs.recrawl}  # fmt: skip


class Command(BaseCommand):
    help = "Pause, resume, cancel, recrawl, show or delete a crawl job."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=[*ACTIONS, "status", "delete"])
        parser.add_argument("job_id", type=int)

    def handle(self, *args, **opts) -> None:
        job = CrawlJob.objects.filter(pk=opts["job_id"]).first()
        if job is None:
            raise CommandError(f"no job {opts['job_id']}")
        action = opts["action"]
        if action == "delete":
            removed = jobs.delete(job.pk)
            self.stdout.write(f"job {job.pk} ({job.name}) deleted, with {removed} stored bodies")
            return
        if action != "status":
            before = job.state
            if ACTIONS[action](job):
                self.stdout.write(f"job {job.pk}: {before} -> {job.state}")
            else:
                self.stdout.write(f"job {job.pk} is {job.state}: nothing to {action}")
        counts = jobs.counts(job.pk)
        self.stdout.write(f"job {job.pk} ({job.name}): {job.state}")
        self.stdout.write("  urls: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        latest = job.checkpoints.order_by("-version").first()
        if latest is not None:
            when = latest.created_at.strftime("%Y-%m-%d %H:%M:%S")
            self.stdout.write(
                f"  checkpoint v{latest.version} ({latest.reason}, {when}): "
                f"{json.dumps(latest.frontier)}"
            )
