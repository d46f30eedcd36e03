"""What ``manage.py crawl`` (web/management/commands/crawl.py) does besides its flow: job
fields from its options, the database brought to the migrations on disk (a new embedded one
made at once), database calls that wait out an outage, the live progress line and the
summary. Reads ``CRAWL_ALLOWED_NETWORKS`` from the environment (added to ``--allow-network``).

What the command tells the person who runs it (the job started, its workers, the progress,
the summary) is written as it is in text logs (``LOG_FORMAT=text``, the default), and is a
log line with its figures as fields in JSON (``Say``, ``web/management/base.py``): then every
line the command writes on standard error is a JSON object, and standard output holds
nothing but the results of ``--output -``.
"""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import sys
import threading
import time
import zlib
from collections.abc import Callable
from typing import TypeVar

from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.core.management.sql import emit_post_migrate_signal, emit_pre_migrate_signal
from django.db import DatabaseError, connection, transaction
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

from tasks.content import feeds
from tasks.defaults import setting
from tasks.frontier import jobs, seeding
from tasks.outage import Outage
from tasks.rules import selectors
from tasks.worker.supervisor import WorkerPool
from web import export
from web.management.base import Say
from web.models import TERMINAL_STATES, CrawlJob, JobState

log = logging.getLogger(__name__)
T = TypeVar("T")
# The job fields as the command line names them, for error messages.
OPTION_OF = {
    "seeds": "SEED",
    "spider": "--spider",
    "spider_args": "-a",
    "allowed_domains": "--allow-domain",
    "include_patterns": "--include",
    "exclude_patterns": "--exclude",
    "max_depth": "--max-depth",
    "max_pages": "--max-pages",
    "max_pages_per_host": "--max-pages-per-host",
    "delay": "--delay",
    "host_concurrency": "--host-concurrency",
    "name": "--name",
    "settings": "--allow-network",
    "user_agents": "--user-agent",
    "proxies": "--proxy",
    "headers": "--header",
    "warmup_path": "--warmup",
    "render": "--render",
    "extract": "--extract",
}


def seeds_from(path: str) -> list[str]:
    """The start URLs in the file ``--seeds`` names (see :func:`seeding.open_seed_file`)."""
    try:
        with seeding.open_seed_file(path) as stream:
            return list(seeding.seed_lines(stream))
    except OSError as exc:  # gzip's BadGzipFile is one too
        raise CommandError(f"--seeds {path}: {exc.strerror or exc}") from None
    except (EOFError, zlib.error) as exc:  # a .gz cut short, or corrupt inside
        raise CommandError(f"--seeds {path}: not a whole gzip file ({exc})") from None


def seed_list(seeds: list[str], shown: int = 3) -> str:
    """The seeds, for a line of the command's output: the first few, and how many more."""
    more = len(seeds) - shown
    return ", ".join(seeds[:shown]) + (f" and {more:,} more" if more > 0 else "")


def parse_headers(given: list[str]) -> dict[str, str]:
    """The job's headers from ``--header "Name: value"`` options."""
    headers = {}
    for item in given:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise CommandError(f'--header: {item!r} is not "Name: value"')
        headers[name.strip()] = value.strip()
    return headers


def parse_spider_args(given: list[str]) -> dict[str, str]:
    """The spider's arguments from ``-a NAME=VALUE`` options (Scrapy's)."""
    args = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise CommandError(f"-a: {item!r} is not NAME=VALUE")
        args[name.strip()] = value
    return args


def parse_rules(given: list[str], pattern: str) -> list[dict]:
    """The job's extraction rules from ``--extract`` options, on URLs matching ``pattern``."""
    rules = []
    for item in given:
        try:
            rules.append(selectors.parse_rule(item, pattern))
        except ValueError as exc:
            raise CommandError(f"--extract: {exc}") from None
    return rules


def allowed_networks(cidrs: list[str]) -> dict:
    """The job's ALLOWED_NETWORKS setting from ``--allow-network`` (and the environment's)."""
    if not cidrs:
        return {}
    from_env = os.environ.get("CRAWL_ALLOWED_NETWORKS", "")
    return {"ALLOWED_NETWORKS": ",".join(c for c in [from_env, *cidrs] if c)}


def output_replaces_feeds(spider: str, output: str | None) -> dict:
    """A spider job's setting that leaves its ``FEEDS`` unwritten when ``--output`` writes its
    items, as Scrapy's ``-o`` and ``-O`` replace the spider's and the project's ``FEEDS``."""
    return {"SPIDER_FEEDS": False} if spider and output else {}


