"""Per-host politeness state in real Redis: slots, in-flight caps, adaptive delay, Retry-After."""

from __future__ import annotations

from tasks.fetch import politeness


def test_slots_are_spaced_by_the_delay_and_each_caller_gets_its_own(redis):
    first = politeness.acquire(1, "h", 0.5, 0)
    second = politeness.acquire(1, "h", 0.5, 0)
    assert first.granted and first.wait == 0
    assert second.granted and 0.45 <= second.wait <= 0.5
    third = politeness.acquire(1, "h", 0.5, 0)  # 1.0 s ahead
    assert third.granted and 0.95 <= third.wait <= 1.0
    late = politeness.acquire(1, "h", 2.5, 0)  # 1.5 s ahead; a 2.5 s delay pushes the next
    assert late.granted
    assert not politeness.acquire(1, "h", 2.5, 0).granted  # beyond HOST_MAX_WAIT_S: re-queue


def test_hosts_and_jobs_do_not_share_slots(redis):
    assert politeness.acquire(1, "a", 10, 0).wait == 0
    assert politeness.acquire(1, "b", 10, 0).wait == 0
    assert politeness.acquire(2, "a", 10, 0).wait == 0


def test_in_flight_cap_per_host(redis):
    slots = [politeness.acquire(1, "h", 0, 2) for _ in range(3)]
    assert [s.granted for s in slots] == [True, True, False]
    politeness.finish(1, "h", slots[0], delay_s=0, slows=False, retry_after=None)
    assert politeness.acquire(1, "h", 0, 2).granted


def test_slow_down_doubles_the_delay_and_successes_shrink_it(redis):
    slot = politeness.acquire(1, "h", 0, 0)
    politeness.finish(1, "h", slot, delay_s=0, slows=True, retry_after=None)
    assert politeness.host_delays(1, ["h"], 0)["h"][0] == 0.25
    politeness.finish(1, "h", slot, delay_s=0, slows=True, retry_after=None)
    assert politeness.host_delays(1, ["h"], 0)["h"][0] == 0.5
    for _ in range(10):
        politeness.finish(1, "h", slot, delay_s=0, slows=False, retry_after=None)
    assert politeness.host_delays(1, ["h"], 0)["h"][0] < 0.2
    assert politeness.acquire(1, "h", 0, 0).adaptive


def test_adaptive_delay_is_capped(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_THROTTLE_MAX_DELAY_S", "1")
    slot = politeness.acquire(1, "h", 0, 0)
    for _ in range(10):
        politeness.finish(1, "h", slot, delay_s=0, slows=True, retry_after=None)
    assert politeness.host_delays(1, ["h"], 0)["h"][0] == 1.0


def test_retry_after_pushes_the_hosts_next_slot(redis):
    slot = politeness.acquire(1, "h", 0, 0)
    politeness.finish(1, "h", slot, delay_s=0, slows=True, retry_after=30)
    assert 29 <= politeness.host_delays(1, ["h"], 0)["h"][1] <= 30
    refused = politeness.acquire(1, "h", 0, 0)
    assert not refused.granted and refused.wait > 29


def test_crawl_delay_floor_applies(redis):
    politeness.set_floor(1, "h", 0.7)
    politeness.acquire(1, "h", 0, 0)
    assert 0.65 <= politeness.acquire(1, "h", 0, 0).wait <= 0.7
