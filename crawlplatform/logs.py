"""Log lines that say what they are about, and the logging configuration of every process.

A line carries what the code writing it works on (``FIELDS``: the ``crawl_job``, the
``url_id`` and ``url``, the Celery ``task_id``, the ``spider``), bound in context variables
by whoever starts that work (``about``, ``enter``/``leave``, ``about_job``): a Celery task
from start to end (``crawlplatform/celerylog.py``), the engine for each URL, the scheduler
for each job, a job's start, the web process for an API call about a job. Call sites do not
pass them (a message may still say ``job=3``); a thread the work hands a call to gets them
only if it is run in a copy of the context (``contextvars.copy_context().run``). A worker
adds its ``worker``, ``channel`` and ``version`` to every line once it consumes
(``bind_process``).

``LOG_FORMAT`` chooses the format: ``text`` (the default, for people: a terminal, the crawl
command), with the job and URL shown as ``job=3 url_id=17`` where the message does not say
them already; or ``json``: one JSON object a line (``JsonFormatter``, the field set of
``docs/operations.md``) from every process, whatever it writes: ``configure`` (Django's
``LOGGING_CONFIG``) also sends Python warnings, uncaught exceptions (of any thread) and
standard error through it, and services send standard output too
(``crawlplatform/logrelay.py``). ``LOG_LEVEL`` is the root level.
"""

from __future__ import annotations

import functools
import logging
import logging.config
import math
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, TypeVar

from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

from crawlplatform import logrelay

FORMATS = ("text", "json")
FIELDS = ("crawl_job", "url_id", "url", "task_id", "spider")

# What the running code works on (per thread: Celery's threads each have their own).
_about: ContextVar[dict[str, object] | None] = ContextVar("crawl_log_about", default=None)
# What this process is: set once by a worker when it starts consuming.
_process: dict[str, object] = {}

F = TypeVar("F", bound=Callable[..., Any])


def _forget_work() -> None:
    _about.set(None)


# A forked child (a worker the crawl command forks, a pool's process) does work of its own.
os.register_at_fork(after_in_child=_forget_work)


def bind_process(**fields: object) -> None:
    """Name this process on every later line (``worker``, ``channel``, ``version``)."""
    _process.update(fields)


def enter(*, crawl_job: int | None = None, url_id: int | None = None, url: str | None = None,
          task_id: str | None = None, spider: str | None = None) -> Token:
    """Lines logged from now on in this context carry these fields (those given, not empty)
    as well as those bound before; ``leave`` with the token ends it."""
    given = {"crawl_job": crawl_job, "url_id": url_id, "url": url, "task_id": task_id,
             "spider": spider}  # fmt: skip
    fields = {key: value for key, value in given.items() if value is not None and value != ""}
    return _about.set({**(_about.get() or {}), **fields})


def leave(token: Token) -> None:
    _about.reset(token)


@contextmanager
def about(**fields: Any) -> Iterator[None]:
    """Lines logged inside the block carry ``fields`` (``enter``'s)."""
    token = enter(**fields)
    try:
        yield
    finally:
        leave(token)


def about_job(operation: F) -> F:
    """``operation(job, ...)``'s lines carry the job (and its spider)."""

    @functools.wraps(operation)
    def run(job: Any, *args: Any, **kwargs: Any) -> Any:
        with about(crawl_job=job.pk, spider=getattr(job, "spider", None)):
            return operation(job, *args, **kwargs)

    return run  # type: ignore[return-value]


def bound() -> dict[str, object]:
    """The fields a line logged here and now would carry."""
    return _process | (_about.get() or {})