def output_replaces_feeds_again(job: CrawlJob, output: str | None) -> None:
    """A resumed or recrawled spider job's ``SPIDER_FEEDS`` for this command's run: off with
    ``--output``, on without it, as each ``scrapy crawl`` decides for its own run."""
    if not job.spider:
        return
    settings = {k: v for k, v in (job.settings or {}).items() if k != "SPIDER_FEEDS"}
    settings.update(output_replaces_feeds(job.spider, output))
    if settings != (job.settings or {}):
        job.settings = settings
        job.save(update_fields=["settings"])


OUTPUT_HELP = ("the output: a file (.jsonl, .csv or .warc, .gz compresses; a spider job's "
               "items: .jsonl, .json, .csv or .xml as Scrapy writes them, or an s3:// URI), - "
               "for standard output, or a format name for standard output in it")
FORMAT_HELP = ("the output's format, when its name does not say it (jsonl, csv or warc; items: "
               "jsonl, json, csv or xml)")
ALL_FORMATS = tuple(dict.fromkeys([*export.FORMATS, *export.ITEM_FORMATS]))


def output_target(output: str | None, fmt: str | None,
                  items: bool | None = False) -> tuple[str, str] | None:  # fmt: skip
    """``(format, target)`` of an ``-o/--output`` and ``--format`` (target ``-``: standard
    output), None without an output. ``-o`` means the output everywhere: a format name prints
    in that format, anything else is a file whose name gives the format unless ``--format``
    does. ``items``: a spider job's items (None: either, the job is not known yet)."""
    if output is None:
        return None
    formats = {False: export.FORMATS, True: export.ITEM_FORMATS}.get(items, ALL_FORMATS)
    if fmt is not None and fmt not in formats:
        what = "items are" if items else "pages are"
        raise CommandError(f"--format {fmt}: {what} written as {', '.join(formats)}")
    if output in formats:
        return (fmt or output), "-"
    try:
        if items is None:
            return (fmt or _either_format(output)), output
        return (fmt or export.format_of(output, items=items)), output
    except ValueError as exc:
        raise CommandError(f"--output {exc}") from None


def _either_format(output: str) -> str:
    try:
        return export.format_of(output)
    except ValueError:
        return export.format_of(output, items=True)


def job_named(ref: str) -> CrawlJob:
    """The job ``ref`` names: its name, or its id (a name that is all digits wins over an id)."""
    found = list(CrawlJob.objects.filter(name=ref)[:2])
    if not found and ref.isdigit():
        found = list(CrawlJob.objects.filter(pk=int(ref)))
    if not found:
        raise CommandError(f"no job named {ref!r} (list them with: manage.py get jobs)")
    if len(found) > 1:
        raise CommandError(f"several jobs are named {ref!r}: give the id (manage.py get jobs)")
    return found[0]


