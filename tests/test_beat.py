"""Celery beat as operators run it (``celery -A crawlplatform beat``): a real process on the
test database and Redis, stopped by SIGTERM as Kubernetes and Compose stop it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django_celery_beat.models import PeriodicTask

from tests.conftest import database_url, ended, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's table locks"),
]


def _waits_on_its_schedule() -> bool:
    """Whether a query of beat's on its schedule's change marker waits for a lock."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                       " AND datname = current_database()"
                       " AND query LIKE '%django_celery_beat_periodictasks%'")  # fmt: skip
        return cursor.fetchone()[0] > 0


def test_a_sigterm_while_beat_waits_on_a_query_stops_it_and_saves_its_schedule(
    worker_env, tmp_path
):
    """Beat's SIGTERM handler saves the schedule. Landing while beat's own query waits, that
    save once waited forever for the query's connection: beat never exited."""
    env = {**worker_env, "MAINTAIN_EVERY_S": "0.3", "PYTHONFAULTHANDLER": "1"}
    err = tmp_path / "beat.err"
    beat = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "crawlplatform", "beat", "--loglevel", "INFO"],
        cwd=settings.BASE_DIR, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=err.open("w"),
    )  # fmt: skip
    try:
        wait_for(lambda: err.read_text().count("Sending due task") >= 2, 90, "beat's sends")
        with psycopg.connect(database_url()) as blocker:
            blocker.execute("LOCK TABLE django_celery_beat_periodictasks IN ACCESS EXCLUSIVE MODE")
            wait_for(_waits_on_its_schedule, 30, "beat's read of its schedule to wait")
            beat.send_signal(signal.SIGTERM)
            time.sleep(1)  # the handler runs while the query waits
        try:
            beat.wait(timeout=30)
        except subprocess.TimeoutExpired:
            beat.send_signal(signal.SIGABRT)  # its threads' stacks, into beat.err
            beat.wait(timeout=30)
            pytest.fail(f"beat still ran 30 s after SIGTERM:\n{err.read_text()[-4000:]}")
    finally:
        ended(beat, 10)
    sent = err.read_text().count("Sending due task")
    # the sends since its start, saved on the way out (beat saves every 3 minutes otherwise)
    assert PeriodicTask.objects.get(name="maintain").total_run_count == sent
