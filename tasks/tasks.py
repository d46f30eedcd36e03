"""Celery tasks: thin wrappers that take ids and call the engine.

``fetch_url`` is acks-late and rejected (requeued) if its worker dies, so a page's message is
acknowledged only after its effects committed. Redelivery is harmless: the engine's claim is a
compare-and-set on the URL's state.
"""

from celery import shared_task
from django.db import close_old_connections

from tasks import engine


@shared_task(name="tasks.fetch_url", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def fetch_url(url_id: int, job_id: int) -> None:
    close_old_connections()  # drop a connection that broke (database restart) or aged out
    engine.process(url_id, job_id)