def confirm(action: str, yes: bool) -> None:
    """Go on with ``action`` only if ``yes`` was given or a person at the terminal says so."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise CommandError(f"this would {action}: add --yes to do it without a question")
    answer = input(f"{action[0].upper()}{action[1:]}? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise CommandError("nothing done")


def reachable() -> None:
    """Redis and the broker answer (their errors say which does not, before a job is made)."""
    from kombu import Connection

    from tasks.broker import client, is_amqp

    client().ping()
    if is_amqp():
        with Connection(settings.CELERY_BROKER_URL, connect_timeout=5) as conn:
            conn.ensure_connection(max_retries=1)


def migrations_on_disk() -> set[tuple[str, str]]:
    """``(app, name)`` of every migration on disk, read from the file names, without importing
    the migrations (which ``migrate`` does even when it has nothing to apply: a tenth of a
    second of every crawl's start)."""
    found = set()
    for config in apps.get_app_configs():
        module_name, _ = MigrationLoader.migrations_module(config.label)
        try:
            module = importlib.import_module(module_name) if module_name else None
        except ModuleNotFoundError:
            continue
        for _, name, is_pkg in pkgutil.iter_modules(getattr(module, "__path__", [])):
            if not is_pkg and name[0] not in "_~":
                found.add((config.label, name))
    return found


def migrated() -> bool:
    """Every migration on disk is applied already: nothing for ``migrate`` to do. Anything
    else (a new migration, a squashed one not yet recorded, an empty database) leaves it to
    ``migrate``."""
    recorder = MigrationRecorder(connection)
    if not recorder.has_table():
        return False
    return migrations_on_disk() <= set(recorder.applied_migrations())


def prepare_database() -> str:
    """Bring the database to the migrations on disk, and say how: ``current`` (they are
    applied), ``created`` (a new embedded database, no table yet: :func:`create_tables`) or
    ``migrated``."""
    if migrated():
        return "current"
    if settings.EMBEDDED_DATABASE and not connection.introspection.table_names():
        create_tables()
        return "created"
    call_command("migrate", verbosity=0, interactive=False)
    return "migrated"


def create_tables() -> None:
    """Give a new, empty database the tables of today's models, as ``migrate --run-syncdb``
    makes them for apps without migrations, record every migration on disk as applied and
    send ``migrate``'s signals (content types, permissions): 0.04 s of CPU on a newcomer's
    first crawl, where replaying the migrations, which renders the models at each of their
    steps, takes 0.5 s. The schema is the same (``tests/test_cli.py`` compares them); the
    migrations' data steps fix rows of older versions, which a new database has not."""
    emit_pre_migrate_signal(0, False, connection.alias, apps=apps, plan=[])
    with connection.schema_editor() as editor:
        for model in apps.get_models():
            if model._meta.can_migrate(connection):
                editor.create_model(model)
    recorder = MigrationRecorder(connection)
    recorder.ensure_schema()
    with transaction.atomic():
        for app_label, name in sorted(migrations_on_disk()):
            recorder.record_applied(app_label, name)
    emit_post_migrate_signal(0, False, connection.alias, apps=apps, plan=[])


def with_database(call: Callable[[], T], what: str, patience: float | None = None) -> T:
    """Run ``call``, waiting out a database outage with a bounded backoff (one line for it);
    after ``patience`` seconds of outage (``OUTAGE_PATIENCE_S``) the error is raised."""
    patience = setting("OUTAGE_PATIENCE_S") if patience is None else patience
    outage = Outage(log, f"database (while {what})")
    while True:
        try:
            result = call()
        except DatabaseError as exc:
            connection.close()
            if outage.lasted > patience:
                raise
            time.sleep(outage.failed(exc))
            continue
        outage.recovered()
        return result


def show_progress(
    job: CrawlJob,
    pools: list[WorkerPool],
    interrupted: threading.Event,
    started: float,
    say: Say,
    woken: threading.Event,
) -> None:
    """Show the progress line until the job ends, is paused elsewhere or is interrupted
    (``woken``: see :func:`tick`)."""
    tty = say.live
    last_line = 0.0
    last_done, last_t = None, started
    rate = 0.0
    next_count = 0.0
    outage_since = None
    while tick(job, interrupted, woken):
        for each in pools:
            each.replace_dead()
        try:
            job.refresh_from_db()
            if time.monotonic() < next_count and job.state == JobState.RUNNING:
                continue
            # Counting is a scan of the job's frontier: on a big one, count less often, so
            # that the progress line never costs more than about 5% of a database core.
            before = time.monotonic()
            counts = jobs.counts(job.pk)
        except DatabaseError as exc:
            connection.close()  # the next try gets a fresh connection
            if outage_since is None:
                outage_since = time.monotonic()
                say(f"\ndatabase unavailable ({exc}); waiting for it")
            continue
        if outage_since is not None:
            say(f"database back after {time.monotonic() - outage_since:.0f} s")
            outage_since = None
        now = time.monotonic()
        next_count = now + 20 * (now - before)
        done = counts["done"]
        pending = counts["queued"] + counts["scheduled"] + counts["leased"]
        line = (
            f"done {done} | queued {pending} | failed {counts['failed']} | "
            f"skipped {counts['skipped']}"
        )
        figures = {"done": done, "queued": pending, "failed": counts["failed"],
                   "skipped": counts["skipped"]}  # fmt: skip
        if last_done is not None and now > last_t:  # a rate needs two counts
            rate = (
                0.7 * rate + 0.3 * (done - last_done) / (now - last_t)
                if rate
                else (done - last_done) / (now - last_t)
            )
            line += f" | {rate:.1f} pages/s"
            figures["pages_per_s"] = round(rate, 2)
        if waits := jobs.ban_waits(job.pk):
            line += "".join(f" | {wait}" for wait in waits)
            figures["ban_waits"] = waits
        last_done, last_t = done, now
        if tty:
            say("\r" + line.ljust(78), ending="")
        elif now - last_line >= 5:
            say(line, **figures)
            last_line = now
        if job.state in TERMINAL_STATES:
            if tty:
                say("")
            return
        if job.state == JobState.PAUSED:
            say(f"\njob {job.pk} was paused elsewhere; stopping")
            interrupted.set()
            return


def tick(job: CrawlJob, interrupted: threading.Event, woken: threading.Event) -> bool:
    """Wait for the next progress tick: a second, or less once the job leaves RUNNING (a
    read of its state every ``PROGRESS_POLL_S``, or at once when ``woken`` is set: by the
    command's scheduler as it finishes the job, and by an interrupt), so the command ends
    soon after the job. False when interrupted."""
    tick_at = time.monotonic() + 1.0
    while not woken.wait(setting("PROGRESS_POLL_S")):
        if time.monotonic() >= tick_at:
            return True
        try:
            if not CrawlJob.objects.filter(pk=job.pk, state=JobState.RUNNING).exists():
                return True
        except DatabaseError:  # the tick reports the outage, once a second as ever
            return not interrupted.wait(max(0.0, tick_at - time.monotonic()))
    woken.clear()
    return not interrupted.is_set()


def summary(job: CrawlJob, counts: dict, elapsed: float, say: Say) -> None:
    """The job's outcome (and a recrawl's changes)."""
    done = counts["done"]
    banned = f", {counts['needs_review']} banned (in review)" if counts["needs_review"] else ""
    say(f"job {job.pk} {job.state}: {done} pages, {counts['failed']} failed, "
        f"{counts['skipped']} skipped{banned} in {elapsed:.1f} s "
        f"({done / max(elapsed, 1e-9):.1f} pages/s)", state=job.state, done=done,
        failed=counts["failed"], skipped=counts["skipped"], banned=counts["needs_review"],
        elapsed_s=round(elapsed, 3))  # fmt: skip
    if job.run > 1:
        change = jobs.changes(job)
        say(f"run {job.run}: {change['new']} new, {change['changed']} changed, "
            f"{change['unchanged']} unchanged, {change['gone']} gone", run=job.run,
            **change)  # fmt: skip
    if job.spider and job.stats:
        drops = ", ".join(f"{n} {why}" for why, n in sorted(job.stats.get("drops", {}).items()))
        kept = f"{job.stats.get('items', 0)} items"
        say(kept + (f"; dropped: {drops}" if drops else ""), items=job.stats.get("items", 0))
    if job.stats.get("close_reason"):
        say(f"the spider closed the crawl: {job.stats['close_reason']}")
    for feed in job.stats.get("feeds", []):
        say(feed_line(feed))


def feed_line(feed: dict) -> str:
    """One feed a job's run wrote (``tasks/content/feeds.py``), as people read it."""
    if "format" not in feed:
        return f"feeds not written: {feed['error']}"
    if "error" in feed:
        return f"{feed['format']} feed not written to {feed['uri']}: {feed['error']}"
    left_out = f" ({feed['items_left_out']} items its encoding cannot hold left out)" if (
        feed.get("items_left_out")) else ""  # fmt: skip
    return f"{feed['format']} feed ({feed['items']} items) written to {feed['uri']}{left_out}"


class ResultsApart:
    """Standard output kept for the results alone (``--output -``): until ``back``, what else
    is written to it, by this process (a spider's ``print()`` in its start requests or
    pipelines, a library's) or by the workers it starts, goes to standard error."""

    def __init__(self) -> None:
        sys.stdout.flush()
        self._kept: int | None = os.dup(1)
        os.dup2(2, 1)

    def back(self) -> None:
        """Standard output is the results' again (once what runs spider code has stopped)."""
        if self._kept is None:
            return
        sys.stdout.flush()
        os.dup2(self._kept, 1)
        os.close(self._kept)
        self._kept = None


def write_output(job: CrawlJob, fmt: str, target: str, say: Say) -> None:
    """The job's results (a spider job's items, as Scrapy's ``-O``) to ``target`` (``-``:
    standard output); what was written, said."""
    where = "standard output" if target == "-" else target
    if not job.spider:
        if fmt not in export.FORMATS:
            raise CommandError(f"--output: a crawl's pages are written as "
                               f"{', '.join(export.FORMATS)}, not {fmt}")  # fmt: skip
        written = export.save(job, fmt, target)
        say(f"wrote {written.rows} rows to {where}", rows=written.rows)
        return
    if fmt not in export.ITEM_FORMATS:
        raise CommandError(f"--output: a spider job's items are written as "
                           f"{', '.join(export.ITEM_FORMATS)}, not {fmt}")  # fmt: skip
    try:
        items = export.save_items(job, fmt, target)
    except (feeds.FeedProblem, OSError) as exc:
        raise CommandError(f"cannot write {target}: {exc}") from None
    say(f"wrote {items} items to {where}", rows=items)
