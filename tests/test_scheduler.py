"""The scheduler against the real database and Redis."""

from __future__ import annotations

import base64
import json
import threading
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from tasks import broker, dispatch
from tasks.defaults import setting
from tasks.frontier import (
    channels,
    jobs,
    leadership,
    reconcile,
    release,
    requeue,
    scheduler,
    transitions,
    wakeup,
)
from tasks.frontier.pacing import Flow, Pacing, SlotTime
from tasks.worker import registry
from tests.conftest import wait_for
from web.models import CrawlJob, FrontierURL, JobState, URLState

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pacing() -> Pacing:
    """A scheduler's memory of its passes, as the one a Scheduler owns."""
    return Pacing()


def make_job(urls: int, **fields):
    job = jobs.create_job(["http://127.0.0.1:9/"], **fields)
    jobs.start(job)
    transitions.insert_urls(job.pk, [f"http://127.0.0.1:9/{i}" for i in range(urls)], depth=1)
    return job


def test_release_is_bounded_by_the_ready_budget_and_publishes_after_commit(
    redis, monkeypatch, pacing
):
    monkeypatch.setenv("CRAWL_READY_MIN", "10")
    job = make_job(30)
    assert release.release(job, pacing)[0] == 10
    assert release.release(job, pacing)[0] == 0  # ten messages already wait
    assert broker.depth() == {"ready": 10, "unacked": 0}
    scheduled = FrontierURL.objects.filter(job=job, state=URLState.SCHEDULED)
    assert list(scheduled.values_list("depth", flat=True)) == [0] + [1] * 9  # seeds first


def test_the_broker_holds_what_workers_take_in_the_lookahead_within_bounds(monkeypatch):
    monkeypatch.setenv("CRAWL_READY_MIN", "8")
    monkeypatch.setenv("CRAWL_READY_PER_JOB", "100")
    monkeypatch.setenv("CRAWL_DISPATCH_LOOKAHEAD_S", "0.03")
    job = jobs.create_job(["http://127.0.0.1:9/"])
    flow, now, outstanding = Flow(), 0.0, 0
    assert flow.ready_target(job, outstanding, now) == 8  # nothing known yet: the floor
    assert flow.ready_target(job, outstanding, now, size=4) == 32  # eight messages of four
    assert flow.ready_target(job, outstanding, now, size=4, slots=16) == 32
    assert flow.ready_target(job, outstanding, now, size=4, slots=64) == 128  # one per 2 slots

    def run(taken_per_pass: int, passes: int) -> int:
        nonlocal now, outstanding
        for _ in range(passes):
            outstanding = max(0, outstanding - taken_per_pass)
            now += 0.01
            target = flow.ready_target(job, outstanding, now)
            outstanding = max(outstanding, target)  # the pass tops the broker up
            flow.released(job.pk, outstanding, now)
        return target

    assert run(10, 300) == 30  # 1,000 messages/s taken: 30 ms of them wait
    assert flow.busy(now)
    assert run(100, 300) == 100  # 10,000/s would want 300: capped by READY_PER_JOB
    assert run(0, 500) == 8  # workers stopped taking: back to the floor
    assert not flow.busy(now)
    run(10, 100)
    assert flow.busy(now) and not flow.busy(now + 2)  # only jobs that took messages lately


def test_ready_messages_double_while_the_broker_runs_dry_and_settle_after(monkeypatch):
    """A new crawl: its workers take all they are given at every pass. What may wait grows
    twofold per pass up to READY_PER_JOB, and falls back once the broker no longer runs dry;
    a URL for each slot is there from the first pass."""
    monkeypatch.setenv("CRAWL_READY_MIN", "8")
    monkeypatch.setenv("CRAWL_READY_PER_JOB", "100")
    job = jobs.create_job(["http://127.0.0.1:9/"])
    flow, now, targets = Flow(), 0.0, []
    assert flow.ready_target(job, 0, now, slots=16) == 16
    for _ in range(7):
        now += 0.1
        targets.append(flow.ready_target(job, 0, now))  # all of it was taken
        flow.released(job.pk, targets[-1], now)
    assert targets == [8, 16, 32, 64, 100, 100, 100]
    now += 0.1
    assert flow.ready_target(job, 50, now) < 100  # half of it left: not dry any more


