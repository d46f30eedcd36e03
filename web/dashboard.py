"""The live dashboard: the fleet at ``/dashboard/`` and one job at ``/dashboard/jobs/ID/``.

Each page is a template rendered from a payload (values, tables, bars, charts) that its JSON
twin (``.../data``) serves again; ``static/dashboard/dashboard.js`` asks for it every
``REFRESH_S`` and updates the page in place. Fleet numbers are the ones ``/metrics`` reports
(``web/metrics.py``: broker depth, due backlog, throttled hosts, open circuits) and the worker
registry (``tasks/worker/heartbeat.py``); a job's URL counts are ``jobs.counts``.

Who sees what (``web/access.py``): every signed-in person sees fleet-wide numbers; the jobs,
and the hosts named in throttles and circuits, are only those of jobs they may see; another
person's job is a 404.

Queries stay bounded on jobs of millions of URLs: counts by state use the frontier's
``(job, state, ...)`` index; pages per minute use ``(job, fetched_at)``, and minutes that can
no longer change are counted once per process (Django's cache); breakdowns (outcomes,
statuses, hosts, recent errors, a spider job's stats) are kept for ``1 / BREAKDOWN_SHARE``
times what they took to compute (a small job's at every refresh, a huge job's every few
seconds), and an ended job's counts and breakdowns for ``ENDED_TTL_S``; every list has a limit.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.db.models import Count, Q
from django.db.models.functions import TruncMinute
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import path, reverse
from django.utils import timezone
from redis.exceptions import RedisError

from tasks.frontier import channels, jobs, spiderjobs
from tasks.frontier.stats import stats_of
from tasks.worker import registry
from web import access, metrics
from web.export import count_items
from web.models import (
    TERMINAL_STATES,
    CrawlJob,
    FrontierURL,
    JobState,
    Page,
    Review,
    URLState,
)

REFRESH_S = 2  # an open dashboard asks for fresh numbers this often, seconds
RATE_MINUTES = 60  # the pages/s chart covers this many minutes, the current one last
SETTLED_S = 120  # a minute this long past is complete: pages commit well within it
BREAKDOWN_SHARE = 0.05  # of the time a job view is open, its breakdowns' queries take this much
BREAKDOWN_TTL_MAX_S = 60  # a running job's breakdowns are at most this old, seconds
ENDED_TTL_S = 300  # an ended job's counts and breakdowns are kept this long, seconds
THROTTLED_MIN_S = 0.05  # a host whose adaptive delay decayed below this is no longer shown
RATE_JOBS_MAX = 200  # jobs summed into the fleet's pages/s at most
JOBS_LISTED = 20  # jobs on the fleet view (running and paused first)
ROWS_LISTED = 20  # rows of every other list
STATS_LISTED = 200  # a spider job's stats shown (by name; the API gives them all)
LIVE = (JobState.RUNNING, JobState.PAUSED)
# Segments of a progress bar, left to right: what ended, then what is still owed.
BAR_ORDER = ("done", "failed", "skipped", "needs_review", "leased", "scheduled", "queued")
ENDED = ("done", "failed", "skipped", "needs_review")


def cell(text: Any, href: str = "", cls: str = "", bar: list[dict] | None = None) -> dict:
    """One table cell of a payload: text, and optionally a link, a CSS class, a bar."""
    out: dict[str, Any] = {"text": str(text)}
    if href:
        out["href"] = href
    if cls:
        out["cls"] = cls
    if bar is not None:
        out["bar"] = bar
    return out


def segments(counts: dict[str, int]) -> list[dict]:
    """A stacked progress bar of URL counts by state, widths in percent of all URLs."""
    total = sum(counts.values())
    return [
        {"name": state, "n": counts[state], "pct": f"{100 * counts[state] / total:.2f}"}
        for state in BAR_ORDER
        if total and counts.get(state)
    ]


def _ended_of(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    return f"{sum(counts.get(s, 0) for s in ENDED):,} of {total:,} ended"


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{max(0, round(seconds))} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds / 3600)} h"


def _when(moment: datetime | None) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S") if moment else "-"


def _job_link(job: CrawlJob) -> dict:
    return cell(f"#{job.pk} {job.name}", href=reverse("dashboard:job", args=[job.pk]))


def _cached(key: str, ttl: float | None, compute: Callable[[], Any]) -> Any:
    """``compute()``, kept ``ttl`` seconds (None: in proportion to what it took)."""
    value = cache.get(key)
    if value is None:
        began = time.monotonic()
        value = compute()
        cost = time.monotonic() - began
        cache.set(key, value, ttl or min(BREAKDOWN_TTL_MAX_S, max(1, cost / BREAKDOWN_SHARE)))
    return value


def _job_key(job: CrawlJob, what: str) -> str:
    """A cache key for one run and state of one job (ids come back after a database reset)."""
    return f"dashboard:{what}:{job.pk}:{job.created_at.timestamp():.0f}:{job.run}:{job.state}"


def counts_of(job: CrawlJob) -> dict[str, int]:
    """URL count by state; an ended job's are final, so they are not counted at every look."""
    if job.state in TERMINAL_STATES:
        return _cached(_job_key(job, "counts"), ENDED_TTL_S, lambda: jobs.counts(job.pk))
    return jobs.counts(job.pk)


