"""The broker connection's failure paths that must not stop a worker."""

from __future__ import annotations

from django.conf import settings
from kombu import Connection

import crawlplatform.celery  # noqa: F401 (installs the guard on kombu's Redis channel)


def test_a_channel_of_a_detached_transport_closes_without_crashing_the_worker(redis_server):
    """Celery 5.7's recovery from a lost connection detaches the transport, then closes the
    channel again: with unacknowledged messages, kombu would restore them through the
    detached transport and raise AttributeError (an unrecoverable worker error)."""
    conn = Connection(settings.CELERY_BROKER_URL)
    channel = conn.default_channel
    channel.qos._delivered["lost-with-the-connection"] = None
    conn.transport.client = None  # what Connection.collect() leaves behind
    channel.close()
    assert channel.closed
