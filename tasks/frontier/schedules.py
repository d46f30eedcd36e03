"""Recrawl schedules: a job's ``schedule`` as a django-celery-beat periodic task.

A schedule (``tasks/rules/schedules.py`` checks it) is a cron line or an interval. Beat
(``DatabaseScheduler``) sends ``tasks.recrawl_job`` with the job's id when it is due; a job
still running then is left alone (the run after it catches up).
"""

from __future__ import annotations

import json

from tasks.rules.schedules import parse

TASK = "tasks.recrawl_job"


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