# Pages per minute -----------------------------------------------------------------------


def _per_minute(job_ids: list[int], start: datetime, end: datetime) -> dict[int, int]:
    """Pages fetched in [start, end) by minute (Unix time of the minute's start)."""
    rows = (
        Page.objects.filter(job_id__in=job_ids, fetched_at__gte=start, fetched_at__lt=end)
        .annotate(minute=TruncMinute("fetched_at"))
        .values_list("minute")
        .annotate(n=Count("id"))
        .values_list("minute", "n")
    )
    return {int(minute.timestamp()): n for minute, n in rows}


def rate_series(jobs: list[tuple[int, datetime]], now: datetime | None = None) -> dict:
    """Pages per second of ``jobs`` ((id, created_at) pairs) in each of the last
    ``RATE_MINUTES`` minutes, the current one so far; ``start`` is the first minute's Unix
    time. Minutes older than ``SETTLED_S`` are counted once per job and process."""
    now = now or timezone.now()
    current = now.replace(second=0, microsecond=0)
    first = int((current - timedelta(minutes=RATE_MINUTES - 1)).timestamp())
    settled = max(first, int((now - timedelta(seconds=SETTLED_S)).timestamp()) // 60 * 60)
    totals: Counter[int] = Counter()
    for job_id, created in jobs:
        key = f"dashboard:rate:{job_id}:{created.timestamp():.0f}"
        known = {m: n for m, n in (cache.get(key) or {}).items() if m >= first}
        missing = [m for m in range(first, settled, 60) if m not in known]
        if missing:
            known.update(dict.fromkeys(range(missing[0], settled, 60), 0))
            since, until = (datetime.fromtimestamp(t, UTC) for t in (missing[0], settled))
            known.update(_per_minute([job_id], since, until))
            cache.set(key, known, RATE_MINUTES * 60)
        totals.update(known)
    if jobs:
        since = datetime.fromtimestamp(settled, UTC)
        totals.update(_per_minute([j for j, _ in jobs], since, now + timedelta(minutes=1)))
    so_far = max(1.0, (now - current).total_seconds())
    values = [
        round(totals[m] / (60 if m < current.timestamp() else so_far), 2)
        for m in range(first, first + 60 * RATE_MINUTES, 60)
    ]
    return {"start": first, "step": 60, "values": values}


def _pages_per_s(job_ids: list[int], now: datetime) -> str:
    """Pages per second over the last minute."""
    if not job_ids:
        return "0.0"
    recent = Page.objects.filter(job_id__in=job_ids, fetched_at__gte=now - timedelta(minutes=1))
    return f"{recent.count() / 60:.1f}"


# The fleet ------------------------------------------------------------------------------


def _workers(found: list[dict], now: float) -> tuple[int, list[list[dict]]]:
    rows, online = [], 0
    for worker in found:
        age, fresh = now - worker["heartbeat"], registry.online(worker, now)
        online += fresh
        rows.append([
            cell(worker["name"]), cell(worker["version"] or "-"), cell(worker["channel"] or "-"),
            cell(worker["pid"] or "-"),
            cell(_ago(now - worker["started"]) if worker["started"] else "-"),
            cell(f"{_ago(age)} ago"),
            cell("online", cls="ok") if fresh else cell("stale", cls="warn"),
        ])  # fmt: skip
    return online, rows


def _host_rows(
    visible: Any, found: list[tuple], describe: Callable[[tuple], list[dict]]
) -> list[list[dict]]:
    """Rows for (job, host, ...) entries of jobs the person may see, at most ``ROWS_LISTED``."""
    ids = {int(entry[0]) for entry in found}
    jobs = visible.filter(pk__in=ids).only("id", "name").in_bulk()
    rows = [
        [_job_link(jobs[int(entry[0])]), cell(entry[1]), *describe(entry)]
        for entry in found
        if int(entry[0]) in jobs
    ]
    return rows[:ROWS_LISTED]


def fleet_payload(user: Any) -> dict:
    """The fleet view's numbers for ``user``."""
    now = timezone.now()
    visible = access.jobs(user)
    values = dict.fromkeys(["workers", "ready", "in_flight", "throttled", "circuits"], "-")
    tables: dict[str, list] = {"workers": [], "throttled": [], "circuits": []}
    problems = []
    try:
        online, tables["workers"] = _workers(registry.workers(), now.timestamp())
        depth = channels.depth()
        throttled = sorted(
            (t for t in metrics.throttled_hosts() if t[2] >= THROTTLED_MIN_S),
            key=lambda t: -t[2],
        )
        circuits = sorted(metrics.open_circuits())
        values.update(
            workers=f"{online:,}",
            ready=f"{depth['ready']:,}",
            in_flight="-" if depth["unacked"] is None else f"{depth['unacked']:,}",
            throttled=f"{len(throttled):,}",
            circuits=f"{len(circuits):,}",
        )
        tables["throttled"] = _host_rows(visible, throttled, lambda t: [cell(f"{t[2]:.2f} s")])
        tables["circuits"] = _host_rows(visible, circuits, lambda t: [])
    except RedisError as exc:
        problems.append(f"Redis: {exc}")
    reviews = Review.objects.all()
    if not access.sees_all(user):
        reviews = reviews.filter(job__in=visible)
    recent = list(
        CrawlJob.objects.filter(
            Q(state__in=LIVE) | Q(finished_at__gte=now - timedelta(hours=1))
        ).values_list("id", "created_at")[:RATE_JOBS_MAX]
    )
    listed = list(visible.filter(state__in=LIVE)[:JOBS_LISTED])
    listed += list(visible.exclude(state__in=LIVE)[: JOBS_LISTED - len(listed)])
    jobs = []
    for job in listed:
        counts = counts_of(job)
        jobs.append([
            _job_link(job), cell(job.state, cls=f"state-{job.state}"),
            cell(_ended_of(counts), bar=segments(counts)),
        ])  # fmt: skip
    values.update(
        due=f"{metrics.due_backlog():,}",
        review=f"{reviews.count():,}",
        pages_per_s=_pages_per_s([j for j, _ in recent], now),
        jobs=f"{len(listed)} of {visible.count():,}",
        updated=_when(now),
    )
    return {
        "values": values,
        "tables": {**tables, "jobs": jobs},
        "charts": {"rate": rate_series(recent, now)},
        "bars": {},
        "problems": problems,
    }


# One job --------------------------------------------------------------------------------


def _breakdowns(job: CrawlJob) -> dict[str, list]:
    """Outcomes, HTTP statuses, top hosts, recent errors and (a spider's) stats of one job."""
    urls = FrontierURL.objects.filter(job_id=job.pk)
    outcomes = (
        urls.exclude(error_reason="")
        .values_list("state", "error_reason")
        .annotate(n=Count("id"))
        .order_by("-n")[:ROWS_LISTED]
    )
    statuses = (
        urls.exclude(http_status=None)
        .values_list("http_status")
        .annotate(n=Count("id"))
        .order_by("-n")[:ROWS_LISTED]
    )
    hosts = (
        urls.filter(state=URLState.DONE)
        .values_list("host")
        .annotate(n=Count("id"))
        .order_by("-n")[:ROWS_LISTED]
    )
    errors = urls.filter(state=URLState.FAILED).order_by("-updated_at")[:ROWS_LISTED]
    drops = spiderjobs.drops(job.pk) if job.spider else {}
    drops = sorted(drops.items(), key=lambda d: (-d[1], d[0]))
    stats = list((stats_of(job) if job.spider else {}).items())[:STATS_LISTED]
    return {
        "drops": [[cell(reason), cell(f"{n:,}")] for reason, n in drops[:ROWS_LISTED]],
        "stats": [[cell(name), cell(_stat(value))] for name, value in stats],
        "outcomes": [[cell(reason), cell(state), cell(f"{n:,}")] for state, reason, n in outcomes],
        "statuses": [[cell(status), cell(f"{n:,}")] for status, n in statuses],
        "hosts": [[cell(host), cell(f"{n:,}")] for host, n in hosts],
        "errors": [
            [
                cell(_when(u.updated_at)),
                cell(u.url),
                cell(u.error_reason),
                cell(u.http_status or "-"),
                cell(u.error_message[:300]),
            ]
            for u in errors
        ],  # fmt: skip
    }


def _stat(value: Any) -> str:
    if isinstance(value, datetime):
        return _when(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return f"{value:,.3f}" if isinstance(value, float) else str(value)


def job_payload(job: CrawlJob) -> dict:
    """The job view's numbers."""
    now = timezone.now()
    counts = counts_of(job)
    ttl = ENDED_TTL_S if job.state in TERMINAL_STATES else None
    checkpoints = [
        [cell(c.version), cell(_when(c.created_at)), cell(c.reason),
         cell(f"{c.counters.get('pages', 0):,}"),
         cell(", ".join(f"{s} {n:,}" for s, n in c.frontier.items() if n))]
        for c in job.checkpoints.order_by("-version")[:ROWS_LISTED]
    ]  # fmt: skip
    total = sum(counts.values())
    ended = sum(counts.get(s, 0) for s in ENDED)
    return {
        "values": {
            **{state: f"{n:,}" for state, n in counts.items()},
            "state": job.state,
            "total": f"{total:,}",
            "percent": f"{100 * ended / total:.0f}%" if total else "-",
            "pages_per_s": _pages_per_s([job.pk], now),
            "items": f"{_cached(_job_key(job, 'items'), ttl, lambda: count_items(job.pk)):,}"
            if job.spider else "-",
            "run": str(job.run),
            "started": _when(job.started_at),
            "finished": _when(job.finished_at),
            "updated": _when(now),
        },
        "tables": {
            **_cached(_job_key(job, "breakdowns"), ttl, lambda: _breakdowns(job)),
            "checkpoints": checkpoints,
        },
        "charts": {"rate": rate_series([(job.pk, job.created_at)], now)},
        "bars": {"progress": segments(counts)},
        "problems": [*([job.error] if job.error else []), *jobs.ban_waits(job.pk)],
    }


# Views ----------------------------------------------------------------------------------


def _page(request: HttpRequest, template: str, data: dict, **context: Any) -> HttpResponse:
    return render(request, template, {"data": data, "refresh_s": REFRESH_S, **context})


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    """Workers, the broker, throttled and broken hosts, pages/s and the person's jobs."""
    return _page(request, "dashboard/fleet.html", fleet_payload(request.user),
                 source=reverse("dashboard:fleet-data"))  # fmt: skip


@login_required
def fleet_data(request: HttpRequest) -> JsonResponse:
    return JsonResponse(fleet_payload(request.user))


@login_required
def job(request: HttpRequest, pk: int) -> HttpResponse:
    """One job's progress, rate, outcomes, hosts, errors and checkpoints."""
    found = get_object_or_404(access.jobs(request.user), pk=pk)
    return _page(request, "dashboard/job.html", job_payload(found), job=found,
                 source=reverse("dashboard:job-data", args=[pk]))  # fmt: skip


@login_required
def job_data(request: HttpRequest, pk: int) -> JsonResponse:
    return JsonResponse(job_payload(get_object_or_404(access.jobs(request.user), pk=pk)))


app_name = "dashboard"
urlpatterns = [
    path("", fleet, name="fleet"),
    path("data", fleet_data, name="fleet-data"),
    path("jobs/<int:pk>/", job, name="job"),
    path("jobs/<int:pk>/data", job_data, name="job-data"),
]
