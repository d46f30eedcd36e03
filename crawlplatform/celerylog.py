"""Celery's processes log as the platform's (``crawlplatform/logs.py``), and a task's lines
name the task and what it works on.

- A Celery program (``celery worker``, ``beat``, ``flower``) applies the platform's logging
  configuration as soon as it loads the app, before it prints anything, and, in JSON, sends
  its standard output and error through the relay (its banner, its shutdown messages);
  Celery itself configures no handler of its own (``setup_logging``), and ``--loglevel``
  sets the root level. A worker sends what its code prints to a logger as Celery does
  (``worker_redirect_stdouts``, at ``worker_redirect_stdouts_level``): a spider's ``print``
  is a line with its job and URL.
- From a task's start to its end (``task_prerun`` to ``task_postrun``) its lines carry its
  ``task_id``, and ``crawl_job`` and ``url_id`` where its arguments name ``job_id`` and
  ``url_id``; Celery's line for a task received (written before it starts) carries them too.
"""

from __future__ import annotations

import ast
import functools
import inspect
import logging
import os
import sys
import threading
from typing import Any

from celery import Celery, signals
from celery.utils.log import LoggingProxy, mlevel

from crawlplatform import logrelay, logs

PROGRAMS = ("worker", "beat", "flower")
# A task's parameter -> the field its value names on the task's lines.
ARGUMENTS = {"job_id": "crawl_job", "url_id": "url_id"}

# (task id, thread) -> the task's context token, from its prerun to its postrun
_tokens: dict[tuple[str, int], Any] = {}


def program() -> str:
    """The ``celery`` subcommand this process runs (``worker``, ...), or ``""``."""
    if "celery.bin.celery" not in sys.modules:
        return ""
    import click

    context = click.get_current_context(silent=True)
    return (context and context.find_root().invoked_subcommand) or ""


@functools.cache
def _parameters(task: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(task.run)
    except (TypeError, ValueError):
        return None


def task_fields(task: Any, args: Any, kwargs: Any) -> dict[str, Any]:
    """What a task's call is about: ``crawl_job``, ``url_id`` from its arguments."""
    signature = _parameters(task)
    if signature is None or not ARGUMENTS.keys() & signature.parameters.keys():
        return {}
    try:
        given = signature.bind_partial(*(args or ()), **(kwargs or {})).arguments
    except TypeError:
        return {}
    return {field: given[name] for name, field in ARGUMENTS.items()
            if isinstance(given.get(name), int)}  # fmt: skip


def _task_started(task_id: str = "", task: Any = None, args: Any = (), kwargs: Any = None,
                  **_: Any) -> None:  # fmt: skip
    token = logs.enter(task_id=task_id, **task_fields(task, args, kwargs))
    _tokens[task_id, threading.get_ident()] = token


def _task_ended(task_id: str = "", **_: Any) -> None:
    token = _tokens.pop((task_id, threading.get_ident()), None)
    if token is not None:
        logs.leave(token)


class Received(logging.Filter):
    """Celery's "Task ... received" line, written on the consumer before the task starts,
    with the task's fields read from its (represented) arguments."""

    def __init__(self, app: Celery) -> None:
        super().__init__()
        self.app = app

    def filter(self, record: logging.LogRecord) -> bool:
        data = getattr(record, "data", None)
        if not isinstance(data, dict) or "id" not in data:
            return True
        record.task_id = data["id"]
        task = self.app.tasks.get(data.get("name"))
        if task is not None and _parameters(task) is not None:
            try:
                args, kwargs = ast.literal_eval(data["args"]), ast.literal_eval(data["kwargs"])
            except (ValueError, SyntaxError, TypeError, KeyError, MemoryError, RecursionError):
                return True  # cut short (a long list of URLs): the task id says enough
            for field, value in task_fields(task, args, kwargs).items():
                setattr(record, field, value)
        return True


def _configured(loglevel: Any = None, **_: Any) -> None:
    """Celery's ``setup_logging``: the platform's configuration stands; only the level of
    ``--loglevel`` is taken."""
    if loglevel:
        logging.getLogger().setLevel(mlevel(loglevel))


class Printed(LoggingProxy):
    """Celery's proxy of a worker's standard output and error, a line at a time: a ``print``
    writes its parts, the spaces between them and its newline apart, each of which Celery's
    own proxy logs as a line of its own. Each thread's text waits for its newline (or a
    ``flush``), and its lines are logged as one record."""

    def __init__(self, logger: logging.Logger, loglevel: Any = None) -> None:
        super().__init__(logger, loglevel)
        self._pending = threading.local()

    def write(self, data: Any) -> int:
        text = getattr(self._pending, "text", "") + str(data)
        done, newline, rest = text.rpartition("\n")
        if len(rest) > logrelay.MAX_LINE:  # a writer that never ends its line
            done, newline, rest = text, "\n", ""
        self._pending.text = rest
        if newline:
            super().write(done)
        return len(data)

    def flush(self) -> None:
        text, self._pending.text = getattr(self._pending, "text", ""), ""
        if text:
            super().write(text)


def _redirected(sender: Any = None, instance: Any = None, **_: Any) -> None:
    """``celeryd_after_setup``: what Celery does when it configures logging itself
    (``Logging.redirect_stdouts``), a line at a time (``Printed``)."""
    if instance is not None and instance.redirect_stdouts:
        level = instance.redirect_stdouts_level
        sys.stdout = sys.stderr = Printed(logging.getLogger("celery.redirected"), level)
        os.environ.update(CELERY_LOG_REDIRECT="1", CELERY_LOG_REDIRECT_LEVEL=str(level or ""))


def install(app: Celery) -> None:
    """Connect the signals and the filter; configure a Celery program's logging now."""
    signals.setup_logging.connect(_configured, weak=False)
    signals.celeryd_after_setup.connect(_redirected, weak=False)
    signals.task_prerun.connect(_task_started, weak=False)
    signals.task_postrun.connect(_task_ended, weak=False)
    received = logging.getLogger("celery.worker.strategy")
    if not any(isinstance(f, Received) for f in received.filters):
        received.addFilter(Received(app))
    running = program()
    if running in PROGRAMS:
        from django.conf import settings
        from django.utils.log import configure_logging

        if logs.is_json(settings.LOGGING):  # one relay for both streams, named for the program
            logrelay.capture(1, 2, process=f"celery {running}")
        configure_logging(settings.LOGGING_CONFIG, settings.LOGGING)
