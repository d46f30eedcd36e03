"""Celery tasks: thin wrappers that take ids and call the engine.

``fetch_urls`` (the scheduler's message: one or a few URLs of a job) is acks-late and rejected
(requeued) if its worker dies, so a message is acknowledged only after its pages' effects
committed. Redelivery is harmless: the engine's claim is a compare-and-set on each URL's state.
A task that cannot reach the database before its claim is retried after ``DB_RETRY_S`` (a
short countdown, far below the visibility timeout).
"""

import logging

from celery import shared_task
from django.db import DatabaseError, close_old_connections, connection
from redis.exceptions import RedisError

from tasks import engine
from tasks.defaults import setting
from tasks.frontier import db, jobs, reconcile, webhooks
from tasks.worker import lifecycle
from web.models import CrawlJob

log = logging.getLogger(__name__)


def _run(task, url_ids: list[int], job_id: int, rendering: bool) -> None:
    close_old_connections()  # drop a connection that broke (database restart) or aged out
    try:
        engine.process_many(url_ids, job_id, rendering)
    except DatabaseError as exc:  # before the claim: the database is unreachable
        connection.close()
        raise task.retry(exc=exc, countdown=setting("DB_RETRY_S")) from None
    finally:
        db.lend_connection_back()  # an idle pool thread must not keep a connection
    lifecycle.touched_jobs.add(job_id)


# Crawl tasks: acknowledged after their effects commit, redelivered if their worker dies.
_CRAWL_TASK = {"bind": True, "acks_late": True, "reject_on_worker_lost": True,
               "ignore_result": True, "max_retries": None}  # fmt: skip


@shared_task(name="tasks.fetch_urls", **_CRAWL_TASK)
def fetch_urls(self, url_ids: list[int], job_id: int) -> None:
    """Fetch the URLs of one message, one after another (``engine.process_many``)."""
    _run(self, url_ids, job_id, rendering=False)


@shared_task(name="tasks.fetch_url", **_CRAWL_TASK)
def fetch_url(self, url_id: int, job_id: int) -> None:
    """One URL's message, as published before ``fetch_urls`` (still in a queue at upgrade)."""
    _run(self, [url_id], job_id, rendering=False)


@shared_task(name="tasks.render_url", **_CRAWL_TASK)
def render_url(self, url_id: int, job_id: int) -> None:
    """The same pipeline with headless Chromium for the fetch (render workers, ``render``
    queue: ``celery -A crawlplatform worker --queues render --pool prefork --concurrency 2``)."""
    _run(self, [url_id], job_id, rendering=True)


@shared_task(name="tasks.recrawl_job", ignore_result=True)
def recrawl_job(job_id: int) -> None:
    """Run an ended job again (its schedule, through celery beat; ``tasks/frontier/
    schedules.py``). A job still running, or paused, is left alone until its next time."""
    close_old_connections()
    job = CrawlJob.objects.filter(pk=job_id).first()
    if job is None:
        log.warning("recrawl: no job %s (its schedule outlived it)", job_id)
    elif not jobs.recrawl(job):
        log.info("recrawl: job %s is %s; its schedule waits for the next time", job_id, job.state)


@shared_task(name="tasks.notify_job", bind=True, acks_late=True, reject_on_worker_lost=True,
             ignore_result=True, max_retries=None)  # fmt: skip
def notify_job(self, job_id: int, state: str, run: int) -> None:
    """Call a job's completion webhook (``tasks/frontier/webhooks.py``), again after a 5xx or
    no answer, ``WEBHOOK_RETRY_S`` doubling, up to ``WEBHOOK_ATTEMPTS`` calls."""
    close_old_connections()
    attempt = self.request.retries + 1
    try:
        webhooks.deliver(job_id, state, run, attempt)
    except webhooks.Retry as exc:
        if attempt >= setting("WEBHOOK_ATTEMPTS"):
            webhooks.gave_up(job_id, attempt, str(exc))
            return
        wait = setting("WEBHOOK_RETRY_S") * 2 ** (attempt - 1)
        raise self.retry(countdown=wait) from None


@shared_task(name="tasks.maintain", ignore_result=True)
def maintain() -> None:
    """Sweep expired leases and re-publish lost messages (Celery beat runs it periodically).

    Safe to run in several places at once: the sweep is conditional UPDATEs, and a message
    published twice is harmless. With the database or Redis away it logs one line and waits
    for its next run.
    """
    close_old_connections()
    try:
        reconcile.sweep()
    except (DatabaseError, RedisError) as exc:
        connection.close()
        log.warning("maintain: database or Redis unavailable (%s); next run retries", exc)
