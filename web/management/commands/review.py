"""``python manage.py review list|requeue|drop [--job ID] [--host HOST]``: the review queue.

``list`` shows parked URLs with their host, reason, ladder level and last status; ``requeue``
puts them back for new attempts (after a person solved the challenge; ``--cookies "a=1; b=2"``
first puts a browser's cookies into the host's jar), ``drop`` fails them with their reason.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tasks.frontier import review
from web.models import CrawlJob


class Command(BaseCommand):
    help = "List, requeue or drop URLs parked for review."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["list", "requeue", "drop"])
        parser.add_argument("--job", type=int, default=None, metavar="ID")
        parser.add_argument("--host", default=None, metavar="HOST[:PORT]")
        parser.add_argument(
            "--cookies",
            default=None,
            metavar='"NAME=VALUE; ..."',
            help="with requeue: cookies for the host's jar (needs --job, --host)",
        )

    def handle(self, *args, **opts) -> None:
        rows = review.parked(opts["job"], opts["host"])
        action = opts["action"]
        if action == "list":
            for item in review.items(rows).order_by("url_id")[:1000]:
                self.stdout.write(
                    f"{item.url_id}\tjob {item.job_id}\t{item.host}\tlevel {item.level}\t"
                    f"{item.status or '-'}\t{item.reason}\t{item.url.url}"
                )
            self.stdout.write(f"{rows.count()} URLs need review")
            return
        if action == "requeue" and opts["cookies"]:
            if opts["job"] is None or not opts["host"]:
                raise CommandError("--cookies needs --job and --host")
            job = CrawlJob.objects.get(pk=opts["job"])
            version = review.put_cookies(job, opts["host"], opts["cookies"])
            self.stdout.write(f"cookies put into {opts['host']}'s jar (version {version})")
        n = review.requeue(rows) if action == "requeue" else review.drop(rows)
        self.stdout.write(f"{n} URLs {'requeued' if action == 'requeue' else 'dropped'}")
