"""Completion webhooks: a job's ``webhook_url`` is called when the job finishes, fails or is
cancelled.

The call is a POST of a JSON summary, signed ``X-Crawl-Signature: sha256=<hex>`` (HMAC-SHA256
of the exact body with the job's ``webhook_secret``, as GitHub and Stripe sign theirs), with
``X-Crawl-Event`` (finished, failed or cancelled) and ``X-Crawl-Delivery`` (the same for every
attempt of one notification, so a receiver can drop repeats). It goes through the fetch
transport, so the address guard applies: a webhook cannot reach a private or internal address
that crawls may not reach either.

Delivery is a Celery task (acks-late: a worker that dies mid-call leaves it to another). One
call lasts ``WEBHOOK_DEADLINE_S`` at most, however slowly the receiver answers (its connection
is shut down then), and only the status line and headers of the answer are read. A 5xx, 408,
429 or no answer is tried again after ``WEBHOOK_RETRY_S``, doubling, up to ``WEBHOOK_ATTEMPTS``
calls; any other answer ends it, and so does an error of the platform's own (recorded as
``failed: ...``). The job's ``webhook_status`` says where it stands; a notification still
``pending`` after ``WEBHOOK_RESEND_S`` (its message was lost with the broker) is sent again by
the sweep, once per ``WEBHOOK_RESEND_S``, ``WEBHOOK_RESENDS`` times at most; then it is
recorded as failed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from datetime import timedelta
from typing import Any

import requests
from django.db import transaction
from django.utils import timezone

from tasks import broker, dispatch
from tasks.defaults import setting
from tasks.fetch import transport
from tasks.rules import guard
from web.models import CrawlJob, JobState

log = logging.getLogger(__name__)

EVENTS = {JobState.FINISHED: "finished", JobState.FAILED: "failed",
          JobState.CANCELLED: "cancelled"}  # fmt: skip
PENDING = "pending"
_AGAIN = {408, 429}  # besides 5xx: answers worth another attempt


class Retry(Exception):
    """This attempt did not get through; another may."""


def sign(secret: str, body: bytes) -> str:
    """The ``X-Crawl-Signature`` header value of ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def payload(job: CrawlJob) -> dict[str, Any]:
    """What the receiver gets: which job, how it ended, and its counters."""
    return {
        "event": EVENTS.get(job.state, job.state),
        "job": {"id": job.pk, "name": job.name, "state": job.state, "run": job.run,
                "owner": job.owner.get_username() if job.owner else None},
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "error": job.error,
        "stats": job.stats,
    }  # fmt: skip


def announce(job: CrawlJob) -> None:
    """Send ``job``'s webhook for the state it just reached (after the transaction commits)."""
    if not job.webhook_url or job.state not in EVENTS:
        return
    CrawlJob.objects.filter(pk=job.pk).update(webhook_status=PENDING)

    def send() -> None:
        try:
            dispatch.notify_job(job.pk, job.state, job.run)
        except Exception as exc:  # noqa: BLE001 (the sweep sends a pending one again)
            log.warning("job=%s webhook not queued (%s); the sweep sends it later", job.pk, exc)

    transaction.on_commit(send)


def resend_pending() -> int:
    """Notifications whose message never ran (lost with the broker): queued once more, at
    most once per ``WEBHOOK_RESEND_S`` each (the sweep runs every few seconds, and a message
    may only be waiting for a worker)."""
    every = setting("WEBHOOK_RESEND_S")
    now = timezone.now()
    pending = CrawlJob.objects.filter(webhook_status=PENDING, state__in=list(EVENTS))
    resends = setting("WEBHOOK_RESENDS")
    lost = pending.filter(finished_at__lt=now - timedelta(seconds=every * (resends + 1)))
    if given_up := lost.update(webhook_status=f"failed: not delivered after {resends} resends"):
        log.warning("%d webhook notifications given up after %d resends", given_up, resends)
    found = pending.filter(finished_at__lt=now - timedelta(seconds=every))
    n = 0
    for job in found:
        if broker.client().set(f"crawl:webhook:resent:{job.pk}", 1, nx=True, ex=int(every)):
            announce(job)
            n += 1
    return n


def _status(job_id: int, text: str) -> None:
    CrawlJob.objects.filter(pk=job_id).update(webhook_status=text[:300])


def deliver(job_id: int, state: str, run: int, attempt: int) -> None:
    """One call of the job's webhook; raises Retry when another attempt may get through. Every
    other way it ends is recorded in the job's ``webhook_status``."""
    try:
        _call(job_id, state, run, attempt)
    except Retry:
        raise
    except Exception as exc:  # noqa: BLE001 (never left pending: it would be resent for ever)
        _status(job_id, f"failed: {type(exc).__name__}: {exc}")
        log.exception("job=%s webhook failed", job_id)


def _call(job_id: int, state: str, run: int, attempt: int) -> None:
    job = CrawlJob.objects.select_related("owner").filter(pk=job_id).first()
    if job is None or not job.webhook_url or (job.state, job.run) != (state, run):
        return  # deleted, unhooked, or running again: this notification is out of date
    body = json.dumps(payload(job), sort_keys=True).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": setting("USER_AGENT"),
        "X-Crawl-Event": EVENTS[state],
        "X-Crawl-Delivery": f"job-{job_id}-run-{run}-{EVENTS[state]}",
        "X-Crawl-Signature": sign(job.webhook_secret, body),
        "Connection": "close",  # a connection of this call only: the deadline covers it
    }
    timeout, limit = setting("WEBHOOK_TIMEOUT_S"), setting("WEBHOOK_DEADLINE_S")
    started = time.monotonic()
    with transport.session(guard.allowed(job)) as session, transport.deadline(limit):
        try:
            answer = session.post(job.webhook_url, data=body, headers=headers, stream=True,
                                  timeout=(timeout, timeout), allow_redirects=False)  # fmt: skip
            answer.close()  # the body is not read: the status is the answer
            if time.monotonic() - started >= limit:  # cut mid-headers: no answer after all
                raise requests.Timeout(f"headers not complete after {limit:g} s")
        except (guard.BlockedAddress, ValueError, UnicodeError) as exc:
            _status(job_id, f"refused: {exc}")
            log.warning("job=%s webhook refused: %s", job_id, exc)
            return
        except requests.RequestException as exc:
            late = time.monotonic() - started >= limit
            why = f"no answer within {limit:g} s" if late else type(exc).__name__
            _status(job_id, f"attempt {attempt}: {why}")
            raise Retry(str(exc)) from None
    when = timezone.now().isoformat(timespec="seconds")
    if answer.status_code >= 500 or answer.status_code in _AGAIN:
        _status(job_id, f"attempt {attempt}: HTTP {answer.status_code} at {when}")
        raise Retry(f"HTTP {answer.status_code}")
    verdict = "delivered" if answer.ok else "rejected"
    _status(job_id, f"{verdict}: HTTP {answer.status_code} at {when}, attempt {attempt}")
    log.info("job=%s webhook %s: HTTP %s", job_id, verdict, answer.status_code)


def gave_up(job_id: int, attempts: int, why: str) -> None:
    _status(job_id, f"failed after {attempts} attempts: {why}")
    log.warning("job=%s webhook failed after %s attempts: %s", job_id, attempts, why)
