"""The Celery application: configuration comes from Django settings (``CELERY_*``)."""

import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")

EVENT_LOOP_TICK_S = 0.01  # longest idle gap of a threads-pool worker between two tasks

app = Celery("crawlplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def _add_heartbeat() -> None:
    from tasks.worker.heartbeat import Heartbeat

    app.steps["consumer"].add(Heartbeat)


_add_heartbeat()


@signals.worker_ready.connect
def _wake_threaded_event_loop(sender=None, **kwargs) -> None:
    """Bound the threads pool's idle gap between tasks.

    With the threads pool, a task finishing in a pool thread does not wake the worker's event
    loop, which then sleeps up to a second before it takes the next message: crawls stalled
    in one-second steps. A short repeating timer keeps the loop turning (celery/celery#6941).
    """
    pool = getattr(sender, "pool", None)
    if sender is not None and type(pool).__module__ == "celery.concurrency.thread":
        sender.timer.call_repeatedly(EVENT_LOOP_TICK_S, lambda: None)
