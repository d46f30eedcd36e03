"""A sentence instead of a traceback: a command that cannot reach Redis, the broker or the
database says what it tried and what to do, in one line on standard error, and exits 1.

``manage.py`` runs every command through :func:`explained`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings


def redacted(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=f"{user}{host}{port}"))


def _database() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"the database {db['NAME']}"
    return f"PostgreSQL at {db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}/{db['NAME']}"


def sentence(exc: BaseException) -> str | None:
    """What to tell a person about ``exc``, if it is a service out of reach (None: it is not)."""
    from django.db import DatabaseError, InterfaceError, OperationalError
    from kombu.exceptions import OperationalError as BrokerError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeout

    reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, RedisConnectionError | RedisTimeout):
        where = redacted(settings.REDIS_URL)
        if settings.EMBEDDED_REDIS:
            return (f"no Redis at {where} ({reason}): the embedded Redis runs only while "
                    "`manage.py crawl` does; start a crawl, or set REDIS_URL")  # fmt: skip
        return f"no Redis at {where} ({reason}): start it, or set REDIS_URL"
    if isinstance(exc, BrokerError):
        where = redacted(settings.CELERY_BROKER_URL)
        return f"no broker at {where} ({reason}): start it, or set CELERY_BROKER_URL"
    if isinstance(exc, DatabaseError) and ("no such table" in reason or "relation" in reason):
        return (f"{_database()} has no tables yet ({reason}): run `manage.py migrate` "
                "(a crawl does it by itself)")  # fmt: skip
    if isinstance(exc, OperationalError | InterfaceError):
        hint = ("unset DATABASE_URL for the embedded SQLite" if not settings.EMBEDDED_DATABASE
                else "check CRAWL_DATA_DIR")  # fmt: skip
        return f"cannot use {_database()} ({reason}): start it, or {hint}"
    return None


def explained(run: Callable[[], None], command: str) -> None:
    """Run ``run``; a service out of reach ends the process with one line and status 1."""
    try:
        run()
    except Exception as exc:
        told = sentence(exc)
        if told is None or "--traceback" in sys.argv:
            raise
        sys.stderr.write(f"manage.py {command}: {told}\n")
        sys.exit(1)