def test_a_new_job_with_more_due_than_released_passes_again_within_a_tick(redis, pacing):
    """Its first pass measures no rate yet: the next comes after a tick, not at the sweep."""
    job = make_job(30)
    _register_worker(redis, pacing, slots=4)
    released, hint = release.release(job, pacing)
    assert 0 < released < 31
    assert hint is not None and hint <= setting("SCHEDULER_TICK_S")


def _register_worker(redis, pacing: Pacing, slots: int) -> None:
    """A crawl worker in the registry, as its heartbeat writes it."""
    fields = {"heartbeat": time.time(), "queues": "crawl", "slots": slots}
    registry.write("test@host", fields, 60)
    pacing.slots_read[0] = -setting("SLOTS_CACHE_S")  # read the registry again


def _message_sizes() -> list[int]:
    return sorted(len(channels.task_urls(body)) for body in broker.peek("crawl"))


def test_fast_pages_share_messages_and_slow_pages_go_one_by_one(redis, monkeypatch, pacing):
    monkeypatch.setenv("CRAWL_DISPATCH_BATCH", "4")
    monkeypatch.setenv("CRAWL_DISPATCH_BATCH_S", "0.25")
    job = make_job(30)
    _register_worker(redis, pacing, slots=4)
    assert release.release(job, pacing)[0] == 8  # the job's pace is not known yet: one per message
    assert _message_sizes() == [1] * 8
    redis.delete(*broker.priority_lists("crawl"))
    FrontierURL.objects.filter(job=job, state=URLState.SCHEDULED).update(state=URLState.DONE)
    pacing.flow.last.pop(job.pk)  # the pace is set here, not measured from these passes
    pacing.flow.rate[job.pk] = 10.0  # slow: 2.5 pages/s per slot, 0.6 of one in 0.25 s
    assert release.release(job, pacing)[0] == 8
    assert _message_sizes() == [1] * 8
    redis.delete(*broker.priority_lists("crawl"))
    FrontierURL.objects.filter(job=job, state=URLState.SCHEDULED).update(state=URLState.DONE)
    pacing.flow.last.pop(job.pk)
    pacing.flow.rate[job.pk] = 100.0  # fast: 25 pages/s per slot, 6 in 0.25 s, at most 4
    assert release.release(job, pacing)[0] == 15  # all that is left (READY_MIN messages of 4: 32)
    assert _message_sizes() == [3] * 5  # not [3, 4, 4, 4]: a message for each slot, and more
    assert reconcile.reconcile() == 0  # every scheduled URL is in a ready message
    redis.delete(*broker.priority_lists("crawl"))  # lost: each is published again
    assert reconcile.reconcile() == 15
    assert _message_sizes() == [1] * 15


def test_the_slot_time_workers_report_sizes_messages_from_a_crawls_first_passes(
    redis, monkeypatch, pacing
):
    """No rate is measured yet (a crawl's first second, when not every slot is busy): the
    seconds the workers' slots spent per URL size the messages, and never so large that one
    of the slots would have none."""
    monkeypatch.setenv("CRAWL_DISPATCH_BATCH", "4")
    monkeypatch.setenv("CRAWL_DISPATCH_BATCH_S", "0.25")
    job = make_job(30)
    _register_worker(redis, pacing, slots=4)
    wakeup.nudge(job.pk, 0.02, 1)  # the seed, fast: fewer URLs than slots say little yet
    assert pacing.pace_per_slot(job) == (1, 0.0)
    wakeup.nudge(job.pk, 0.18, 9)  # a worker's message: 20 ms a URL, 12 in 0.25 s, at most 4
    assert pacing.pace_per_slot(job) == (4, pytest.approx(0.02))
    assert release.release(job, pacing)[0] == 31  # READY_MIN messages of 4: 32
    assert _message_sizes() == [1, 2] + [4] * 7  # the seed: a priority of its own
    redis.delete(*broker.priority_lists("crawl"))
    few = make_job(5)
    wakeup.nudge(few.pk, 0.2, 10)
    assert release.release(few, pacing)[0] == 6
    assert _message_sizes() == [1] * 6  # six URLs, four slots: one each, as at a crawl's end


