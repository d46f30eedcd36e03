"""Per-host politeness state in real Redis: slots, in-flight caps, the throttle, Retry-After."""

from __future__ import annotations

import time

from tasks.fetch import politeness
from tasks.fetch.politeness import NEUTRAL, OK, OVERLOAD


def delay(host: str = "h") -> float:
    return politeness.host_delays(1, [host], 0)[host][0]


def report(signal: int, n: int = 1, host: str = "h", **kw) -> None:
    for _ in range(n):
        slot = politeness.acquire(1, host, 0, 0)
        politeness.finish(1, host, slot, signal=signal, **kw)


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
    politeness.finish(1, "h", slots[0], signal=OK)
    assert politeness.acquire(1, "h", 0, 2).granted


def test_with_an_in_flight_cap_the_next_request_waits_a_pace_past_the_last_ones_end(redis):
    first = politeness.acquire(1, "h", 0.5, 1)
    time.sleep(0.3)  # the request left late for its slot, or its answer took that long
    politeness.finish(1, "h", first, signal=OK, pace=0.5)
    second = politeness.acquire(1, "h", 0.5, 1)
    assert second.granted and 0.45 <= second.wait <= 0.5  # not 0.2: half a second from the end
    politeness.set_floor(1, "h", 1.0)  # robots.txt's Crawl-delay is a pace too
    politeness.finish(1, "h", second, signal=OK, pace=0.5)
    assert 0.95 <= politeness.acquire(1, "h", 0.5, 1).wait <= 1.0


def test_without_a_cap_the_pace_spaces_the_starts_alone(redis):
    first = politeness.acquire(1, "h", 0.5, 0)
    time.sleep(0.3)
    politeness.finish(1, "h", first, signal=OVERLOAD)  # reported, but no pace from its end
    assert 0.1 <= politeness.acquire(1, "h", 0.5, 0).wait <= 0.2


def test_a_few_broken_urls_among_good_ones_never_slow_the_host(redis):
    report(OK, 20)
    report(OVERLOAD, 4)  # four 503s or timeouts among twenty good answers
    report(NEUTRAL, 5)  # refused connections are the circuit breaker's business
    assert delay() == 0
    assert not politeness.acquire(1, "h", 0, 0).wait


def test_a_struggling_host_slows_down_doubling_from_the_start_delay(redis):
    report(OVERLOAD, 2)
    assert delay() == 0  # two signals: not yet a pattern
    report(OVERLOAD)
    assert 0.49 <= delay() <= 0.5  # THROTTLE_START_DELAY_S
    report(OVERLOAD)
    assert 0.98 <= delay() <= 1.0


def test_the_adaptive_delay_halves_with_time_not_with_successes(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_THROTTLE_HALF_LIFE_S", "0.5")
    report(OVERLOAD, 4)
    before = delay()
    time.sleep(0.5)
    assert 0.4 * before <= delay() <= 0.55 * before
    time.sleep(2.5)
    assert delay() < 0.05 * before  # five half-lives later, whether or not anything was fetched


def test_a_slow_struggling_host_waits_at_least_its_latency(redis):
    report(OVERLOAD, 3, latency=8.0)  # responses past THROTTLE_SLOW_LATENCY_S
    assert 7.9 <= delay() <= 8.0  # latency x THROTTLE_LATENCY_FACTOR (1.0)


def test_adaptive_delay_is_capped(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_THROTTLE_MAX_DELAY_S", "1")
    report(OVERLOAD, 10)
    assert 0.99 <= delay() <= 1.0


def test_retry_after_holds_the_host_exactly_and_is_not_a_slowdown(redis):
    slot = politeness.acquire(1, "h", 0, 0)
    politeness.finish(1, "h", slot, signal=OK, retry_after=30)
    assert 29 <= politeness.host_delays(1, ["h"], 0)["h"][1] <= 30
    refused = politeness.acquire(1, "h", 0, 0)
    assert not refused.granted and refused.wait > 29
    assert delay() == 0  # once the hold is over, the normal pace resumes


def test_retry_after_is_capped(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_RETRY_BACKOFF_MAX_S", "5")
    slot = politeness.acquire(1, "h", 0, 0)
    politeness.finish(1, "h", slot, signal=OK, retry_after=86400)
    assert politeness.host_delays(1, ["h"], 0)["h"][1] <= 5


def test_crawl_delay_floor_applies(redis):
    politeness.set_floor(1, "h", 0.7)
    politeness.acquire(1, "h", 0, 0)
    assert 0.65 <= politeness.acquire(1, "h", 0, 0).wait <= 0.7


def test_a_refusal_for_the_cap_says_when_the_hosts_next_slot_opens(redis):
    first = politeness.acquire(1, "h", 0.5, 1)
    second = politeness.acquire(1, "h", 0.5, 1)  # reached ahead of its slot: the place is taken
    assert not second.granted and 0.45 <= second.full_for <= 0.5
    politeness.finish(1, "h", first, signal=OK)  # no pace from the end: the next slot is past
    time.sleep(0.5)
    assert politeness.acquire(1, "h", 0.5, 1).granted
    assert politeness.acquire(1, "z", 0, 1).granted  # no pace: no next slot is set
    assert politeness.acquire(1, "z", 0, 1).full_for == 0  # the place taken: not known when
    held = politeness.acquire(1, "r", 0.2, 1)
    politeness.finish(1, "r", held, signal=OK, retry_after=1.0)  # the host asks for a second
    assert politeness.acquire(1, "r", 0.2, 1).granted  # for the slot a second on
    refused = politeness.acquire(1, "r", 0.2, 1)
    assert not refused.granted and refused.wait >= refused.full_for >= 1.1  # back no sooner


def test_a_url_reached_ahead_of_its_slot_waits_for_the_request_before_not_the_frontier(redis):
    """Under a cap of one, a worker that reaches a host's next URL while the request before
    is still out waits for the host's next slot and asks again, by which time that request
    has ended (its answer holds the slot a pace on), instead of putting the URL back."""
    import threading

    from tasks.fetch import gates
    from tasks.frontier.claims import Claim
    from web.models import CrawlJob, FrontierURL

    job = CrawlJob(pk=1, delay=0.4, host_concurrency=1)
    claimed = Claim(url=FrontierURL(pk=2, job=job, url="http://h/b", host="h"), job=job,
                    attempt=1, run=1)  # fmt: skip
    before = politeness.acquire(1, "h", 0.4, 1)
    answered = threading.Timer(0.1, lambda: politeness.finish(1, "h", before, signal=OK,
                                                              pace=0.4))  # fmt: skip
    answered.start()
    started, slept = time.monotonic(), gates.slept()
    passage = gates.acquire(claimed, "h", again=True)
    answered.join()
    assert passage.slot.granted  # not deferred
    assert 0.35 <= time.monotonic() - started <= 1.0 and gates.slept() - slept >= 0.35
    assert 0.05 <= passage.slot.wait <= 0.2  # the rest of the pace past the answer, 0.5 s on
    job.host_concurrency = 2  # the next slot says nothing of when a place frees: no wait
    politeness.acquire(1, "h", 0.4, 2)
    started = time.monotonic()
    refused = gates.acquire(claimed, "h", again=True)
    assert not refused.slot.granted and time.monotonic() - started < 0.2
    assert refused.slot.wait >= refused.slot.full_for > 0.3  # put back until that slot at least
