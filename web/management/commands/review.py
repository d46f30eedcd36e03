"""``python manage.py review list|requeue|drop [--job JOB] [--host HOST] [--all]``: the review
queue.

``list`` shows parked URLs with their host, reason, ladder level and last status; ``requeue``
puts them back for new attempts (after a person solved the challenge; ``--cookies "a=1; b=2"``
first puts a browser's cookies into the host's jar), ``drop`` fails them with their reason.
``requeue`` and ``drop`` act on what ``--job`` and ``--host`` select; every parked URL of every
job only with ``--all``.
"""

from __future__ import annotations

import json

from django.core.management.base import CommandError, CommandParser

from tasks.frontier import review
from web.management import crawling
from web.management.base import PlatformCommand


class Command(PlatformCommand):
    help = "List, requeue or drop URLs parked for review."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["list", "requeue", "drop"])
        parser.add_argument("--job", default=None, metavar="JOB",
                            help="only this job's URLs (its name or id)")  # fmt: skip
        parser.add_argument("--host", default=None, metavar="HOST[:PORT]",
                            help="only this host's URLs")  # fmt: skip
        parser.add_argument("-o", "--output", choices=["text", "json"], default="text",
                            help="with list: text (default) or json")  # fmt: skip
        parser.add_argument("--all", action="store_true",
                            help="requeue or drop every parked URL of every job")  # fmt: skip
        parser.add_argument(
            "--cookies",
            default=None,
            metavar='"NAME=VALUE; ..."',
            help="with requeue: cookies for the host's jar (needs --job, --host)",
        )

    def handle(self, *args, **opts) -> None:
        job = crawling.job_named(opts["job"]) if opts["job"] is not None else None
        rows = review.parked(job.pk if job else None, opts["host"])
        action = opts["action"]
        if action != "list" and job is None and not opts["host"] and not opts["all"]:
            raise CommandError(f"{action} what? Give --job, --host, or --all for every parked URL")
        if action == "list" and opts["output"] == "json":
            self.stdout.write(json.dumps([
                {"url_id": item.url_id, "job": item.job_id, "host": item.host,
                 "level": item.level, "status": item.status, "reason": item.reason,
                 "url": item.url.url}
                for item in review.items(rows).order_by("url_id")[:1000]
            ], indent=2))  # fmt: skip
            return
        if action == "list":
            for item in review.items(rows).order_by("url_id")[:1000]:
                self.stdout.write(
                    f"{item.url_id}\tjob {item.job_id}\t{item.host}\tlevel {item.level}\t"
                    f"{item.status or '-'}\t{item.reason}\t{item.url.url}"
                )
            self.stdout.write(f"{rows.count()} URLs need review")
            return
        if action == "requeue" and opts["cookies"]:
            if job is None or not opts["host"]:
                raise CommandError("--cookies needs --job and --host")
            version = review.put_cookies(job, opts["host"], opts["cookies"])
            self.stdout.write(f"cookies put into {opts['host']}'s jar (version {version})")
        n = review.requeue(rows) if action == "requeue" else review.drop(rows)
        self.stdout.write(f"{n} URLs {'requeued' if action == 'requeue' else 'dropped'}")