def test_a_jobs_slot_time_is_smoothed_over_its_reports_and_begun_again_when_forgotten(redis):
    slot_time = SlotTime()
    assert slot_time.read(1) is None  # no worker has reported
    slot_time.take(1, 2.0, 100)
    assert slot_time.seconds[1] == pytest.approx(0.02)  # the first report, as it is
    slot_time.take(1, 2.0, 100)
    assert slot_time.seconds[1] == pytest.approx(0.02)  # nothing new
    slot_time.take(1, 12.0, 200)  # 100 URLs at 0.1 s: most of the way there
    assert 0.09 < slot_time.seconds[1] < 0.1
    slot_time.take(1, 12.4, 201)  # one slow URL: a step, not a jump
    assert 0.1 < slot_time.seconds[1] < 0.12
    slot_time.take(1, 0.5, 10)  # the totals expired and began again: 0.05 s a URL
    assert 0.08 < slot_time.seconds[1] < 0.1
    wakeup.nudge(2, 0.3, 3)
    wakeup.nudge(2, 0.1, 1)
    assert slot_time.read(2) == pytest.approx(0.1)
    assert 0 < redis.pttl(wakeup.PACE.format(job=2)) <= setting("SLOT_TIME_KEEP_S") * 1000
    redis.delete(wakeup.PACE.format(job=2))  # expired: the estimate stays, the totals begin again
    assert slot_time.read(2) == pytest.approx(0.1)
    wakeup.nudge(2, 0.5, 1)
    assert 0.1 < slot_time.read(2) < 0.12  # one URL of 0.5 s after them, not 0.25 s a URL
    wakeup.nudge(3)  # a nudge of no message reports nothing
    assert slot_time.read(3) is None


def test_a_url_whose_worker_was_lost_goes_alone(redis, monkeypatch, pacing):
    monkeypatch.setenv("CRAWL_DISPATCH_BATCH", "4")
    job = make_job(7)
    lost = FrontierURL.objects.get(job=job, url="http://127.0.0.1:9/3")
    FrontierURL.objects.filter(pk=lost.pk).update(error_reason=requeue.LEASE_EXPIRED)
    _register_worker(redis, pacing, slots=4)
    pacing.flow.rate[job.pk] = 100.0
    assert release.release(job, pacing)[0] == 8
    messages = [[u for u, _ in channels.task_urls(body)] for body in broker.peek("crawl")]
    assert [lost.pk] in messages  # its page may be what kills workers: no neighbours
    # the seed: a priority of its own; the other six: a message for each of the four slots
    assert sorted(len(m) for m in messages) == [1, 1, 2, 2, 2]


def test_urls_of_a_polite_host_released_ahead_of_their_slot_go_one_by_one(
    redis, monkeypatch, pacing
):
    monkeypatch.setenv("CRAWL_DISPATCH_BATCH", "4")
    job = make_job(30, delay=0.5)
    _register_worker(redis, pacing, slots=1)
    pacing.flow.rate[job.pk] = 100.0
    assert release.release(job, pacing)[0] == 5  # slots at 0, 0.5, 1, 1.5 and 2 s: the horizon
    assert _message_sizes() == [1] * 5  # a message must not wait in a slot for the next one


