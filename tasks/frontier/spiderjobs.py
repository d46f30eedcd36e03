"""A spider job's start and end: its start requests (and items) into the frontier when it
starts, its items' feed to the body store, its ``FEEDS`` written and its pipelines closed when
it ends.

Reads ``SPIDER_CALLBACK_TIMEOUT_S`` (the start is a callback too) and ``SPIDER_MAX_YIELDS``.
The spider is loaded where the job is started: a name no installed module provides, a module
that fails to import, ``custom_settings`` a job could not have, or a ``start`` that raises,
fail the job at once with the reason (and the traceback) in its error.
"""

from __future__ import annotations

import json
import logging
import time
from typing import NamedTuple
from urllib.parse import urlsplit

from django.core.files.base import ContentFile

from crawlplatform.spiders import CloseSpider, Request, Spider, loop
from tasks import defaults
from tasks.content import bodies, callbacks, feeds, rows, spiders, stats
from tasks.content import items as itempipes
from tasks.content.exporters import Stored
from tasks.content.links import JobCache
from tasks.defaults import setting
from tasks.fetch import outcomes
from tasks.frontier import stats as stat_rows
from tasks.frontier.stats import StatRow
from tasks.frontier.yields import NewRequest, insert_requests
from tasks.rules.urls import Scope, canonicalize
from web.models import CrawlJob, Item
from web.models.jobs import MAX_DEPTH_LIMIT

log = logging.getLogger(__name__)


class SpiderProblem(Exception):
    """Why a spider job cannot start (the text goes to the job's error)."""


class Start(NamedTuple):
    requests: list[NewRequest]
    items: list[tuple[dict, str, list | None]]  # (data, dropped reason, fields in order)
    settings: dict  # the job's settings with the spider's custom_settings under them
    domains: list[str]  # the job's allowed domains once started
    fields: dict  # job fields the spider's Scrapy settings set (delay, obey_robots, ...)
    state: dict  # attributes start() set, which every worker's spider is given
    stats: list[StatRow]  # what the start changed in the job's stats (crawler.stats)
    closing: str | None = None  # start() raised CloseSpider with this reason


def _gather(spider: Spider, job: CrawlJob) -> tuple[list, str | None]:
    """What ``spider.start()`` yields, within the callback's time bound, and the reason of a
    ``CloseSpider`` it raised (what it yielded before is kept, as Scrapy keeps it)."""
    found: list = []
    deadline = time.monotonic() + setting("SPIDER_CALLBACK_TIMEOUT_S", job)
    cap = setting("SPIDER_MAX_YIELDS", job)
    closing: list[str] = []

    async def drain() -> None:
        try:
            async for one in spider.start():
                callbacks.keep_yielded(one, deadline, cap, found)
        except CloseSpider as exc:
            closing.append(str(exc.reason) or "cancelled")

    loop.run(drain(), max(0.1, deadline - time.monotonic()))
    return found, (closing[0] if closing else None)


def _default(field: str) -> object:
    """A spider job's ``field`` when nothing set it (a spider's requests go as deep as it
    asks): what its ``custom_settings`` may change. A value the job was given (the crawl
    command's ``--ignore-robots``, a spec's ``delay``) wins, as Scrapy's command line wins
    over ``custom_settings``."""
    if field == "max_depth":
        return MAX_DEPTH_LIMIT
    return CrawlJob._meta.get_field(field).get_default()


def _as_json(attributes: dict) -> dict[str, str | None]:
    """Each attribute as JSON text, None where it is not JSON (``vars`` of a spider)."""
    kept: dict[str, str | None] = {}
    for name, value in attributes.items():
        try:
            kept[name] = json.dumps(value, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError):
            kept[name] = None
    return kept


def _state(spider: Spider, before: dict[str, str | None]) -> dict:
    """The attributes ``start()`` set or changed, which a Scrapy spider's one process keeps
    for its callbacks: those that are JSON go to every worker's spider (``spider_state``);
    the others are named in the log, as the workers will not have them."""
    after = _as_json(vars(spider))
    new = {name: text for name, text in after.items()
           if name not in before or before[name] != text}  # fmt: skip
    lost = sorted(name for name, text in new.items() if text is None)
    if lost:
        log.warning("spider %s: start() set attributes that are not JSON, which its callbacks "
                    "in the workers will not have: %s", spider.name, ", ".join(lost))  # fmt: skip
    changed = {name: json.loads(text) for name, text in new.items() if text is not None}
    if len(json.dumps(changed)) > setting("SPIDER_REQUEST_MAX_BYTES"):
        raise SpiderProblem(f"the attributes start() set ({', '.join(sorted(changed))}) take "
                            "more than SPIDER_REQUEST_MAX_BYTES as JSON")  # fmt: skip
    return changed



