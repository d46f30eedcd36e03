"""Recrawl schedules as a job states them: a cron line of five fields (minute hour
day-of-month month day-of-week, UTC) or an interval ``every N`` with a unit ``s``, ``m``, ``h``
or ``d`` (at least a minute, at most a year). ``tasks/frontier/schedules.py`` makes them
django-celery-beat periodic tasks.
"""

from __future__ import annotations

import re

from celery.schedules import crontab

_EVERY = re.compile(r"^every\s+(\d+)\s*([smhd])$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MIN_INTERVAL_S = 60
MAX_INTERVAL_S = 366 * 86400  # beat stores intervals as 32-bit seconds


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
    """Why ``text`` is not a schedule ("" if it is one, or empty: no schedule)."""
    if not text.strip():
        return ""
    try:
        parse(text)
    except ValueError as exc:
        return str(exc)
    return ""