def test_a_spider_requests_priority_goes_before_depth_as_in_scrapy(redis, pacing):
    """Higher first, negative last, then shallower first: a crawl's URLs (priority 0) keep
    their order."""
    job = make_job(0, max_pages=4)
    transitions.insert_urls(job.pk, [f"http://127.0.0.1:9/d1/{i}" for i in range(3)], depth=1)
    transitions.insert_urls(job.pk, ["http://127.0.0.1:9/d3/high"], depth=3)
    transitions.insert_urls(job.pk, ["http://127.0.0.1:9/d1/low"], depth=1)
    FrontierURL.objects.filter(url__endswith="/high").update(priority=5)
    FrontierURL.objects.filter(url__endswith="/low").update(priority=-1)
    assert release.release(job, pacing)[0] == 4
    released = FrontierURL.objects.filter(job=job, state=URLState.SCHEDULED)
    assert sorted(u.rsplit("/", 2)[-2] + "/" + u.rsplit("/", 1)[1]
                  for u in released.values_list("url", flat=True)) == [
        "127.0.0.1:9/", "d1/0", "d1/1", "d3/high"]  # fmt: skip
    assert release.release(job, pacing)[0] == 0  # max_pages reached: the rest is skipped
    skipped = FrontierURL.objects.filter(job=job, state=URLState.SKIPPED)
    assert set(skipped.values_list("url", flat=True)) == {
        "http://127.0.0.1:9/d1/2", "http://127.0.0.1:9/d1/low"}  # fmt: skip


def test_urls_waiting_for_not_before_are_not_released(redis, pacing):
    job = make_job(0)
    FrontierURL.objects.filter(job=job).update(not_before="2999-01-01T00:00:00Z")
    assert release.release(job, pacing)[0] == 0


def test_max_pages_skips_the_rest(redis, pacing):
    job = make_job(20, max_pages=5)
    assert release.release(job, pacing)[0] == 5
    assert release.release(job, pacing)[0] == 0
    assert FrontierURL.objects.filter(job=job, state=URLState.SKIPPED).count() == 16
    assert FrontierURL.objects.get(job=job, depth=0).state == URLState.SCHEDULED


def test_a_url_back_from_an_expired_lease_is_released_after_max_pages(redis, pacing):
    job = make_job(20, max_pages=5)
    assert release.release(job, pacing)[0] == 5
    url = FrontierURL.objects.filter(job=job, state=URLState.SCHEDULED).first()
    FrontierURL.objects.filter(pk=url.pk).update(state=URLState.LEASED, attempts=1)
    FrontierURL.objects.filter(pk=url.pk).update(lease_until="2000-01-01T00:00:00Z")
    assert requeue.reclaim_expired() == 1  # its worker died: back to the queue
    assert release.release(job, pacing)[0] == 1  # a retry, not a sixth page: the job can finish
    assert FrontierURL.objects.get(pk=url.pk).state == URLState.SCHEDULED
    assert FrontierURL.objects.filter(job=job, state=URLState.SKIPPED).count() == 16


def test_job_finishes_only_when_no_url_is_pending(redis):
    job = make_job(0)
    assert not scheduler.finish_if_done(job)
    FrontierURL.objects.filter(job=job).update(state=URLState.DONE)
    assert scheduler.finish_if_done(job)
    job.refresh_from_db()
    assert job.state == JobState.FINISHED
    assert job.checkpoints.get().reason == "finish"


def test_a_pass_that_finishes_a_job_says_so_to_whoever_asked(redis):
    """The crawl command's progress wakes at its job's end: its scheduler calls back."""
    job = make_job(0)
    ended: list[int] = []
    sched = scheduler.Scheduler(on_finished=ended.append)
    FrontierURL.objects.filter(job=job).exclude(state=URLState.DONE).update(
        state=URLState.DONE
    )
    assert sched._pass_job(job) == (0, None)
    job.refresh_from_db()
    assert job.state == JobState.FINISHED and ended == [job.pk]
    other = make_job(1)
    assert sched._pass_job(other)[0] > 0 and ended == [job.pk]  # released: not done


def test_reconcile_republishes_what_the_broker_lost(redis, pacing):
    job = make_job(4)
    assert release.release(job, pacing)[0] == 5
    assert reconcile.reconcile() == 0
    redis.flushdb()  # Redis restarted without persistence
    assert reconcile.reconcile() == 5
    assert broker.depth()["ready"] == 5
    assert reconcile.reconcile() == 0


