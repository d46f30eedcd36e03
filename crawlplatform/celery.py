"""The Celery application: configuration comes from Django settings (``CELERY_*``)."""

import logging
import os

from celery import Celery, signals
from redis.exceptions import RedisError

from crawlplatform import celerylog
from tasks.defaults import setting
from tasks.worker import heap, lifecycle

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")
# Celery's Django fix-up runs Django's system checks in every worker at start: a third of a
# second of CPU per process, spent loading the URL configuration and the admin, which a
# worker never serves. `migrate`, run by every deployment, runs the checks.
os.environ.setdefault("CELERY_SKIP_CHECKS", "true")
log = logging.getLogger(__name__)


app = Celery("crawlplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
celerylog.install(app)  # before anything is printed: a Celery program's lines are the platform's
app.autodiscover_tasks()


def _add_heartbeat() -> None:
    from tasks.worker import probes  # noqa: F401 (serves /livez and /readyz once ready)
    from tasks.worker.heartbeat import Heartbeat

    app.steps["consumer"].add(Heartbeat)


_add_heartbeat()


def _close_unless_orphaned(close):
    """Celery 5.7 handles a lost broker connection by collecting it (which detaches its
    transport: ``transport.client`` becomes None) and then closing it. A Redis channel that
    was waiting in BRPOP cannot finish closing in the first pass (Redis is gone), so the second
    pass tries to restore its unacknowledged messages through the detached transport and dies
    with ``AttributeError: 'NoneType' object has no attribute 'hostname'`` in kombu's
    ``_connparams``: an "Unrecoverable error" that stops the worker. Such a channel is closed
    without the restore: its messages stay in Redis's unacked set, which ``restore_visible``
    puts back after the visibility timeout, and the scheduler's reconcile re-publishes their
    URLs long before that (a duplicate is harmless: the claim decides)."""

    def closing(channel) -> None:
        transport = channel.connection
        if transport is not None and getattr(transport, "client", "") is None:
            channel.do_restore = False  # also for the restore kombu runs at exit
            channel.closed = True
            return
        _end_poll(channel)
        close(channel)

    return closing


def _end_poll(channel) -> None:
    """Before a Redis channel closes, end the BRPOP it is waiting in: kombu's close reads that
    poll's reply, which comes when the poll times out (a second), so a worker's warm stop
    waited for it (0.85-0.93 s at the end of every crawl). ``CLIENT UNBLOCK`` ends it at once
    as a timeout would: a message it had already taken still arrives, and is handled as kombu
    handles one at close. The poll's connection is the one of this worker's connections (they
    carry its name: ``_name_broker_connections``) that is running BRPOP; without a name, or
    if Redis cannot be asked, the poll ends at its timeout as before. Only for a worker that
    is stopping: a channel closed after a lost connection is left as it was."""
    name = getattr(channel, "client_name", None)
    if not name or not getattr(channel, "_in_poll", None) or not lifecycle.stopping.is_set():
        return
    try:
        client = channel._create_client()
        for each in client.client_list():
            if each.get("name") == name and each.get("cmd") == "brpop":
                client.execute_command("CLIENT UNBLOCK", each["id"])
    except RedisError as exc:
        log.info("the broker poll could not be ended early: %s", exc)


@signals.worker_init.connect
def _name_broker_connections(sender=None, **kwargs) -> None:
    """This worker's connections to a Redis broker carry a name of its own (``CLIENT
    SETNAME``), by which its stop finds its poll (``_end_poll``)."""
    from tasks import broker

    if sender is None or broker.is_amqp():
        return
    options = dict(app.conf.broker_transport_options or {})
    options.setdefault("client_name", f"crawl-worker:{sender.hostname}:{os.getpid()}")
    app.conf.broker_transport_options = options


def _one_client_per_pool(create):
    """kombu's Redis channel builds a new redis-py client for every message it marks unacked
    and every acknowledgement (``conn_or_acquire``), and redis-py's client copies its table of
    a few hundred reply callbacks when built: about a tenth of a worker's CPU on a broad crawl,
    where a message carries one URL (py-spy). A client holds nothing but its connection pool
    and options and is thread-safe, so the channel keeps the one it built while its pool is
    the same (kombu replaces the pool after a lost connection; a new client goes with it)."""

    def creating(channel, asynchronous=False):
        if asynchronous:
            return create(channel, asynchronous=True)
        client = channel.__dict__.get("_crawl_sync_client")
        if client is None or client.connection_pool is not channel.pool:
            client = channel._crawl_sync_client = create(channel)
        return client

    return creating


def _patch_redis_channel() -> None:
    from kombu.transport import redis as kombu_redis

    channel = kombu_redis.Channel
    if not getattr(channel.close, "guarded", False):
        channel.close = _close_unless_orphaned(channel.close)
        channel.close.guarded = True
    if not getattr(channel._create_client, "shared", False):
        channel._create_client = _one_client_per_pool(channel._create_client)
        channel._create_client.shared = True


_patch_redis_channel()


@signals.worker_ready.connect
def _trim_threaded_heap(sender=None, **kwargs) -> None:
    pool = getattr(sender, "pool", None)
    if sender is not None and type(pool).__module__ == "celery.concurrency.thread":
        heap.install(sender, setting("WORKER_HEAP_TRIM_S"))