class ContextFilter(logging.Filter):
    """Adds the bound fields to each record the handler writes (a field the call passed in
    ``extra`` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in bound().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class TextFormatter(logging.Formatter):
    """A line for people, ``job=3 url_id=17`` before the message where it does not say them."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        tags = []
        job, url_id = getattr(record, "crawl_job", None), getattr(record, "url_id", None)
        url = getattr(record, "url", None)
        if job is not None and f"job={job}" not in record.message:
            tags.append(f"job={job}")
        if url_id is not None and (url is None or url not in record.message):
            tags.append(f"url_id={url_id}")
        record.about = " ".join(tags) + " " if tags else ""
        return super().formatMessage(record)


# A request about one job (the API's and the dashboard's), as its path says it.
JOB_PATH = re.compile(r"/(?:api|dashboard)/jobs/(\d+)(?:/|$)")
# Fields of gunicorn's access line (its atoms) that a JSON line names.
ACCESS_FIELDS = {"h": "remote", "m": "method", "U": "path", "q": "query", "s": "status",
                 "B": "bytes", "M": "duration_ms", "a": "user_agent"}  # fmt: skip


# The characters a line's message or traceback keeps: a line stays one line for the relay
# (``logrelay.MAX_LINE`` bytes) and for a collector's limits.
FIELD_MAX_CHARS = 65536


class JsonFormatter(_JsonFormatter):
    """One JSON object a line: ``timestamp`` (ISO 8601, UTC), ``level``, ``logger``,
    ``message``, ``process``, ``pid``, ``thread``, then what the line is about and what the
    call added (``extra``), ``exc_info`` with the traceback; a gunicorn access line also has
    its request's fields (``ACCESS_FIELDS``). A message or traceback past ``FIELD_MAX_CHARS``
    is cut there, its length in ``message_chars`` or ``exc_info_chars``; a number JSON has no
    spelling for (NaN, infinity) is its text."""

    def __init__(self) -> None:
        super().__init__(
            ["levelname", "name", "message", "processName", "process", "threadName"],
            rename_fields={"levelname": "level", "name": "logger", "processName": "process",
                           "process": "pid", "threadName": "thread"},  # fmt: skip
        )

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord,
                   message_dict: dict[str, Any]) -> None:  # fmt: skip
        log_data["timestamp"] = logrelay.timestamp(record.created)
        super().add_fields(log_data, record, message_dict)
        if record.name == "gunicorn.access" and isinstance(record.args, dict):
            for atom, field in ACCESS_FIELDS.items():
                value = dict.get(record.args, atom)
                if value not in (None, "", "-"):
                    log_data[field] = int(value) if field == "status" else value
            about = JOB_PATH.match(str(log_data.get("path", "")))
            if about is not None:  # written once the request is over: its path says its job
                log_data.setdefault("crawl_job", int(about.group(1)))
        for field in ("message", "exc_info"):
            value = log_data.get(field)
            if isinstance(value, str) and len(value) > FIELD_MAX_CHARS:
                log_data[field], log_data[f"{field}_chars"] = value[:FIELD_MAX_CHARS], len(value)
        for field, value in log_data.items():
            if isinstance(value, float) and not math.isfinite(value):
                log_data[field] = str(value)


