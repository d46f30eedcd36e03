"""The broker: a connection's failure paths that must not stop a worker, and RabbitMQ's
queue depth, taking of queued messages and priorities."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator

import pytest
from django.conf import settings
from kombu import Connection, Exchange, Producer, Queue

import crawlplatform.celery  # noqa: F401 (installs the guard on kombu's Redis channel)
from tasks import broker, dispatch
from tasks.frontier import channels
from tests.chaos import RabbitServer
from web import health


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


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory) -> Iterator[str]:
    """A RabbitMQ node of the test's own; its URL."""
    if not RabbitServer.BIN.exists():
        pytest.skip(f"no RabbitMQ server at {RabbitServer.BIN}")
    node = RabbitServer(tmp_path_factory.mktemp("rabbitmq"))
    node.start()
    yield node.url
    node.stop()


def _crawl_message(
    producer: Producer, queue: Queue, url_id: int | list[int], job_id: int, prio: int
):
    """A crawl task's message as Celery writes it (protocol 2: body ``[args, kwargs, embed]``):
    ``fetch_url``'s for one URL id, ``fetch_urls``' for a list of them."""
    body = json.dumps([[url_id, job_id], {}, {"callbacks": None}])
    producer.publish(
        body, exchange=queue.exchange, routing_key=queue.routing_key, declare=[queue],
        serializer=None, content_type="application/json", content_encoding="utf-8",
        headers={"task": "tasks.fetch_urls" if isinstance(url_id, list) else "tasks.fetch_url",
                 "id": f"{url_id}"},  # fmt: skip
        priority=broker.message_priority(prio),
    )  # fmt: skip


def test_rabbitmq_queue_depth_and_taking_its_messages(rabbitmq, settings):
    """On RabbitMQ the ready count comes from the broker (unacked: unknown over AMQP), and
    a channel's queued messages are taken out whole, once: a second take finds none."""
    settings.CELERY_BROKER_URL = rabbitmq
    assert broker.is_amqp()
    queue = Queue("crawl.blue", Exchange("crawl.blue", "topic"), "crawl.blue",
                  queue_arguments={"x-queue-type": "quorum"})  # fmt: skip
    assert broker.depth("crawl.blue") == {"ready": 0, "unacked": None}  # not declared yet
    with Connection(rabbitmq, transport_options={"confirm_publish": True}) as conn:
        producer = Producer(conn)
        for url_id in range(1, 8):
            _crawl_message(producer, queue, url_id, 42, prio=url_id % 10)
        _crawl_message(producer, queue, [8, 9, 10], 42, prio=0)
        producer.publish("not json at all", routing_key="crawl.blue", exchange=queue.exchange,
                         serializer=None, content_type="text/plain")  # fmt: skip
    assert broker.depth("crawl.blue") == {"ready": 9, "unacked": None}
    assert channels.waiting(["crawl.blue"]) is None  # RabbitMQ's queues are not read in place
    taken = channels.take_messages("crawl.blue")
    assert sorted(taken) == [(url_id, 42) for url_id in range(1, 11)]  # the stray one left out
    assert broker.depth("crawl.blue")["ready"] == 0
    assert channels.take_messages("crawl.blue") == []


def test_priorities_are_written_for_the_broker(settings):
    """The platform's 0 (first) .. 9: Redis serves the lowest first, RabbitMQ the highest."""
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:6379/0"
    assert [broker.message_priority(p) for p in (0, 4, 9)] == [0, 4, 9]
    settings.CELERY_BROKER_URL = "amqp://guest:guest@127.0.0.1:5672//"
    assert [broker.message_priority(p) for p in (0, 4, 9)] == [9, 5, 0]


