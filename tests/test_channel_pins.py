"""Channels nobody reads: a job is pinned only to a channel with online workers, a pinned job
whose workers are gone waits in the frontier instead of filling a queue nobody reads (release
and reconcile alike), a weighted channel without workers lends its share, and a pinned job's
attempts are not part of the canary's analysis. The scheduler never waits on Redis while it
holds row locks."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from django.contrib.auth.models import User
from django.db import connection

from tasks import broker
from tasks.frontier import canary, channels, jobs, reconcile, release, transitions
from tasks.frontier.pacing import Pacing
from tasks.worker import registry
from web.models import FrontierURL, URLState

pytestmark = pytest.mark.django_db(transaction=True)


def _online(redis, name: str, channel: str) -> None:
    """A worker of ``channel`` in the registry, as its heartbeat writes it."""
    registry.write(name, {
        "version": "1", "channel": channel, "queues": channels.queue(channel), "slots": 4,
        "pid": 1, "started": time.time(), "heartbeat": time.time(), "last_task": 0,
    }, 60)  # fmt: skip
    channels.served(cached=False)


def _gone(redis, name: str) -> None:
    registry.remove(name)
    channels.served(cached=False)


def test_a_job_is_pinned_only_to_a_channel_whose_workers_are_online(redis, client):
    with pytest.raises(jobs.JobError) as refused:
        jobs.create_job(["http://127.0.0.1:9/"], channel="ghost")
    assert "no online worker consumes channel 'ghost'" in refused.value.fields["channel"][0]
    staff = User.objects.create_user("ops", is_staff=True)
    client.force_login(staff)
    answer = client.post("/api/jobs/", {"seeds": ["http://127.0.0.1:9/"], "channel": "ghost"},
                         content_type="application/json")  # fmt: skip
    assert answer.status_code == 400
    assert "CRAWL_CHANNEL=ghost" in str(answer.json()["channel"])

    _online(redis, "canary-1", "canary")
    job = jobs.create_job(["http://127.0.0.1:9/"], channel="canary")
    assert job.channel == "canary"
    with pytest.raises(jobs.JobError):
        jobs.update(job, channel="ghost")


def test_a_pinned_job_without_workers_waits_in_the_frontier(redis):
    _online(redis, "canary-1", "canary")
    job = jobs.create_job(["http://127.0.0.1:9/"], channel="canary")
    jobs.start(job)
    transitions.insert_urls(job.pk, [f"http://127.0.0.1:9/{i}" for i in range(5)], depth=1)
    _gone(redis, "canary-1")
    released, hint = release.release(job, Pacing())
    assert released == 0 and hint is not None  # looked at again, not finished
    assert broker.depth("crawl.canary")["ready"] == 0
    assert set(FrontierURL.objects.filter(job=job).values_list("state", flat=True)) == {"queued"}

    # Released while its workers were online, then they went and the messages were lost:
    # reconcile puts the URLs back in the frontier rather than into the unread queue.
    ids = list(FrontierURL.objects.filter(job=job).values_list("id", flat=True))
    transitions.schedule(ids)
    assert reconcile.reconcile() == len(ids)
    assert broker.depth("crawl.canary")["ready"] == 0
    assert set(FrontierURL.objects.filter(job=job).values_list("state", flat=True)) == {"queued"}

    _online(redis, "canary-2", "canary")
    assert release.release(job, Pacing())[0] == len(ids)
    assert broker.depth("crawl.canary")["ready"] >= 1


def test_a_weighted_channel_without_workers_lends_its_share(redis):
    channels.set_weights({"blue": 50, "green": 50}, "test")
    hosts = [f"h{i}.example:80" for i in range(200)]
    assert {channels.route("", h, channels.weights()) for h in hosts} == {"crawl.blue",
                                                                          "crawl.green"}
    _online(redis, "blue-1", "blue")  # green has weight and no worker
    assert {channels.route("", h, channels.weights()) for h in hosts} == {"crawl.blue"}
    _online(redis, "green-1", "green")
    assert "crawl.green" in {channels.route("", h, channels.weights()) for h in hosts}


def test_a_pinned_jobs_attempts_are_not_counted_for_the_canary(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_CANARY_FLUSH_S", "0")
    # Attempts an earlier test of this process left in the buffer would be flushed with ours.
    monkeypatch.setattr(canary, "_pending", Counter())
    canary.count("failed", "http_503", False, 0.1, pinned=True)
    assert canary.window(channels.mine())["failed"] == 0
    canary.count("failed", "http_503", False, 0.1)
    assert canary.window(channels.mine())["failed"] == 1


def test_no_redis_call_waits_while_a_release_holds_row_locks(redis, monkeypatch):
    import redis as redis_module

    inside: list[str] = []
    plain = redis_module.Redis.execute_command
    piped = redis_module.client.Pipeline.execute

    def command(self, *args, **options):
        if connection.in_atomic_block:
            inside.append(str(args[0]))
        return plain(self, *args, **options)

    def pipeline(self, *args, **options):
        if connection.in_atomic_block:
            inside.append("pipeline")
        return piped(self, *args, **options)

    job = jobs.create_job(["http://a.test/"], allowed_domains=["a.test", "b.test"], delay=0.5,
                          max_pages_per_host=50, path_caps={"/x": 10})  # fmt: skip
    jobs.start(job)
    transitions.insert_urls(job.pk, [f"http://{h}.test/x{i}" for h in "ab" for i in range(9)],
                            depth=1)  # fmt: skip
    monkeypatch.setattr(redis_module.Redis, "execute_command", command)
    monkeypatch.setattr(redis_module.client.Pipeline, "execute", pipeline)
    released, _ = release.release(job, Pacing())
    assert released >= 2  # one per host at least: delays, circuits and caps were read
    assert inside == []
    assert FrontierURL.objects.filter(job=job, state=URLState.SCHEDULED).count() == released
