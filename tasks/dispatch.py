"""The one place that sends Celery tasks: by name, so that the engine and the scheduler never
import ``tasks/tasks.py`` (which imports them).

A crawl message is a :class:`Message`: the ids of one or a few URLs of one job, the
platform's priority 0-9 (0 first; :func:`priority` computes it from a URL's depth and
its job's priority) and the channel queue it goes to. Render tasks go to ``RENDER_QUEUE``,
one per URL. Every task is sent with ``ignore_result``: nothing reads a crawl task's result.
"""

from __future__ import annotations

from typing import NamedTuple

from celery import current_app
from django.conf import settings

from tasks import broker

FETCH_URL = "tasks.fetch_url"
FETCH_URLS = "tasks.fetch_urls"
RENDER_URL = "tasks.render_url"
NOTIFY_JOB = "tasks.notify_job"


class Message(NamedTuple):
    """One crawl message."""

    url_ids: list[int]  # URLs of one job, done in turn by the worker that takes the message
    job_id: int
    priority: int  # the platform's 0 (first) .. 9, written for the broker by broker.py
    queue: str  # the channel's Celery queue ("" for the default queue)


def priority(depth: int, job_priority: int) -> int:
    """A URL's message priority: seeds and shallow URLs first; a job's priority moves all its
    URLs ahead."""
    return max(0, min(9, depth - job_priority))


def publish(messages: list[Message], render: bool = False) -> None:
    """Send crawl ``messages`` in one batch; ``render``: as render tasks, one per URL."""
    if not messages:
        return
    app = current_app
    # One batch: on Redis, one pipeline for the whole release instead of a round trip per
    # message (kombu's Producer.batch; other transports publish each at once).
    with app.producer_or_acquire() as producer, producer.batch():
        for message in messages:
            options = {
                "priority": broker.message_priority(message.priority),
                "producer": producer,
                "ignore_result": True,
            }
            if render:
                for url_id in message.url_ids:
                    app.send_task(RENDER_URL, (url_id, message.job_id),
                                  queue=settings.RENDER_QUEUE, **options)  # fmt: skip
            elif len(message.url_ids) == 1:  # a task every worker version knows (upgrades)
                app.send_task(FETCH_URL, (message.url_ids[0], message.job_id),
                              queue=message.queue, **options)  # fmt: skip
            else:
                app.send_task(FETCH_URLS, (message.url_ids, message.job_id),
                              queue=message.queue, **options)  # fmt: skip


def notify_job(job_id: int, state: str, run: int) -> None:
    """Queue the delivery of ``job_id``'s webhook for ``state`` in its ``run``."""
    current_app.send_task(NOTIFY_JOB, (job_id, state, run), ignore_result=True)