def _user_agent(spider: Spider, job: CrawlJob, settings: dict) -> None:
    """A spider's ``user_agent`` attribute (``-a user_agent=...``, its class's, or what
    ``start()`` set) is the job's ``USER_AGENT``, as Scrapy's ``UserAgentMiddleware`` reads it
    over the setting; user agents the job was given itself win, as the command line wins."""
    agent = getattr(spider, "user_agent", None)
    if not isinstance(agent, str) or not agent.strip():
        return
    if job.user_agents or "USER_AGENT" in (job.settings or {}):
        log.info("job=%s: the job's own user agent goes, not spider %s's user_agent attribute",
                 job.pk, spider.name)  # fmt: skip
        return
    settings["USER_AGENT"] = agent.strip()


def plan(job: CrawlJob) -> Start:
    """The spider's start for ``job``; SpiderProblem says why there is none."""
    try:
        cls = spiders.load(job.spider)
    except spiders.SpiderUnavailable as exc:
        raise SpiderProblem(str(exc)) from None
    custom = spiders.custom_settings(cls)
    problems = custom.problems + defaults.job_problems(custom.settings, job.may)
    if problems:
        hint = ""
        if custom.problems or any(p.endswith(": no such setting") for p in problems):
            hint = (" (custom_settings take the platform's job settings and the Scrapy settings "
                    "it has an equivalent of: docs/spiders.md, Porting)")  # fmt: skip
        raise SpiderProblem(f"spider {job.spider!r} custom_settings: " + "; ".join(problems)
                            + hint)  # fmt: skip
    settings = {**custom.settings, **(job.settings or {})}
    # DEFAULT_REQUEST_HEADERS (Scrapy's own if the spider sets none): the job's own headers win
    custom.fields["headers"] = {**custom.fields["headers"], **(job.headers or {})}
    fields = {field: value for field, value in custom.fields.items()
              if field == "headers" or getattr(job, field) == _default(field)}  # fmt: skip
    for field, value in fields.items():
        setattr(job, field, value)
    with stats.bound(stats.Pending(job.pk, page=False)) as changed:  # written with the start
        try:
            spider = spiders.create(job)
            pipes = itempipes.Pipelines(spider)  # one that cannot be made fails the job
            before = _as_json(vars(spider))
            yielded, closing = _gather(spider, job)
            state = _state(spider, before)
            _user_agent(spider, job, settings)
            if setting("SPIDER_FEEDS", job) and (unwritable := feeds.problems(spider)):
                raise SpiderProblem(f"spider {job.spider!r} feeds: " + "; ".join(unwritable))
        except SpiderProblem:
            raise
        except Exception as exc:  # user code: its error is the job's
            raise SpiderProblem(
                str(callbacks.spider_error(exc, setting("SPIDER_TRACEBACK_LINES")))
            ) from exc
        if closing is not None:  # the crawl ends at its start: its requests are not fetched
            log.info("job=%s: start() closes the crawl: %s", job.pk, closing)
            yielded = [one for one in yielded if not isinstance(one, Request)]
        start = _started(job, spider, pipes, yielded, settings, fields, state, closing)
    return start._replace(stats=changed.rows(), closing=closing)


