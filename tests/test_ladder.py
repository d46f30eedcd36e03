"""The anti-bot ladder on real Redis: climb on bans in a row, step down after a quiet spell."""

from __future__ import annotations

import time
from types import SimpleNamespace

from tasks.fetch import ladder, politeness

HOST = "shop.test"


def job(**settings):
    return SimpleNamespace(pk=5, settings={"LADDER_QUIET_S": 0.3, "LADDER_DESCEND_SUCCESSES": 2,
                                           **settings})  # fmt: skip


def bans(j, n: int) -> ladder.Step:
    """``n`` bans, each from a request that ran at the host's level of the moment."""
    for _ in range(n):
        step = ladder.signal(j, HOST, banned=True, ran_at=ladder.levels(j.pk).get(HOST, 0))
    return step


def test_bans_in_a_row_climb_one_level_per_three(redis):
    j = job()
    assert bans(j, 2) == ladder.Step(0, 0, 2)
    assert bans(j, 1) == ladder.Step(0, 1, 3)
    assert bans(j, 3).after == ladder.ROTATE
    assert bans(j, 6).after == ladder.PARK
    assert bans(j, 3).after == ladder.PARK  # the top is LADDER_MAX_LEVEL
    assert ladder.levels(j.pk) == {HOST: ladder.PARK}


def test_bans_of_requests_that_ran_below_the_level_now_are_not_counted(redis):
    j = job()
    bans(j, 3)  # level 1
    for _ in range(5):  # the rest of the burst that made it climb: in flight at level 0
        assert ladder.signal(j, HOST, banned=True, ran_at=0) == ladder.Step(1, 1, -1)
    assert bans(j, 1) == ladder.Step(1, 1, 1)


def test_a_success_breaks_the_run(redis):
    j = job()
    bans(j, 2)
    assert ladder.signal(j, HOST, banned=False).run == 0
    assert bans(j, 2) == ladder.Step(0, 0, 2)  # counting starts again


def test_the_host_steps_down_only_after_a_quiet_spell_of_successes(redis):
    j = job()
    bans(j, 6)
    for _ in range(5):  # successes in a row, but right after a ban: not quiet yet
        assert ladder.signal(j, HOST, banned=False).after == ladder.ROTATE
    time.sleep(0.35)
    assert ladder.signal(j, HOST, banned=False).after == ladder.BACK_OFF  # quiet now
    assert ladder.signal(j, HOST, banned=False).after == ladder.BACK_OFF  # one more level ...
    assert ladder.signal(j, HOST, banned=False).after == ladder.NORMAL  # ... per two in a row
    assert not redis.exists(ladder.key(j.pk, HOST))  # level 0 keeps no state


def test_a_slot_carries_the_hosts_level_and_level_one_slows_the_host(redis):
    j = job()
    bans(j, 3)
    slot = politeness.acquire(j.pk, HOST, 0.0, 0, j)
    # the host let no page in since: the page it lets in next is reported (it ends the run)
    assert slot.granted and slot.ladder == ladder.BACK_OFF and slot.ban_streak
    politeness.slow_down(j.pk, HOST, 2.0, j)
    assert politeness.acquire(j.pk, HOST, 0.0, 0, j).granted  # reserves the slot 2 s later
    later = politeness.acquire(j.pk, HOST, 0.0, 0, j)
    assert later.wait >= 1.5


def test_a_reset_brings_a_parked_host_back_to_normal(redis):
    j = job()
    bans(j, 12)
    ladder.reset(j.pk, HOST)
    assert ladder.levels(j.pk) == {}


def test_the_ladder_knows_how_long_the_host_has_let_no_page_in(redis):
    j = job()
    assert ladder.signal(j, HOST, banned=True).refused_s == 0.0
    time.sleep(0.2)
    # a refusal that is not news (an identity parked already) climbs nothing, but counts time
    step = ladder.signal(j, HOST, banned=True, counted=False)
    assert step.run == -1 and 0.15 < step.refused_s < 1.0
    assert politeness.acquire(j.pk, HOST, 0.0, 0, j).ban_streak
    assert ladder.signal(j, HOST, banned=False).refused_s == 0.0  # a page let in
    assert ladder.signal(j, HOST, banned=True, counted=False).refused_s == 0.0  # a new run
    assert ladder.levels(j.pk) == {HOST: 0}


def test_refusals_that_are_not_news_do_not_climb(redis):
    j = job()
    for _ in range(10):  # the in-flight requests of one banned identity
        assert ladder.signal(j, HOST, banned=True, counted=False).after == ladder.NORMAL
    assert bans(j, 3).after == ladder.BACK_OFF  # three identities refused one after another