def test_reconcile_puts_a_lost_render_task_back_on_the_render_queue(redis, pacing):
    job = make_job(2)
    assert release.release(job, pacing)[0] == 3
    url = FrontierURL.objects.filter(job=job, state=URLState.SCHEDULED).first()
    claim = transitions.claim(url.pk, job.pk)
    transitions.to_render(claim)  # a worker handed it to the render workers ...
    redis.flushdb()  # ... and Redis lost every message
    assert reconcile.reconcile() == 3
    assert broker.depth(settings.RENDER_QUEUE)["ready"] == 1
    assert broker.depth()["ready"] == 2
    row = FrontierURL.objects.get(pk=url.pk)
    assert (row.state, row.attempts) == ("scheduled", 0)  # handing over used no attempt


def test_per_host_delay_releases_one_url_per_host_per_slot(redis, pacing):
    job = make_job(5, delay=30)
    assert release.release(job, pacing)[0] == 1
    assert release.release(job, pacing)[0] == 0


def test_only_one_scheduler_leads(redis):
    a, b = scheduler.Scheduler(), scheduler.Scheduler()
    assert a.is_leader() and not b.is_leader()
    a.resign()
    assert b.is_leader()


def test_priority_lists_are_named_as_the_transport_names_them(redis, pacing):
    job = make_job(0)
    FrontierURL.objects.filter(job=job).update(depth=5)
    release.release(job, pacing)[0]
    assert redis.llen(broker.priority_lists("crawl")[1]) == 1  # priority 5 -> step 3


def test_a_busy_polite_host_cannot_starve_the_others(redis, pacing):
    job = jobs.create_job(
        ["http://busy.test/"], delay=1.0, allowed_domains=["busy.test", "calm.test"]
    )
    jobs.start(job)
    transitions.insert_urls(job.pk, [f"http://busy.test/{i}" for i in range(2000)], depth=1)
    transitions.insert_urls(job.pk, [f"http://calm.test/{i}" for i in range(3)], depth=1)
    released = 0
    for _ in range(3):
        released += release.release(job, pacing)[0]
    hosts = list(
        FrontierURL.objects.filter(job=job, state=URLState.SCHEDULED).values_list("host", flat=True)
    )
    assert hosts.count("busy.test") <= 3  # paced: a 1 s delay within a 2 s horizon
    assert hosts.count("calm.test") >= 1
    assert released == len(hosts)


def test_host_cap_skips_first_attempts_beyond_it(redis, pacing):
    job = make_job(10, max_pages_per_host=4)
    assert release.release(job, pacing)[0] == 4
    assert FrontierURL.objects.filter(job=job, error_reason="host_cap").count() == 7


def test_job_priority_moves_its_urls_ahead():
    assert dispatch.priority(0, 0) == 0
    assert dispatch.priority(5, 0) == 5
    assert dispatch.priority(5, 3) == 2
    assert dispatch.priority(30, 0) == 9


def _published_priorities(redis, queue: str = "crawl") -> dict[int, int]:
    """Each URL of a queue's ready messages and its message's priority, as the Redis broker
    holds them (kombu's envelopes: the priority in ``properties``, the task base64)."""
    found = {}
    for name in broker.priority_lists(queue):
        for raw in redis.lrange(name, 0, -1):
            envelope = json.loads(raw)
            body = base64.b64decode(envelope["body"])
            for url_id, _ in channels.task_urls(body):
                found[url_id] = envelope["properties"]["priority"]
    return found


def test_released_and_republished_urls_carry_the_priority_of_their_depth(redis, pacing):
    """A message lost from the broker is published again with the priority it had, not with
    its URL's depth."""
    job = make_job(2)
    deep = list(FrontierURL.objects.filter(job=job, depth=1).order_by("id"))
    FrontierURL.objects.filter(pk=deep[0].pk).update(depth=5)
    FrontierURL.objects.filter(pk=deep[1].pk).update(depth=30)
    depths = dict(FrontierURL.objects.filter(job=job).values_list("id", "depth"))
    assert sorted(depths.values()) == [0, 5, 30]
    expected = {pk: dispatch.priority(depth, job.priority) for pk, depth in depths.items()}
    assert sorted(expected.values()) == [0, 5, 9]
    assert release.release(job, pacing)[0] == 3
    assert _published_priorities(redis) == expected
    redis.flushdb()  # every message lost: reconcile publishes them again
    assert reconcile.reconcile() == 3
    assert _published_priorities(redis) == expected