def _started(job: CrawlJob, spider: Spider, pipes: itempipes.Pipelines, yielded: list,
             settings: dict, fields: dict, state: dict, closing: str | None) -> Start:  # fmt: skip
    """The start's requests in the job's scope (each sent as ``request_scheduled``) and its
    items through the pipelines, which are then closed (and the spider too, ``closed`` and
    ``spider_closed``, if the start ended the crawl: no worker will open them)."""
    requests = [r for r in yielded if isinstance(r, Request)]
    domains = list(job.allowed_domains or getattr(spider, "allowed_domains", None) or
                   sorted({urlsplit(r.url).hostname or "" for r in requests} - {""}))  # fmt: skip
    job.allowed_domains, job.settings = domains, settings
    cache = JobCache(Scope.for_job(job), 1000)
    queued: dict[str, NewRequest] = {}
    for n, request in enumerate(requests):
        try:
            kept = rows.record(request, spider)
        except ValueError as exc:
            raise SpiderProblem(f"start: {exc}") from None
        canonical = canonicalize(request.url)
        anywhere = rows.leaves_domains(request.dont_filter, request.meta)
        if canonical is None or not cache.scope.allows(canonical, any_host=anywhere):
            log.warning("job=%s: start request %s is outside the job's scope", job.pk, request)
            continue
        if not pipes.scheduled(request):
            continue  # a request_scheduled handler raised IgnoreRequest
        row_key = rows.key(canonical, kept, f"start.{n}" if request.dont_filter else "")
        queued.setdefault(row_key, NewRequest(row_key, rows.stored(kept, row_key), None,
                                             rows.rank(request)))  # fmt: skip
    items = [pipes.keep(i) for i in yielded if not isinstance(i, Request)]
    pipes.close(closing)
    return Start(list(queued.values()), items, settings, domains, fields, state, [])


def begin(job: CrawlJob, start: Start) -> None:
    """Inside the job's start transaction: its settings, scope, start requests, items and
    stats."""
    CrawlJob.objects.filter(pk=job.pk).update(settings=start.settings,
                                              allowed_domains=start.domains,
                                              spider_state=start.state,
                                              close_reason=(start.closing or "")[:200],
                                              **start.fields)  # fmt: skip
    insert_requests(job.pk, start.requests, 0, None)
    Item.objects.bulk_create([Item(job_id=job.pk, spider=job.spider, data=data, dropped=dropped,
                                   fields=names, run=job.run)
                              for data, dropped, names in start.items])  # fmt: skip
    stat_rows.add(job.pk, start.stats)


FEED_NAME = "{job}/items/run-{run}.jsonl"


def write_feed(job: CrawlJob) -> str:
    """The job's items of its last run as JSON lines in the body store; the feed's name."""
    name = FEED_NAME.format(job=job.pk, run=job.run)
    kept = Item.objects.filter(job_id=job.pk, run=job.run, dropped="").order_by("id")
    rows = kept.values_list("data", "fields").iterator(2000)
    text = "".join(json.dumps(Stored.of(data, fields).data, ensure_ascii=False) + "\n"
                   for data, fields in rows)  # fmt: skip
    store = bodies.storage()
    if store.exists(name):
        store.delete(name)
    store.save(name, ContentFile(text.encode()))
    return name


def write_feeds(job: CrawlJob) -> list[dict]:
    """The job's ``FEEDS`` (``tasks/content/feeds.py``), written by the process that ends its
    run; what each file holds, or why it could not be written (the items stay in the table:
    ``manage.py export JOB --feeds`` writes them again). Nothing for a job whose
    ``SPIDER_FEEDS`` is off."""
    if not setting("SPIDER_FEEDS", job):
        return []
    try:
        return feeds.write(job, spiders.create(job))
    except Exception as exc:  # the spider, the database: the feeds' failure, not the job's
        log.exception("job=%s: its feeds could not be written", job.pk)
        return [{"error": f"{type(exc).__name__}: {exc}"[:1000]}]


def drops(job_id: int) -> dict[str, int]:
    """The job's dropped items by reason."""
    out: dict[str, int] = {}
    for reason in (
        Item.objects.filter(job_id=job_id)
        .exclude(dropped="")
        .values_list("dropped", flat=True)
        .iterator(2000)
    ):
        kind = reason.split(":", 1)[0] if reason.startswith(itempipes.SCHEMA) else reason
        out[kind] = out.get(kind, 0) + 1
    return out


def ended(job: CrawlJob) -> dict:
    """A spider job's run ended: its feed is written and the counts it keeps returned."""
    stats = {"items": Item.objects.filter(job_id=job.pk, run=job.run, dropped="").count(),
             "drops": drops(job.pk)}  # fmt: skip
    try:
        stats["items_feed"] = write_feed(job)
    except Exception as exc:  # the store is away: the items stay in the database
        log.exception("job=%s: the items feed could not be written", job.pk)
        stats["items_feed_error"] = f"{type(exc).__name__}: {exc}"[:500]
    if written := write_feeds(job):
        stats["feeds"] = written
    for spider in spiders.forget(job.pk):
        log.info("job=%s: spider %s let go", job.pk, spider.name)
    return stats


SPIDER_ERRORS = (outcomes.SpiderError.reason, outcomes.SpiderTimeout.reason)
