"""``python manage.py get job NAME|ID [-o yaml|json]`` writes a job out as its spec (which
``apply -f`` takes back unchanged); ``get schema`` writes the spec's JSON Schema."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from web import specs
from web.models import CrawlJob


class Command(BaseCommand):
    help = "Write a job as a spec (YAML or JSON), or the spec's JSON Schema."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("what", choices=["job", "schema"])
        parser.add_argument("name", nargs="?", help="the job's name (or id)")
        parser.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")

    def handle(self, *args, **opts) -> None:
        if opts["what"] == "schema":
            self.stdout.write(json.dumps(specs.schema(), indent=2))
            return
        name = opts["name"]
        if not name:
            raise CommandError("give the job's name (or id)")
        found = list(CrawlJob.objects.filter(name=name)[:2])
        if not found and name.isdigit():
            found = list(CrawlJob.objects.filter(pk=int(name)))
        if not found:
            raise CommandError(f"no job named {name!r}")
        if len(found) > 1:
            raise CommandError(f"several jobs are named {name!r}: give the id")
        document = specs.dump(found[0])
        if opts["output"] == "json":
            self.stdout.write(json.dumps(document, indent=2, ensure_ascii=False))
        else:
            self.stdout.write(specs.to_yaml(document), ending="")
