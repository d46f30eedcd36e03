"""Celery beat's scheduler: django-celery-beat's, schedules in the database, made safe to stop.

Beat's SIGTERM (and SIGINT) handler saves the schedule from inside the signal handler
(``celery.apps.beat``: ``service.sync()``, then ``SystemExit``). A signal that lands while
beat's main thread waits on a query (its schedule is read every tick) runs that save on the
same psycopg connection, whose lock the interrupted query holds: the save waits on it forever,
and beat never exits (until its supervisor's SIGKILL, losing the save). Here the save is
skipped while the connection is mid-command: the handler's ``SystemExit`` then unwinds the
query (psycopg cancels it) and ``Service.start`` saves once more on its way out, as it does
after every stop.
"""

from django.db import connection
from django_celery_beat.schedulers import DatabaseScheduler


def mid_command() -> bool:
    """Whether this process's database connection is running a command: a query on it now
    would wait for the one in progress. Only a signal handler can find its own thread so."""
    lock = getattr(connection.connection, "lock", None)  # psycopg's; SQLite has none
    return lock is not None and lock.locked()


class Scheduler(DatabaseScheduler):
    def close(self) -> None:
        if mid_command():
            return
        super().close()