@pytest.mark.django_db
def test_every_view_of_the_queue_works_on_rabbitmq(rabbitmq, settings, admin_client, client):
    """/metrics, the health check, the fleet dashboard and the admin index count what the
    broker reports and say the in-flight figure is not counted rather than fail."""
    settings.CELERY_BROKER_URL = rabbitmq
    metrics = client.get("/metrics").content.decode()
    assert 'crawlplatform_broker_messages{state="ready"} 0.0' in metrics
    assert 'crawlplatform_broker_messages{state="unacked"}' not in metrics
    assert health.queue_backlog() == "0 ready, in flight not counted (limit 100000)"
    data = admin_client.get("/dashboard/data").json()
    assert data["values"]["ready"] == "0" and data["values"]["in_flight"] == "-", data
    assert "0 ready, - in flight" in admin_client.get("/admin/").content.decode()


def test_a_lua_script_redis_does_not_know_is_loaded_then_run_by_its_sha():
    token = uuid.uuid4().hex  # a script no Redis has seen (as after a restart or a flush)
    lua = broker.Lua(f"return {{KEYS[1], ARGV[1], '{token}'}}")
    assert broker.client().script_exists(lua.sha) == [False]
    assert lua(keys=["k"], args=["v"]) == [b"k", b"v", token.encode()]
    assert broker.client().script_exists(lua.sha) == [True]
    assert lua(keys=["k2"], args=[2]) == [b"k2", b"2", token.encode()]
    assert broker.script(lua.source) is broker.script(lua.source)  # made once per process


def test_a_redis_channel_keeps_one_client_while_its_pool_lasts():
    """kombu builds a client per acknowledgement; the channel keeps one, and a new pool (after
    a lost connection) gets a new client."""
    with Connection(settings.CELERY_BROKER_URL) as conn:
        channel = conn.default_channel
        first = channel._create_client()
        assert channel._create_client() is first
        assert first.ping()
        channel._pool = None  # what kombu does when the connection is lost
        second = channel._create_client()
        assert second is not first and second.connection_pool is channel.pool
        assert second.ping()


_RELEASE_ON_RABBITMQ = """
import json, django
django.setup()
from kombu import Connection
from django.conf import settings
from tasks import broker, dispatch
from tasks.frontier import jobs, reconcile, release, transitions
from tasks.frontier.pacing import Pacing
from web.models import FrontierURL

def drained():
    found = {}
    with Connection(settings.CELERY_BROKER_URL) as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(queue="crawl", no_ack=True)) is not None:
            url_id = json.loads(message.body)[0][0]
            found[url_id] = message.properties["priority"]
    return found

job = jobs.create_job(["http://127.0.0.1:9/"])
jobs.start(job)
transitions.insert_urls(job.pk, ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"], depth=1)
a, b = FrontierURL.objects.filter(job=job, depth=1).order_by("id")
FrontierURL.objects.filter(pk=a.pk).update(depth=5)
FrontierURL.objects.filter(pk=b.pk).update(depth=30)
depths = dict(FrontierURL.objects.filter(job=job).values_list("id", "depth"))
released = release.release(job, Pacing())[0]
first = drained()  # taken, never acknowledged by a worker: as good as lost
republished = reconcile.reconcile()
print(json.dumps({"depths": depths, "released": released, "republished": republished,
                  "first": first, "again": drained(), "amqp": broker.is_amqp()}))
"""


@pytest.mark.django_db(transaction=True)
def test_released_and_republished_urls_keep_their_priority_on_rabbitmq(rabbitmq, worker_env):
    """At depth 0, 5 and 30 a URL's message carries the priority release gives it
    (``dispatch.priority``), written as RabbitMQ's (highest first), when it is released and
    when reconcile publishes it again; never its depth."""
    import subprocess
    import sys

    env = {**os.environ, **worker_env, "CELERY_BROKER_URL": rabbitmq,
           "CRAWL_AMQP_QUEUE_TYPE": "classic", "CRAWL_SCHEDULED_STALE_S": "0"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", _RELEASE_ON_RABBITMQ], env=env, timeout=120,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["amqp"] and found["released"] == found["republished"] == 3
    expected = {i: 9 - dispatch.priority(depth, 0) for i, depth in found["depths"].items()}
    assert sorted(expected.values()) == [0, 4, 9]  # depth 30, 5, 0
    assert found["first"] == found["again"] == expected
