"""Reconcile and sweep: the books the scheduler keeps besides releasing.

Every ``SWEEP_INTERVAL_S`` the scheduler (and Celery beat, ``tasks.tasks.maintain``) returns
expired leases to the queue, sends pending webhook notifications again, and re-publishes
scheduled URLs whose messages are gone (Redis flushed) or stuck (reserved by a worker that
died) once they have waited ``SCHEDULED_STALE_S``.

Reads ``SCHEDULED_STALE_S``.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from django.conf import settings
from django.utils import timezone

from tasks import broker
from tasks.defaults import setting
from tasks.dispatch import Message, priority, publish
from tasks.frontier import channels, requeue, transitions, webhooks
from web.models import FrontierURL, URLState

log = logging.getLogger(__name__)


class Stale(NamedTuple):
    """A scheduled URL as reconcile reads it, to publish its message again."""

    id: int
    job_id: int
    depth: int
    error_reason: str  # ``render_queued``: a worker handed it to the render queue
    host: str
    channel: str  # its job's channel: which channel queue the message goes to
    job_priority: int  # its job's priority, which moves the message's priority ahead


def reconcile() -> int:
    """Re-publish scheduled URLs whose messages are gone or stuck; returns how many.

    Every SCHEDULED row is in a message (one message may carry several). When the broker's
    ready messages carry fewer URLs than there are scheduled rows, some messages are lost
    (Redis flushed) or reserved by a worker that died (they come back only after the
    visibility timeout); the oldest rows not in a ready message that have waited
    ``SCHEDULED_STALE_S`` are published again. On Redis the ready messages are read in place;
    RabbitMQ only counts them (and not the reserved ones), so there the rows that waited that
    long are published again, up to the difference. A duplicate message is harmless (the claim
    is a compare-and-set), and a flushed broker holds no reserved ones at all, so after a flush
    every scheduled row is published again at once.
    """
    scheduled = FrontierURL.objects.filter(state=URLState.SCHEDULED)
    expected = scheduled.count()
    if not expected:
        return 0
    held = broker.depth()  # unacked: every queue's
    queues = [*channels.queues(), settings.RENDER_QUEUE]
    waiting = channels.waiting(queues)  # URLs of the ready messages; None: cannot be read
    if waiting is None:
        missing = expected - sum(broker.depth(q)["ready"] for q in queues)
    else:
        missing = expected - len(waiting & set(scheduled.values_list("id", flat=True)))
    if missing <= 0:
        return 0
    if held["unacked"] != 0:  # some may be reserved by workers: only those that waited too long
        stale = timezone.now() - timezone.timedelta(seconds=setting("SCHEDULED_STALE_S"))
        scheduled = scheduled.filter(scheduled_at__lt=stale)
    found = scheduled.order_by("scheduled_at").values_list(
        "id", "job_id", "depth", "error_reason", "host", "job__channel", "job__priority"
    )[: missing + len(waiting or ())]
    rows = [r for r in map(Stale._make, found) if not waiting or r.id not in waiting][:missing]
    if not rows:
        return 0
    split, live = channels.weights(cached=False), channels.served(cached=False)
    messages = [
        Message(
            [r.id],
            r.job_id,
            priority(r.depth, r.job_priority),
            channels.route(r.channel, r.host, split),
        )
        for r in rows
    ]
    pairs, idle = [], []
    for message, row in zip(messages, rows, strict=True):
        target = channels.of_queue(message.queue)
        rendering = row.error_reason == transitions.RENDER_QUEUED
        if target == channels.DEFAULT or target in live or rendering:
            pairs.append((message, row))
        else:
            idle.append(row.id)
    if idle:  # nobody reads that queue: the frontier keeps them, for when its workers are back
        requeue.requeue_scheduled(idle)
        log.warning("reconcile: %d scheduled URLs of channels without online workers back in "
                    "the frontier", len(idle))  # fmt: skip
    FrontierURL.objects.filter(pk__in=[r.id for _, r in pairs]).update(scheduled_at=timezone.now())
    publish([m for m, r in pairs if r.error_reason != transitions.RENDER_QUEUED])
    publish([m for m, r in pairs if r.error_reason == transitions.RENDER_QUEUED], render=True)
    log.warning("reconcile: re-published %d scheduled URLs whose messages were lost or stuck",
                len(pairs))  # fmt: skip
    return len(rows)


def sweep() -> int:
    """Expired leases back to the queue, lost messages published again (also run by beat)."""
    swept = requeue.reclaim_expired()
    if swept:
        log.warning("sweep: %d expired leases returned to the queue (or failed)", swept)
    if resent := webhooks.resend_pending():
        log.warning("sweep: %d webhook notifications sent again", resent)
    return swept + reconcile()
