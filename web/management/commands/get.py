"""``python manage.py get jobs|job|urls|pages|schema``, as kubectl reads a cluster:

- ``get jobs [-o wide|json|yaml] [--state S] [--owner U]``: every job, newest first, with its
  id, name, state, progress (URLs ended of all known), pages per second, age and owner;
- ``get job NAME|ID [-o yaml|json]``: a job as its spec (which ``apply -f`` takes back
  unchanged);
- ``get urls JOB [--state S] [--reason R] [-o json]``, ``get pages JOB [-o json]``: a quick
  look at a job's frontier and pages (the first 1000; ``export`` has every row);
- ``get schema``: the spec's JSON Schema.
"""

from __future__ import annotations

import json

import yaml
from django.core.management.base import CommandError, CommandParser
from django.db.models import Count, Q
from django.utils import timezone

from web import specs
from web.management import crawling
from web.management.base import PlatformCommand
from web.models import CrawlJob, JobState, URLState

ENDED = [URLState.DONE, URLState.FAILED, URLState.SKIPPED]
FORMATS = {"jobs": ["table", "wide", "json", "yaml"], "job": ["yaml", "json"],
           "urls": ["table", "json"], "pages": ["table", "json"], "schema": ["json"]}  # fmt: skip
URL_FIELDS = ["id", "url", "state", "depth", "attempts", "error_reason", "error_message"]
PAGE_FIELDS = ["url__url", "status", "title", "content_type", "fetched_at"]
LIMIT = 1000  # rows ``get urls`` and ``get pages`` show at most (exports have every row)


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def job_rows(state: str | None = None, owner: str | None = None) -> list[dict]:
    """Each job as ``get jobs`` shows it, newest first."""
    found = CrawlJob.objects.select_related("owner").order_by("-id")
    if state:
        found = found.filter(state=state)
    if owner:
        found = found.filter(owner__username=owner)
    found = found.annotate(
        known=Count("urls"), ended=Count("urls", filter=Q(urls__state__in=ENDED)),
        done=Count("urls", filter=Q(urls__state=URLState.DONE)),
    )  # fmt: skip
    now = timezone.now()
    rows = []
    for job in found:
        ran = ((job.finished_at or now) - job.started_at).total_seconds() if job.started_at else 0
        rows.append({
            "id": job.pk, "name": job.name, "state": job.state,
            "progress": f"{job.ended}/{job.known}", "done": job.done, "urls": job.known,
            "pages_per_s": round(job.done / ran, 2) if ran > 0 else 0.0,
            "age": _age((now - job.created_at).total_seconds()),
            "owner": job.owner.username if job.owner else "",
            "created": job.created_at.isoformat(), "seeds": len(job.seeds or []),
            "render": job.render, "channel": job.channel, "priority": job.priority,
        })  # fmt: skip
    return rows


class Command(PlatformCommand):
    help = "List jobs, write one job as a spec (YAML or JSON), or the spec's JSON Schema."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("what", choices=list(FORMATS))
        parser.add_argument("name", nargs="?", help="job, urls, pages: the job's name or id")
        parser.add_argument("-o", "--output", default=None, metavar="FORMAT",
                            help="jobs: table (default), wide, json or yaml; job: yaml (default) "
                            "or json")  # fmt: skip
        parser.add_argument("--state", default=None,
                            help="jobs: only jobs in this state; urls: URLs in it")  # fmt: skip
        parser.add_argument("--reason", default=None,
                            help="with urls: only URLs that ended for this reason")  # fmt: skip
        parser.add_argument("--owner", default=None, metavar="USER",
                            help="with jobs: only this user's jobs")  # fmt: skip

    def handle(self, *args, **opts) -> None:
        what = opts["what"]
        fmt = opts["output"] or FORMATS[what][0]
        if fmt not in FORMATS[what]:
            raise CommandError(f"get {what} -o: {fmt!r} is not one of {', '.join(FORMATS[what])}")
        if what == "schema":
            self.stdout.write(json.dumps(specs.schema(), indent=2))
        elif what == "jobs":
            if opts["state"] and opts["state"] not in JobState.values:
                raise CommandError(f"--state: one of {', '.join(JobState.values)}")
            self._jobs(job_rows(opts["state"], opts["owner"]), fmt)
        elif not opts["name"]:
            raise CommandError(f"get {what}: give the job's name or id")
        elif what in ("urls", "pages"):
            self._rows(what, crawling.job_named(opts["name"]), opts, fmt)
        else:
            document = specs.dump(crawling.job_named(opts["name"]))
            if fmt == "json":
                self.stdout.write(json.dumps(document, indent=2, ensure_ascii=False))
            else:
                self.stdout.write(specs.to_yaml(document), ending="")

    def _rows(self, what: str, job: CrawlJob, opts: dict, fmt: str) -> None:
        if what == "urls":
            found, fields = job.urls.order_by("id"), URL_FIELDS
            if opts["state"]:
                found = found.filter(state=opts["state"])
            if opts["reason"]:
                found = found.filter(error_reason=opts["reason"])
        else:
            found, fields = job.pages.order_by("id"), PAGE_FIELDS
        rows = [
            {f.replace("url__", ""): v for f, v in zip(fields, values, strict=True)}
            for values in found.values_list(*fields)[:LIMIT]
        ]
        if fmt == "json":
            self.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False, default=str))
            return
        columns = [c for c in (f.replace("url__", "") for f in fields) if c != "error_message"]
        self._table(columns, [[str(row[c] if row[c] is not None else "-") for c in columns]
                              for row in rows])  # fmt: skip
        if len(rows) == LIMIT:
            self.stderr.write(f"(the first {LIMIT}; `manage.py export {job.pk}` has every row)")

    def _table(self, columns: list[str], rows: list[list[str]]) -> None:
        table = [[c.upper().replace("_PER_", "/") for c in columns], *rows]
        widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
        for line in table:
            self.stdout.write("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)))

    def _jobs(self, rows: list[dict], fmt: str) -> None:
        if fmt == "json":
            self.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False))
            return
        if fmt == "yaml":
            self.stdout.write(yaml.safe_dump(rows, sort_keys=False, allow_unicode=True), ending="")
            return
        columns = ["id", "name", "state", "progress", "pages_per_s", "age", "owner"]
        if fmt == "wide":
            columns += ["seeds", "render", "channel", "priority", "created"]
        self._table(columns, [[str(row[c]) for c in columns] for row in rows])
