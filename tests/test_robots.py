"""robots.txt against a real local server and real Redis."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tasks.fetch import robots
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
    return SimpleNamespace(settings={}, pk=1)


def test_the_jobs_user_agent_group_applies_and_robots_is_fetched_once(tmp_path):
    with HostileSite(robots=ROBOTS) as site:
        private = robots.check(job(), site.url("/private/x"), UA)
        public = robots.check(job(), site.url("/public"), UA)
        robots.forget()  # another worker process: reads the copy in Redis
        other = robots.check(job(), site.url("/public"), "SomeOtherBot/2.0")
        assert site.hits("/robots.txt") == 1
    assert (private.allowed, private.reason) == (False, "robots")
    assert public.allowed and public.crawl_delay == 1.5
    assert public.sitemaps == ["http://127.0.0.1/sitemap.xml"]
    assert not other.allowed  # the * group disallows everything for other agents


def test_missing_robots_allows_everything():
    overrides = {"/robots.txt": lambda n: (404, {}, b"")}
    with HostileSite(overrides=overrides) as site:
        assert robots.check(job(), site.url("/private/x"), UA).allowed


def test_unavailable_robots_defers_and_is_asked_again_later(monkeypatch):
    monkeypatch.setenv("CRAWL_ROBOTS_ERROR_TTL_S", "30")
    overrides = {"/robots.txt": lambda n: (503, {}, b"")}
    with HostileSite(overrides=overrides) as site:
        decision = robots.check(job(), site.url("/a"), UA)
        again = robots.check(job(), site.url("/b"), UA)
        assert site.hits("/robots.txt") == 1
    assert not decision.allowed and decision.reason == "robots_unavailable"
    assert 25 <= decision.retry_in <= 30 and again.retry_in > 0


def test_a_worker_waits_while_another_fetches_robots(redis):
    redis.set("crawl:robots:http://127.0.0.1:1/robots.txt:lock", "1")
    decision = robots.check(job(), "http://127.0.0.1:1/page", UA)
    assert (decision.allowed, decision.reason, decision.retry_in) == (False, "robots_pending", 1.0)