class ConsoleHandler(logging.StreamHandler):
    """Standard error's handler, which a signal handler may log through.

    A signal handler runs in the main thread in the middle of whatever it interrupted, this
    handler's own write included: a write blocked on a full pipe (a log relay or collector
    that lags) holds the stream's buffer, and a second write into it from the same thread
    raises "reentrant call" instead of writing. A handler that logs before it exits (Flower's
    on SIGTERM) then never exits, and the process runs on. A record logged while this thread
    is inside one of this handler's writes goes to the descriptor itself, past the held
    buffer (after the lines already written, before the one being written).

    A JSON line longer than a pipe takes whole goes to a relay in pieces (``logrelay.pieces``),
    which it puts together: the children of a prefork pool write to one pipe, and one's long
    line would otherwise be cut into by another's."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._writing = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self._writing, "now", False):
            self._write_past_buffer(record)
            return
        self._writing.now = True
        try:
            if isinstance(self.formatter, JsonFormatter):
                self._emit_json(record)
            else:
                super().emit(record)
        finally:
            self._writing.now = False

    def _emit_json(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            if len(line) > logrelay.PIECE_BYTES // 4:
                data = line.encode("utf-8", "replace")
                fd = self._relay()
                if len(data) > logrelay.PIECE_BYTES and fd is not None:
                    self.flush()
                    for piece in logrelay.pieces(data):
                        while piece:
                            piece = piece[os.write(fd, piece) :]
                    return
            self.stream.write(line + self.terminator)
            self.flush()
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 (logging's own way: handleError reports it)
            self.handleError(record)

    def _relay(self) -> int | None:
        """The descriptor the stream writes to, if it goes to a relay."""
        try:
            fd = self.stream.fileno()
        except (OSError, ValueError, AttributeError):  # not a file's stream, or closed
            return None
        return fd if logrelay.to_relay(fd) else None

    def _write_past_buffer(self, record: logging.LogRecord) -> None:
        try:
            data = (self.format(record) + self.terminator).encode("utf-8", "replace")
            fd = self.stream.fileno()
            while data:
                data = data[os.write(fd, data) :]
        except Exception:  # noqa: BLE001 (the interrupted write holds the stream: no report)
            return  # the record is lost, not the signal handler's next step (its exit)


TEXT = "%(asctime)s %(levelname)s %(processName)s %(name)s %(about)s%(message)s"


def config(log_format: str, level: str) -> dict:
    """``LOGGING`` for Django's settings: one console handler (standard error) in
    ``log_format``; in JSON gunicorn's loggers write through it too (in text they keep their
    own lines)."""
    if log_format not in FORMATS:
        raise ValueError(f"LOG_FORMAT={log_format!r}: one of {', '.join(FORMATS)}")
    through_root = {"handlers": [], "propagate": True}
    gunicorn = {"gunicorn.error": through_root, "gunicorn.access": through_root}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"about": {"()": ContextFilter}},
        "formatters": {"text": {"()": TextFormatter, "fmt": TEXT},
                       "json": {"()": JsonFormatter}},  # fmt: skip
        "handlers": {
            "console": {
                "class": "crawlplatform.logs.ConsoleHandler",
                "formatter": log_format,
                "filters": ["about"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": gunicorn if log_format == "json" else {},
    }


def is_json(logging_config: dict) -> bool:
    return logging_config["handlers"]["console"]["formatter"] == "json"


def configure(logging_config: dict) -> None:
    """Apply ``logging_config`` (``config``'s; Django's ``LOGGING_CONFIG`` calls this). In
    JSON, Python warnings and uncaught exceptions are log lines too, and standard error goes
    through a relay (``logrelay``) that makes every line of it a JSON object."""
    logging.config.dictConfig(logging_config)
    if not is_json(logging_config):
        return
    logging.captureWarnings(True)
    sys.excepthook = _uncaught
    threading.excepthook = _uncaught_in_thread
    logrelay.capture(2)


uncaught = logging.getLogger("uncaught")


def _uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    uncaught.critical("uncaught %s: %s", kind.__name__, exc, exc_info=(kind, exc, tb))


def _uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else f"id {threading.get_ident()}"
    uncaught.error("uncaught %s in thread %s: %s", args.exc_type.__name__, name, args.exc_value,
                   exc_info=(args.exc_type, args.exc_value, args.exc_traceback))  # fmt: skip


def json_configured() -> bool:
    """Whether this process logs JSON lines (``configure`` applied ``LOG_FORMAT=json``)."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def service(process: str = "") -> None:
    """A service's standard output is a log too (the scheduler's, a worker's the crawl command
    forks; Celery's programs and gunicorn ask ``logrelay`` themselves): in JSON it goes through
    the relay with standard error. A command's standard output is its result (``export -o
    -``): left alone."""
    if json_configured():
        logrelay.capture(1, 2, process=process)
