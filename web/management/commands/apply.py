"""``python manage.py apply -f job.yaml [--start]``: create or update a job from its spec.

The spec (YAML or JSON; ``-`` reads standard input) names the job in ``metadata.name``: a job
of that name is updated, otherwise one is created (a draft; ``--start`` starts it). Fields the
spec leaves out take their defaults, so the spec is the whole job. Applying the same spec
again changes nothing. Errors name the spec's path and line. ``web/specs.py`` has the format,
``docs/job-spec.schema.json`` its JSON Schema. ``--owner USERNAME`` gives the job to a user.
"""

from __future__ import annotations

import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser

from tasks.frontier import jobs
from web import specs
from web.management.base import PlatformCommand
from web.models import JobState


class Command(PlatformCommand):
    help = "Create or update a crawl job from a YAML or JSON spec."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-f", "--filename", required=True,
                            metavar="FILE", help="the spec (- for standard input)")  # fmt: skip
        parser.add_argument("--start", action="store_true", help="start the job if it is a draft")
        parser.add_argument("--owner", metavar="USERNAME", help="whose job it is")

    def handle(self, *args, **opts) -> None:
        source = opts["filename"]
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {source}: {exc.strerror}") from None
        owner = None
        if opts["owner"]:
            owner = get_user_model().objects.filter(username=opts["owner"]).first()
            if owner is None:
                raise CommandError(f"no user {opts['owner']!r} (manage.py createsuperuser?)")
        try:
            applied = specs.apply(text, source, owner)
        except specs.SpecError as exc:
            raise CommandError("\n".join(exc.problems)) from None
        job = applied.job
        what = f" ({', '.join(applied.changed)})" if applied.changed else ""
        self.stdout.write(f"job {job.pk} {job.name!r} {applied.action}{what}")
        if opts["start"] and job.state == JobState.DRAFT and jobs.start(job):
            self.stdout.write(f"job {job.pk} started")