def test_a_url_handed_to_a_render_worker_keeps_the_priority_of_its_depth(redis):
    from django.db import transaction

    from tasks.fetch import antibot

    job = make_job(1)
    url = FrontierURL.objects.get(job=job, depth=1)
    FrontierURL.objects.filter(pk=url.pk).update(depth=30)
    transitions.schedule([url.pk])
    claimed = transitions.claim(url.pk, job.pk)
    with transaction.atomic():
        antibot.hand_to_render(claimed)
    assert _published_priorities(redis, settings.RENDER_QUEUE) == {url.pk: 9}  # not 30


def test_a_dead_leaders_lease_is_taken_over_within_seconds(redis):
    leader, standby = scheduler.Scheduler(), scheduler.Scheduler()
    assert leader.is_leader()
    started = time.monotonic()
    while not standby.is_leader():  # the leader stopped renewing: it died
        assert time.monotonic() - started < setting("LEADER_TTL_S") + 1
        time.sleep(0.2)
    assert not leader.is_leader()


def test_periodic_checkpoints_and_beat_maintenance(redis, monkeypatch):
    from tasks.tasks import maintain

    job = make_job(3)
    monkeypatch.setenv("CRAWL_CHECKPOINT_INTERVAL_S", "0")
    scheduler.Scheduler().tick()
    assert job.checkpoints.filter(reason="periodic").exists()
    FrontierURL.objects.filter(job=job, depth=1).update(
        state=URLState.LEASED, lease_until="2000-01-01T00:00:00Z"
    )
    maintain.apply()  # what Celery beat runs: sweep, then reconcile
    assert FrontierURL.objects.filter(job=job, error_reason="lease_expired").count() == 3


def test_a_leader_whose_lease_ran_out_mid_pass_writes_nothing(redis, pacing):
    job = make_job(5)
    old, new = scheduler.Scheduler(), scheduler.Scheduler()
    assert old.is_leader()
    redis.delete(leadership.LEADER_KEY)  # its lease ran out during a slow pass
    assert new.is_leader() and new.epoch > old.epoch
    with pytest.raises(leadership.NotLeader):
        release.release(job, pacing, old.epoch)
    assert not FrontierURL.objects.filter(job=job, state=URLState.SCHEDULED).exists()
    assert broker.depth()["ready"] == 0
    assert release.release(job, pacing, new.epoch)[0] == 6


