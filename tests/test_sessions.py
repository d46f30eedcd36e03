"""Cookie jars shared through real Redis: versioned compare-and-set under concurrent writers."""

from __future__ import annotations

import threading

import pytest
import requests

from tasks.fetch import sessions

JOB, HOST, WHO = 7, "shop.test", "ab12.direct.0"


def changes(**cookies: str) -> requests.cookies.RequestsCookieJar:
    jar = requests.cookies.RequestsCookieJar()
    for name, value in cookies.items():
        jar.set(name, value, domain=HOST, path="/")
    return jar


def test_concurrent_writers_from_one_stale_read_lose_no_update(redis):
    writers, each = 8, 20
    stale = sessions.load(JOB, HOST, WHO)  # every writer starts from the same old version
    start = threading.Barrier(writers)

    def write(w: int) -> None:
        start.wait()
        for i in range(each):
            sessions.save(JOB, HOST, WHO, stale, changes(**{f"w{w}_{i}": str(i)}))

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    jar = sessions.load(JOB, HOST, WHO)
    assert {c["name"] for c in jar.cookies} == {
        f"w{w}_{i}" for w in range(writers) for i in range(each)
    }
    assert jar.version == writers * each  # one version per write, none overwritten


def test_a_later_value_replaces_an_earlier_one_and_expired_cookies_go(redis):
    first = sessions.save(JOB, HOST, WHO, sessions.load(JOB, HOST, WHO), changes(sid="1", a="x"))
    gone = requests.cookies.RequestsCookieJar()
    gone.set("a", "", domain=HOST, path="/", expires=1)  # a Set-Cookie that deletes "a"
    gone.set("sid", "2", domain=HOST, path="/")
    second = sessions.save(JOB, HOST, WHO, sessions.load(JOB, HOST, WHO), gone)
    jar = sessions.load(JOB, HOST, WHO)
    assert (first, second) == (1, 2)
    assert [(c["name"], c["value"]) for c in jar.cookies] == [("sid", "2")]
    assert jar.for_requests().get("sid") == "2"


def test_a_response_without_cookies_writes_nothing(redis):
    jar = sessions.load(JOB, HOST, WHO)
    assert sessions.save(JOB, HOST, WHO, jar, requests.cookies.RequestsCookieJar()) == 0
    assert not redis.exists(sessions.key(JOB, HOST, WHO))


def test_jars_survive_a_lost_redis_through_the_checkpoint_snapshot(redis):
    sessions.save(JOB, HOST, WHO, sessions.load(JOB, HOST, WHO), changes(sid="abc"))
    sessions.save(JOB, "other.test", WHO, sessions.load(JOB, "other.test", WHO), changes(k="v"))
    snap = sessions.snapshot(JOB)
    assert set(snap) == {f"{HOST}:{WHO}", f"other.test:{WHO}"}
    redis.flushdb()  # Redis restarted without persistence
    assert sessions.restore(JOB, snap) == 2
    assert sessions.load(JOB, HOST, WHO).for_requests().get("sid") == "abc"
    assert sessions.restore(JOB, snap) == 0  # jars Redis still has are not overwritten


def test_a_write_from_a_stale_read_is_merged_onto_the_newer_jar(redis):
    a = sessions.load(JOB, HOST, WHO)
    b = sessions.load(JOB, HOST, WHO)
    sessions.save(JOB, HOST, WHO, a, changes(from_a="1"))
    sessions.save(JOB, HOST, WHO, b, changes(from_b="1"))  # b's read is stale: merged, not lost
    names = {c["name"] for c in sessions.load(JOB, HOST, WHO).cookies}
    assert names == {"from_a", "from_b"}


@pytest.mark.django_db(transaction=True)
def test_a_resumed_job_gets_its_jars_back_from_its_checkpoint(redis):
    from tasks.frontier import jobs

    job = jobs.create_job(["http://127.0.0.1:9/"])
    jobs.start(job)
    sessions.save(job.pk, HOST, WHO, sessions.load(job.pk, HOST, WHO), changes(sid="kept"))
    jobs.pause(job)
    assert job.checkpoints.order_by("-version").first().sessions  # saved with the checkpoint
    redis.flushdb()  # the broker's Redis restarted empty while the job was paused
    jobs.resume(job)
    assert sessions.load(job.pk, HOST, WHO).for_requests().get("sid") == "kept"
