"""The Celery application: configuration comes from Django settings (``CELERY_*``)."""

import os

from celery import Celery, signals

from tasks.worker import loop

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")

EVENT_LOOP_TICK_S = 0.01  # longest gap of a busy threads-pool worker's loop between two turns

app = Celery("crawlplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def _add_heartbeat() -> None:
    from tasks.worker.heartbeat import Heartbeat

    app.steps["consumer"].add(Heartbeat)


_add_heartbeat()


@signals.worker_ready.connect
def _tick_threaded_event_loop(sender=None, **kwargs) -> None:
    pool = getattr(sender, "pool", None)
    if sender is not None and type(pool).__module__ == "celery.concurrency.thread":
        loop.install(sender, EVENT_LOOP_TICK_S)