def test_a_standby_touches_its_heartbeat_so_its_probes_pass(redis, monkeypatch, tmp_path):
    beat = tmp_path / "heartbeat"
    monkeypatch.setenv("CRAWL_SCHEDULER_HEARTBEAT_FILE", str(beat))
    leader, standby = scheduler.Scheduler(), scheduler.Scheduler()
    assert leader.is_leader()
    thread = threading.Thread(target=standby.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while not beat.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert beat.exists() and standby.epoch is None  # alive, ready, not leading
    finally:
        standby.shutdown()
        thread.join(10)


def test_an_idle_scheduler_sleeps_until_a_job_needs_it(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_SCHEDULER_IDLE_S", "5")
    sched = scheduler.Scheduler()
    passes = []
    tick = sched.tick
    monkeypatch.setattr(sched, "tick", lambda: passes.append(time.monotonic()) or tick())
    thread = threading.Thread(target=sched.run, daemon=True)
    thread.start()
    try:
        time.sleep(2.5)
        idle_passes = len(passes)
        started = time.monotonic()
        job = make_job(3)  # jobs.start nudges the scheduler
        while not FrontierURL.objects.filter(job=job, state=URLState.SCHEDULED).exists():
            assert time.monotonic() - started < 1.0, "the scheduler did not wake up"
            time.sleep(0.01)
    finally:
        sched.shutdown()
        thread.join(10)
    assert idle_passes <= 3  # two to fall asleep, then one per SCHEDULER_IDLE_S at most


def test_an_idle_leader_keeps_its_lease_however_long_it_may_sleep(redis, monkeypatch):
    """A leader whose idle sleep outlasts its lease would lose it and win it again each time,
    a new epoch each (a write, a line): it wakes to renew it in time."""
    monkeypatch.setenv("CRAWL_SCHEDULER_IDLE_S", "5")
    monkeypatch.setenv("CRAWL_LEADER_TTL_S", "1")
    sched = scheduler.Scheduler()
    thread = threading.Thread(target=sched.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: sched.epoch is not None, 5, "the scheduler to lead")
        first = sched.epoch
        time.sleep(3.5)
        assert sched.epoch == first and leadership.leader() == sched.identity
    finally:
        sched.shutdown()
        thread.join(10)


def test_beat_maintenance_rides_out_a_database_outage(redis, caplog):
    from django.db import connection

    from tasks.tasks import maintain

    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = "/nonexistent/dir/db.sqlite3"
    else:
        connection.settings_dict.update(HOST="127.0.0.1", PORT="1")
    try:
        result = maintain.apply()
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    assert result.successful()
    assert [r for r in caplog.records if "maintain: database or Redis unavailable" in r.message]


def test_one_scheduler_sees_jobs_start_and_pause_between_its_passes(redis):
    """A scheduler builds its running-jobs statement once; each pass still reads the jobs as
    they are now, without their heavy fields."""
    sched = scheduler.Scheduler()
    assert sched._running() == []
    job = make_job(3)
    running = sched._running()
    assert [j.pk for j in running] == [job.pk]
    assert running[0].get_deferred_fields() == set(scheduler.HEAVY_FIELDS)
    jobs.pause(job)
    assert sched._running() == []
    assert sched.tick().released == 0
    jobs.resume(job)
    assert sched.tick().released > 0


def test_workers_registering_one_after_another_are_all_counted_within_a_quarter_second(
    redis, pacing
):
    """The slots the first passes size messages by: a count read while only the first of the
    crawl's workers had registered is read again soon, not kept for ``SLOTS_CACHE_S``."""
    _register_worker(redis, pacing, slots=8)
    assert pacing.worker_slots() == 8
    registry.write("second@host", {"heartbeat": time.time(), "queues": "crawl", "slots": 8}, 60)
    pacing.slots_read[0] -= setting("NO_SLOTS_CACHE_S")  # a quarter second later
    assert pacing.worker_slots() == 16
    pacing.slots_read[0] -= setting("NO_SLOTS_CACHE_S")  # the same count again: settled
    assert pacing.worker_slots() == 16
    registry.remove("second@host")
    pacing.slots_read[0] -= setting("NO_SLOTS_CACHE_S")
    assert pacing.worker_slots() == 16  # a settled count is read every SLOTS_CACHE_S


def test_a_job_whose_last_pages_end_between_sweeps_finishes_at_the_workers_nudge(
    redis, monkeypatch
):
    # Every job waits for its pages in flight alone: the sleep until the next sweep (3 s away)
    # ends at the nudge of the worker that ended the last of them, short as it is.
    monkeypatch.setenv("CRAWL_SWEEP_INTERVAL_S", "3")
    monkeypatch.setenv("CRAWL_SCHEDULER_WAKE_S", "3")
    job = make_job(2)
    FrontierURL.objects.filter(job=job).update(
        state=URLState.LEASED, attempts=1, lease_until=timezone.now() + timedelta(minutes=5)
    )
    sched = scheduler.Scheduler()
    passes = []
    tick = sched.tick

    def counted() -> scheduler.Pass:
        done = tick()
        passes.append(time.monotonic())  # after the pass: it sees nothing of what follows
        return done

    monkeypatch.setattr(sched, "tick", counted)
    thread = threading.Thread(target=sched.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(passes) >= 2, 10, "the scheduler to fall asleep")
        time.sleep(0.2)
        FrontierURL.objects.filter(job=job).update(state=URLState.DONE, lease_until=None)
        ended = time.monotonic()
        wakeup.nudge()  # as a worker does after its message
        wait_for(lambda: CrawlJob.objects.get(pk=job.pk).state == JobState.FINISHED, 10,
                 "the job to finish")  # fmt: skip
        assert time.monotonic() - ended < 1.0
    finally:
        sched.shutdown()
        thread.join(10)
