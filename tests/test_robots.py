"""robots.txt against a real local server and real Redis."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from tasks.fetch import circuit, outcomes, robots
from tests.hostile import HostileSite

UA = "crawlplatform/1.0 (+https://example.com/bot)"
ROBOTS = (
    "User-agent: *\nDisallow: /\n\n"
    "User-agent: crawlplatform\nDisallow: /private/\nCrawl-delay: 1.5\n"
    "Sitemap: http://127.0.0.1/sitemap.xml\n"
)


@pytest.fixture(autouse=True)
def fresh(redis):
    robots.forget()
    yield
    robots.forget()


def job():
    return SimpleNamespace(settings={}, pk=1, user_agents=[], proxies=[])


def test_the_product_tokens_group_applies_and_robots_is_fetched_once(tmp_path):
    with HostileSite(robots=ROBOTS) as site:
        private = robots.check(job(), site.url("/private/x"), UA)
        public = robots.check(job(), site.url("/public"), UA)
        robots.forget()  # another worker process: reads the copy in Redis
        browser = robots.check(job(), site.url("/private/x"), "Mozilla/5.0 (X11; Linux) Chrome/130")
        renamed = SimpleNamespace(settings={"ROBOTS_AGENT": "otherbot"}, pk=1, user_agents=[],
                                  proxies=[])  # fmt: skip
        other = robots.check(renamed, site.url("/public"), UA)
        assert site.hits("/robots.txt") == 1
    assert (private.allowed, private.reason) == (False, "robots")
    assert public.allowed and public.crawl_delay == 1.5
    assert public.sitemaps == ["http://127.0.0.1/sitemap.xml"]
    assert not browser.allowed  # a presented browser user agent does not escape the group
    assert not other.allowed  # another token: the * group disallows everything


def test_a_pages_links_are_judged_only_by_the_robots_this_process_holds(monkeypatch):
    monkeypatch.setenv("CRAWL_ROBOTS_ERROR_TTL_S", "30")
    with HostileSite(robots=ROBOTS) as site:
        private = [site.url("/private/x")]
        assert not robots.forbidden(job(), private)  # not held yet: the fetch decides
        robots.check(job(), site.url("/"), UA)
        links = [site.url("/private/x"), site.url("/public"), site.url("/private/y")]
        assert robots.forbidden(job(), links) == {links[0], links[2]}  # one lookup, three links
        elsewhere = site.url("/private/x").replace("127.0.0.1", "localhost")  # not held there
        assert elsewhere != links[0]
        assert robots.forbidden(job(), [elsewhere, *links]) == {links[0], links[2]}
        robots.forget()
        assert not robots.forbidden(job(), [site.url("/private/x")])
    overrides = {"/robots.txt": lambda n: (503, {}, b"")}
    with HostileSite(overrides=overrides) as site:
        robots.check(job(), site.url("/"), UA)  # unavailable: nothing is forbidden for good
        assert not robots.forbidden(job(), [site.url("/private/x")])


def test_a_process_holds_the_robots_of_recent_hosts_only(monkeypatch):
    monkeypatch.setenv("CRAWL_ROBOTS_LOCAL_S", "0.3")
    with HostileSite(robots=ROBOTS) as first, HostileSite(robots=ROBOTS) as second:
        robots.check(job(), first.url("/public"), UA)
        assert len(robots._parsed) == 1
        time.sleep(0.4)  # the first host's copy is stale now: the next one drops it
        robots.check(job(), second.url("/public"), UA)
        assert list(robots._parsed) == [robots._key(job(), second.url("/robots.txt"))]
        monkeypatch.setenv("CRAWL_ROBOTS_LOCAL_S", "60")
        assert not robots.check(job(), first.url("/private/x"), UA).allowed  # from Redis again
        assert len(robots._parsed) == 2 and first.hits("/robots.txt") == 1


def test_missing_robots_allows_everything():
    overrides = {"/robots.txt": lambda n: (404, {}, b"")}
    with HostileSite(overrides=overrides) as site:
        assert robots.check(job(), site.url("/private/x"), UA).allowed


def test_unavailable_robots_disallows_for_now_and_is_asked_again_later(monkeypatch):
    monkeypatch.setenv("CRAWL_ROBOTS_ERROR_TTL_S", "30")
    overrides = {"/robots.txt": lambda n: (503, {}, b"")}
    with HostileSite(overrides=overrides) as site:
        decision = robots.check(job(), site.url("/a"), UA)
        again = robots.check(job(), site.url("/b"), UA)
        assert site.hits("/robots.txt") == 1  # the 5xx is remembered for ROBOTS_ERROR_TTL_S
    assert not decision.allowed and decision.reason == "robots_unavailable"
    assert decision.failure.retryable and not decision.failure.host_level
    assert again.reason == "robots_unavailable"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once closed


def test_an_unreachable_host_that_answered_before_counts_toward_its_circuit(redis):
    port = closed_port()
    circuit.answered(1, f"127.0.0.1:{port}")  # it answered earlier in the job, then went away
    decision = robots.check(job(), f"http://127.0.0.1:{port}/a", UA)
    assert not decision.allowed and decision.reason == "connect_error"
    assert decision.failure.host_level and decision.failure.summary == "connection refused"
    assert decision.failure.retryable
    assert redis.hget(circuit.key(1, f"127.0.0.1:{port}"), "fails") == b"1"
    assert circuit.check(1, f"127.0.0.1:{port}").state == circuit.CLOSED


@pytest.mark.parametrize("dead", ["refused", "nowhere.invalid"])
def test_a_host_that_never_answered_ends_its_url_at_its_robots_failure(redis, dead):
    host = f"127.0.0.1:{closed_port()}" if dead == "refused" else dead
    decision = robots.check(job(), f"http://{host}/a", UA)
    assert isinstance(decision.failure, outcomes.HostUnreachable)  # permanent: not retried
    assert ("refused" if dead == "refused" else "resolve") in str(decision.failure)
    assert circuit.check(1, host).state == circuit.OPEN
    robots.forget()  # another worker, the same job: the URL ends from the copy in Redis
    again = robots.check(job(), f"http://{host}/b", UA)
    assert isinstance(again.failure, outcomes.HostUnreachable)


def test_an_answer_to_robots_marks_the_host_answered(redis):
    overrides = {"/robots.txt": lambda n: (404, {}, b"")}
    with HostileSite(overrides=overrides) as site:
        host = site.base.split("//", 1)[1]
        robots.check(job(), site.url("/a"), UA)
    assert redis.exists(circuit.answered_key(1, host))
    assert not circuit.record(1, host, failed=True, reason="connection refused", definitive=True)


def test_an_open_circuit_fails_without_fetching_robots(redis):
    overrides = {"/robots.txt": lambda n: (200, {}, b"User-agent: *\nAllow: /\n")}
    with HostileSite(overrides=overrides) as site:
        host = site.base.split("//", 1)[1]
        redis.hset(circuit.key(1, host), mapping={"open_until": 2**62, "reason": "dns"})
        decision = robots.check(job(), site.url("/a"), UA)
        assert site.hits("/robots.txt") == 0
    assert isinstance(decision.failure, outcomes.HostUnreachable)


def test_robots_that_cannot_be_followed_restricts_nothing():
    overrides = {"/robots.txt": lambda n: (302, {"Location": "http://[x"}, b"")}
    with HostileSite(overrides=overrides) as site:
        assert robots.check(job(), site.url("/private/x"), UA).allowed


def test_a_worker_waits_while_another_fetches_robots(redis):
    redis.set("crawl:robots:http://127.0.0.1:1/robots.txt:lock", "1")
    decision = robots.check(job(), "http://127.0.0.1:1/page", UA)
    assert (decision.allowed, decision.reason, decision.retry_in) == (False, "robots_pending", 1.0)


def test_workers_that_miss_the_stored_copy_at_once_fetch_robots_once(redis):
    # Eight workers ask at the same moment, none holding a copy: one takes the lock and
    # fetches; each other one waits (robots_pending) or, asking after the copy was stored,
    # takes it (the read and the lock are one step in Redis, so no copy stored between them
    # is fetched again). A copy stored while another worker's lock is held is taken.
    workers = 8
    barrier = threading.Barrier(workers)

    def ask(url: str) -> robots.Decision:
        barrier.wait()
        return robots.check(job(), url, UA)

    with HostileSite(robots=ROBOTS) as site, ThreadPoolExecutor(workers) as pool:
        decisions = list(pool.map(ask, [site.url(f"/private/{n}") for n in range(workers)]))
        assert site.hits("/robots.txt") == 1
        robots.forget()
        redis.set(robots._key(job(), robots.robots_url(site.url("/"))) + ":lock", "another")
        assert robots.check(job(), site.url("/private/x"), UA).reason == "robots"
        assert site.hits("/robots.txt") == 1
    shapes = sorted((d.reason, d.fetched) for d in decisions)
    assert shapes.count(("robots", True)) == 1, shapes
    assert set(shapes) <= {("robots", True), ("robots", False), ("robots_pending", False)}


def test_a_worker_whose_fetch_lock_ran_out_leaves_the_next_holders_lock_alone(monkeypatch, redis):
    # Its process stalled past the lock's time: another worker took the lock meanwhile; the
    # first one's end must not free it for a third.
    fetch = robots._fetch_through_circuit

    def stalled(url, user_agent, job):
        lock = robots._key(job, url) + ":lock"
        redis.set(lock, "another worker", ex=60)  # this one's ran out; another took it
        return fetch(url, user_agent, job)

    monkeypatch.setattr(robots, "_fetch_through_circuit", stalled)
    with HostileSite(robots=ROBOTS) as site:
        assert not robots.check(job(), site.url("/private/x"), UA).allowed
        lock = robots._key(job(), robots.robots_url(site.url("/"))) + ":lock"
        assert redis.get(lock) == b"another worker"
