"""Recrawl schedules: a job's ``schedule`` as a django-celery-beat periodic task.

A schedule is a cron line of five fields (minute hour day-of-month month day-of-week, UTC) or
an interval ``every N`` with a unit ``s``, ``m``, ``h`` or ``d`` (at least a minute). Beat
(``DatabaseScheduler``) sends ``tasks.recrawl_job`` with the job's id when it is due; a job
still running then is left alone (the run after it catches up).
"""

from __future__ import annotations

import json
import re

from celery.schedules import crontab

_EVERY = re.compile(r"^every\s+(\d+)\s*([smhd])$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MIN_INTERVAL_S = 60
MAX_INTERVAL_S = 366 * 86400  # beat stores intervals as 32-bit seconds
TASK = "tasks.recrawl_job"


def parse(text: str) -> tuple[str, object]:
    """``("interval", seconds)`` or ``("cron", [five fields])``; ValueError if neither."""
    text = text.strip()
    if found := _EVERY.match(text):
        seconds = int(found[1]) * _UNIT_S[found[2].lower()]
        if seconds < MIN_INTERVAL_S:
            raise ValueError(f"{text!r}: the interval must be at least a minute")
        if seconds > MAX_INTERVAL_S:
            raise ValueError(f"{text!r}: the interval must be at most a year")
        return "interval", seconds
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(
            f'{text!r} is neither a cron line of five fields ("0 3 * * *") nor "every N[smhd]"'
        )
    try:
        crontab(*fields)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a valid cron line: {exc}") from None
    return "cron", fields


def problem(text: str) -> str:
    if not text.strip():
        return ""
    try:
        parse(text)
    except ValueError as exc:
        return str(exc)
    return ""


def task_name(job_id: int) -> str:
    return f"recrawl job {job_id}"


def sync(job) -> None:
    """Make beat's periodic task of ``job`` match its schedule (created, changed or removed)."""
    from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

    name = task_name(job.pk)
    if not job.schedule.strip():
        forget(job.pk)
        return
    kind, value = parse(job.schedule)
    when: dict = {"interval": None, "crontab": None}
    if kind == "interval":
        when["interval"], _ = IntervalSchedule.objects.get_or_create(
            every=value, period=IntervalSchedule.SECONDS
        )
    else:
        minute, hour, day_of_month, month, day_of_week = value
        when["crontab"], _ = CrontabSchedule.objects.get_or_create(
            minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month,
            day_of_week=day_of_week, timezone="UTC",
        )  # fmt: skip
    PeriodicTask.objects.update_or_create(
        name=name,
        defaults={"task": TASK, "args": json.dumps([job.pk]), "enabled": True, **when},
    )


def forget(job_id: int) -> None:
    """Remove the job's periodic task, if it has one (the job is deleted or unscheduled)."""
    from django_celery_beat.models import PeriodicTask

    PeriodicTask.objects.filter(name=task_name(job_id)).delete()
