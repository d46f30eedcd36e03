"""Log lines that say what they are about, and the logging configuration of every process.

A line carries the crawl job and URL it concerns (``job_id``, ``url_id``: bound by the engine
while it works on a URL, and by the scheduler while it releases a job's URLs) and the process's
``worker``, ``channel`` and ``version`` (bound by a worker when it starts consuming): a log
system follows one URL across the scheduler, the workers and their retries by ``url_id``.

``LOG_FORMAT`` chooses the format: ``text`` (the default, for people: the crawl command, a
terminal) or ``json`` (one JSON object a line, python-json-logger, with those fields wherever
a line has them: for log systems). ``LOG_LEVEL`` is the root level.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

FORMATS = ("text", "json")
FIELDS = ("job_id", "url_id", "worker", "channel", "version")

# What the running code works on (per thread: Celery's threads each have their own).
_about: ContextVar[dict[str, object] | None] = ContextVar("crawl_log_about", default=None)
# What this process is: set once by a worker when it starts consuming.
_process: dict[str, object] = {}


def bind_process(**fields: object) -> None:
    """Name this process on every later line (``worker``, ``channel``, ``version``)."""
    _process.update(fields)


@contextmanager
def about(**fields: object) -> Iterator[None]:
    """Lines logged inside the block carry ``fields`` (``job_id``, ``url_id``)."""
    token = _about.set({**(_about.get() or {}), **fields})
    try:
        yield
    finally:
        _about.reset(token)


class ContextFilter(logging.Filter):
    """Adds the bound fields to each record the handler writes (a field the call passed in
    ``extra`` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_process | (_about.get() or {})).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def config(log_format: str, level: str) -> dict:
    """``LOGGING`` for Django's settings: one console handler in ``log_format``."""
    if log_format not in FORMATS:
        raise ValueError(f"LOG_FORMAT={log_format!r}: one of {', '.join(FORMATS)}")
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"about": {"()": ContextFilter}},
        "formatters": {
            "text": {"format": "%(asctime)s %(levelname)s %(processName)s %(name)s %(message)s"},
            "json": {
                "()": "pythonjsonlogger.json.JsonFormatter",
                "fmt": "%(asctime)s %(levelname)s %(processName)s %(name)s %(message)s",
                "rename_fields": {
                    "asctime": "time",
                    "levelname": "level",
                    "name": "logger",
                    "processName": "process",
                },
            },  # fmt: skip
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": log_format,
                "filters": ["about"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
    }
