"""Proxy health and identities on real Redis: rest after failures in a row, recovery, rotation."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from tasks.fetch import identity, proxies
from tasks.rules import proxy_urls

POOL = ["http://${CRAWL_PROXY_USER}:${CRAWL_PROXY_PASS}@127.0.0.1:3128", "socks5://127.0.0.1:1080",
        "http://127.0.0.1:8080"]  # fmt: skip
AGENTS = ["A/1", "B/2"]


def job(**settings):
    return SimpleNamespace(pk=3, settings={"PROXY_REST_S": 0.3, **settings},
                           user_agents=AGENTS, proxies=POOL)  # fmt: skip


def test_a_proxy_rests_after_failures_in_a_row_and_comes_back(redis):
    j, pid = job(), proxies.proxy_id(POOL[0])
    proxies.record(j.pk, pid, "bans", job=j)
    proxies.record(j.pk, pid, "ok", 0.1, job=j)  # a success between: the page's, not the proxy's
    proxies.record(j.pk, pid, "bans", job=j)
    proxies.record(j.pk, pid, "errors", job=j)
    assert proxies.resting(j.pk, [pid]) == set()
    proxies.record(j.pk, pid, "bans", job=j)  # three failures in a row
    assert proxies.resting(j.pk, [pid]) == {pid}
    time.sleep(0.4)
    assert proxies.resting(j.pk, [pid]) == set()
    health = proxies.health(j.pk, [pid])[pid]
    assert (health["ok"], health["bans"], health["errors"]) == (1, 3, 1)


def test_rests_in_a_row_double_and_a_success_resets_them(redis):
    j, pid = job(), proxies.proxy_id(POOL[1])
    for _ in range(3):
        proxies.record(j.pk, pid, "errors", job=j)
    time.sleep(0.35)
    assert not proxies.resting(j.pk, [pid])
    for _ in range(3):
        proxies.record(j.pk, pid, "errors", job=j)
    time.sleep(0.35)
    assert proxies.resting(j.pk, [pid])  # the second rest is 0.6 s
    time.sleep(0.3)
    assert not proxies.resting(j.pk, [pid])
    proxies.record(j.pk, pid, "ok", 0.2, job=j)
    assert redis.hget(proxies.key(j.pk, pid), "rests") == b"0"


def test_a_host_moves_off_a_resting_proxy_and_rotation_happens_once(redis):
    j = job()
    first = identity.current(j, "shop.test")
    assert first.proxy_template in POOL and first.user_agent in AGENTS
    again = identity.current(j, "shop.test")
    assert again == first  # every worker agrees on the host's identity
    for _ in range(3):
        proxies.record(j.pk, first.proxy_id, "bans", job=j)
    moved = identity.current(j, "shop.test")
    assert moved.proxy_id != first.proxy_id and moved.generation == first.generation + 1
    assert identity.current(j, "shop.test") == moved  # every worker sees the host moved on
    # two workers rotating after the same ban: one rotation, not two
    a = identity.rotate(j, "shop.test", moved)
    b = identity.rotate(j, "shop.test", moved)
    assert a == b and a.generation == moved.generation + 1
    assert a.key != moved.key  # a fresh session: a new cookie jar


def test_credentials_come_from_the_environment_and_are_not_in_labels(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_PROXY_USER", "me")
    monkeypatch.setenv("CRAWL_PROXY_PASS", "hunter2")
    assert proxy_urls.expand(POOL[0]) == "http://me:hunter2@127.0.0.1:3128"
    label = proxies.label(POOL[0])
    assert "hunter2" not in label and "CRAWL_PROXY_PASS" not in label and "127.0.0.1:3128" in label


def test_no_pools_means_one_fixed_identity(redis):
    j = SimpleNamespace(pk=4, settings={}, user_agents=[], proxies=[])
    who = identity.current(j, "shop.test")
    assert who.proxy is None and who.user_agent.startswith("crawlplatform/")
    assert identity.rotate(j, "shop.test", who) == who


@pytest.mark.django_db(transaction=True)
def test_a_proxy_variable_missing_on_the_worker_fails_the_request_naming_it(redis, monkeypatch):
    from tasks import engine
    from tasks.frontier import jobs, transitions
    from web.models import FrontierURL

    monkeypatch.setenv("CRAWL_PROXY_USER", "me")
    monkeypatch.delenv("CRAWL_PROXY_PASS", raising=False)
    job = jobs.create_job(["http://127.0.0.1:9/a"], proxies=[POOL[0]], obey_robots=False)
    jobs.start(job)
    url = FrontierURL.objects.get(job=job)
    transitions.schedule([url.pk])
    assert engine.process(url.pk, job.pk) == "queued"  # retried: another worker may have it
    row = FrontierURL.objects.get(pk=url.pk)
    assert row.error_reason == "proxy_error" and "needs ${CRAWL_PROXY_PASS}" in row.error_message
    assert "hunter2" not in row.error_message


def test_a_proxy_may_read_only_the_operators_proxy_variables():
    assert proxy_urls.problem("http://x:${CRAWL_PROXY_PASSWORD}@proxy:3128") == ""
    for template in ("http://x:${SECRET_KEY}@proxy:3128", "http://${DATABASE_URL}:1"):
        assert "a proxy may only read CRAWL_PROXY_* variables" in proxy_urls.problem(template)
        with pytest.raises(proxy_urls.Unusable):  # a template stored before the rule held
            proxy_urls.expand(template)


@pytest.mark.django_db
def test_a_job_naming_another_variable_is_refused_when_saved():
    from web.models import CrawlJob

    job = CrawlJob(seeds=["http://127.0.0.1:9/"], proxies=["http://x:${SECRET_KEY}@proxy:3128"])
    assert "${SECRET_KEY}" in job.problems(seeds=False)["proxies"][0]


@pytest.mark.parametrize(
    "template", ["http://me:${CRAWL_PROXY_MARK}@127.0.0.1:9", "http://${CRAWL_PROXY_MARK}:9"]
)
def test_no_error_message_carries_an_expanded_proxy_credential(monkeypatch, template):
    from tasks.fetch import fetching, outcomes
    from tasks.rules import guard

    marker = "marker-7f3a9.invalid"  # as a password, and as a host that does not resolve
    monkeypatch.setenv("CRAWL_PROXY_MARK", marker)
    limits = fetching.FetchLimits(1, 1, 2, 1 << 20, 3)
    visitor = fetching.Visitor(proxy=proxy_urls.expand(template))
    with pytest.raises(outcomes.CrawlOutcome) as failed:
        fetching.fetch("http://127.0.0.1:9/page", user_agent="t", limits=limits,
                       allow=guard.networks("127.0.0.0/8"), visitor=visitor)  # fmt: skip
    assert marker not in str(failed.value)


def test_a_banned_identity_is_parked_until_its_ban_lapses_and_the_host_moves_on(redis):
    j = job(IDENTITY_REST_S=0.1, IDENTITY_REST_MAX_S=5.0)
    first = identity.current(j, "shop.test")
    rest = identity.rest(j, "shop.test", first)
    assert rest.news and rest.seconds == pytest.approx(0.1)  # no ban seen there yet
    assert not identity.rest(j, "shop.test", first).news  # in flight meanwhile: no news
    moved = identity.rotate(j, "shop.test", first)
    assert (moved.user_agent, moved.proxy_template) != (first.user_agent, first.proxy_template)
    assert identity.rest_left(j, "shop.test", moved) == 0.0
    time.sleep(0.12)
    # refused again as its park lapsed: parked until 0.2 s after its first refusal, then 0.4
    assert 0.05 < identity.rest(j, "shop.test", first).seconds <= 0.1
    time.sleep(0.12)
    assert 0.05 < identity.rest(j, "shop.test", first).seconds <= 0.2
    identity.answered(j, "shop.test", first)  # an answer sent before the ban: no news
    time.sleep(0.2)
    identity.answered(j, "shop.test", first)  # let in after its park: the ban lasted 0.4 s
    # the next ban's first guess is half the length seen, so one refusal finds it again
    assert identity.rest(j, "shop.test", first).seconds == pytest.approx(0.2, abs=0.01)
    other = identity.rotate(j, "shop.test", first)
    assert identity.rest(j, "shop.test", other, retry_after=30.0).seconds == 30.0  # as said


def test_rotation_leaves_a_part_of_a_parked_identity_behind(redis):
    j = job(IDENTITY_REST_S=5.0)
    who = identity.current(j, "shop.test")
    identity.rest(j, "shop.test", who)
    moved = identity.rotate(j, "shop.test", who)
    # a site may ban a user agent, or an address: the next one shares neither
    assert moved.user_agent != who.user_agent and moved.proxy_template != who.proxy_template


def test_when_every_identity_rests_the_host_goes_to_the_one_that_wakes_first(redis):
    j = job(IDENTITY_REST_S=5.0, IDENTITY_REST_MAX_S=60.0)
    who = identity.current(j, "shop.test")
    rested = []
    for _ in range(len(AGENTS) * len(POOL)):  # every identity, each refused once
        identity.rest(j, "shop.test", who)
        rested.append(who)
        time.sleep(0.01)
        who = identity.rotate(j, "shop.test", who)
    assert (who.user_agent, who.proxy_template) == (rested[0].user_agent,
                                                    rested[0].proxy_template)  # fmt: skip
    assert 4.5 < identity.rest_left(j, "shop.test", who) <= 5.0


# A job's proxy inside the guard. The site is on 127.0.0.1 (allowed); the proxies listen on
# 127.0.0.3, which a policy of 127.0.0.1/32 refuses and the operator's 127.0.0.0/8 allows.
SITE_ONLY = "127.0.0.1/32"
LOOPBACK = "127.0.0.0/8"
KINDS = [("http", "http"), ("socks5", "socks5"), ("socks5", "socks5h")]


def _fetch_through(url: str, proxy: str, allow: str):
    from tasks.fetch import fetching
    from tasks.rules import guard

    limits = fetching.FetchLimits(2, 2, 4, 1 << 20, 3)
    return fetching.fetch(url, user_agent="t", limits=limits, allow=guard.networks(allow),
                          visitor=fetching.Visitor(proxy=proxy))  # fmt: skip


@pytest.mark.parametrize("kind,scheme", KINDS)
def test_a_proxy_on_a_refused_address_ends_the_fetch_naming_the_proxy(monkeypatch, kind, scheme):
    from tasks.fetch import outcomes
    from tests.antibot import ForwardProxy
    from tests.hostile import HostileSite

    marker = "marker-51c0e"
    monkeypatch.setenv("CRAWL_PROXY_MARK", marker)
    with HostileSite() as site, ForwardProxy("127.0.0.2", kind, listen="127.0.0.3") as proxy:
        template = f"{scheme}://me:${{CRAWL_PROXY_MARK}}@127.0.0.3:{proxy.port}"
        with pytest.raises(outcomes.BlockedAddress) as refused:
            _fetch_through(site.url("/"), proxy_urls.expand(template), SITE_ONLY)
        assert proxy.requests == 0 and site.requests == {}  # no connection was tried
    message = str(refused.value)
    assert f"proxy {scheme}://127.0.0.3:{proxy.port} refused" in message
    assert "127.0.0.3 (127.0.0.3) is a loopback address" in message and marker not in message


@pytest.mark.parametrize("kind,scheme", KINDS)
def test_a_proxy_named_by_a_name_is_resolved_and_checked_by_the_guard(monkeypatch, kind, scheme):
    from tasks.fetch import outcomes
    from tests.antibot import ForwardProxy
    from tests.hostile import HostileSite

    monkeypatch.setenv("CRAWL_RESOLVE", "proxy.test=127.0.0.3")  # no resolver is asked
    with HostileSite() as site, ForwardProxy("127.0.0.2", kind, listen="127.0.0.3") as proxy:
        named = f"{scheme}://proxy.test:{proxy.port}"
        with pytest.raises(outcomes.BlockedAddress, match=r"127\.0\.0\.3 \(proxy\.test\)"):
            _fetch_through(site.url("/"), named, SITE_ONLY)
        assert proxy.requests == 0
        resp = _fetch_through(site.url("/"), named, LOOPBACK)  # the operator allows loopback
        assert resp.status == 200 and proxy.requests == 1 and site.hits("/") == 1


def test_a_socks5_proxy_is_sent_the_address_the_guard_checked(monkeypatch):
    from tasks.fetch import outcomes
    from tests.antibot import ForwardProxy
    from tests.hostile import HostileSite

    with HostileSite() as site, ForwardProxy("127.0.0.2", "socks5", listen="127.0.0.3") as proxy:
        page = f"http://shop.test:{site.base.rsplit(':', 1)[1]}/"
        monkeypatch.setenv("CRAWL_RESOLVE", "shop.test=127.0.0.1")
        assert _fetch_through(page, proxy.url(), LOOPBACK).status == 200
        assert proxy.targets == ["127.0.0.1"]  # resolved here, not by the proxy or PySocks
        monkeypatch.setenv("CRAWL_RESOLVE", "shop.test=127.0.0.5")
        with pytest.raises(outcomes.BlockedAddress, match=r"127\.0\.0\.5 \(shop\.test\)"):
            _fetch_through(page, proxy.url(), "127.0.0.3/32,127.0.0.1/32")
        assert proxy.targets == ["127.0.0.1"]


@pytest.mark.parametrize("kind", ["http", "socks5"])
def test_robots_txt_goes_through_the_jobs_proxy_under_its_guard(redis, monkeypatch, kind):
    from tasks.fetch import robots
    from tests.antibot import AntiBotSite, ForwardProxy

    robots.forget()
    with AntiBotSite() as site, ForwardProxy("127.0.0.2", kind, listen="127.0.0.3") as proxy:
        proxied = SimpleNamespace(pk=5, settings={}, user_agents=[], proxies=[proxy.url()])
        monkeypatch.setenv("CRAWL_ALLOWED_NETWORKS", SITE_ONLY)
        refused = robots.check(proxied, site.url("/p/1"), "t")
        assert refused.failure.reason == "blocked_address" and proxy.requests == 0
        assert f"proxy {proxy.url()} refused" in str(refused.failure)
        direct = SimpleNamespace(pk=6, settings={}, user_agents=[], proxies=[])
        assert robots.check(direct, site.url("/p/1"), "t").allowed  # not the proxied job's
        robots.forget()
        redis.flushdb()  # the refusal was kept for ROBOTS_ERROR_TTL_S
        monkeypatch.setenv("CRAWL_ALLOWED_NETWORKS", LOOPBACK)
        assert robots.check(proxied, site.url("/p/1"), "t").allowed
        assert not robots.check(proxied, site.url("/private/x"), "t").allowed
    assert [who for who, _, _ in site.served["/robots.txt"]] == ["127.0.0.1", "127.0.0.2"]
    assert proxy.requests == 1
    robots.forget()


def test_an_answer_a_spider_asked_for_counts_for_its_proxy_and_tells_the_ladder_nothing(redis):
    # A 403 a spider's callback takes (handle_httpstatus_list) is no block: its proxy answered
    # (its run of failures ends), but the host did not let a page in (its run of refusals goes
    # on). An answer that lets a page in ends both.
    from tasks.fetch import antibot, fetching, gates, ladder, outcomes, politeness

    j, host = job(), "shop.test"
    who = identity.Identity(AGENTS[0], POOL[0], 0)
    for _ in range(2):
        proxies.record(j.pk, who.proxy_id, "errors", job=j)
    ladder.signal(j, host, banned=True)
    slot = politeness.Slot(granted=True, wait=0.0, token="", circuit=False, ban_streak=True)
    refused = outcomes.ClientError("HTTP 403", status=403)
    fetched = fetching.Fetched(None, refused, 0.1, False)
    claimed = SimpleNamespace(job=j)
    antibot.count_answer(claimed, host, gates.Passage(slot, who), fetched, refused, let_in=False)
    assert redis.hget(proxies.key(j.pk, who.proxy_id), "streak") == b"0"
    assert redis.hget(ladder.key(j.pk, host), "streak") == b"1"
    antibot.count_answer(claimed, host, gates.Passage(slot, who), fetched, refused)
    assert not redis.exists(ladder.key(j.pk, host))
