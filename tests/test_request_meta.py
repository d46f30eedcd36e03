"""A spider request's meta keys that change how it leaves (tasks/fetch/): ``cookiejar`` (a
session of its own, checkpointed as the default one), ``dont_merge_cookies`` and ``proxy``
(only one of the job's)."""

from __future__ import annotations

import pytest
import requests

from tasks.fetch import fetching, identity, outcomes, proxies, sessions

POOL = ["http://${CRAWL_PROXY_USER}:${CRAWL_PROXY_PASS}@127.0.0.3:3128",
        "socks5://proxy.test:1080", "https://${CRAWL_PROXY_HOST}:8443"]  # fmt: skip


def test_a_requests_cookiejar_names_a_session_of_its_own():
    assert sessions.jar_of(None) == sessions.jar_of({"meta": {}}) == ""
    assert sessions.jar_of({"meta": {"cookiejar": None}}) == ""
    assert sessions.jar_of({"meta": {"cookiejar": "alice"}}) == '"alice"'
    assert sessions.jar_of({"meta": {"cookiejar": 1}}) != sessions.jar_of({"meta": {
        "cookiejar": "1"}})  # as Scrapy's jars are keyed: 1 and "1" are two  # fmt: skip
    long = sessions.jar_of({"meta": {"cookiejar": "x" * 500}})
    assert len(long) == 40
    who = identity.Identity("UA", "", 0)
    assert identity.Identity("UA", "", 0, jar='"alice"').key == who.key + '.jar="alice"'


def test_a_sessions_jar_is_checkpointed_and_restored_as_the_default_one(redis):
    jar = '"alice"'
    who, default = identity.Identity("UA", "", 0, jar=jar).key, identity.Identity("UA", "", 0).key
    mine, theirs = requests.cookies.RequestsCookieJar(), requests.cookies.RequestsCookieJar()
    mine.set("session", "alice", domain="shop.test", path="/")
    theirs.set("session", "carol", domain="shop.test", path="/")
    sessions.save(7, "shop.test", who, sessions.Jar(), mine)
    sessions.save(7, "shop.test", default, sessions.Jar(), theirs)
    kept = sessions.snapshot(7)
    assert len(kept) == 2
    redis.flushdb()
    assert sessions.restore(7, kept) == 2
    assert [c["value"] for c in sessions.load(7, "shop.test", who).cookies] == ["alice"]
    assert [c["value"] for c in sessions.load(7, "shop.test", default).cookies] == ["carol"]


def test_a_requests_proxy_must_be_one_of_the_jobs(monkeypatch):
    monkeypatch.setenv("CRAWL_PROXY_HOST", "127.0.0.9")
    # the same scheme, host and port: the job's URL, with the job's credentials
    assert proxies.requested("http://127.0.0.3:3128", POOL) == POOL[0]
    assert proxies.requested("http://someone:else@127.0.0.3:3128", POOL) == POOL[0]
    assert proxies.requested("socks5://PROXY.test:1080", POOL) == POOL[1]
    assert proxies.requested("https://127.0.0.9:8443", POOL) == POOL[2]  # its host expanded
    assert proxies.requested(None, []) == ""  # no proxy, in a job without any
    for asked, shown in [("http://127.0.0.3:3129", "proxy http://127.0.0.3:3129"),
                         ("https://127.0.0.3:3128", "proxy https://127.0.0.3:3128"),
                         ("http://me:s3cret@10.0.0.1", "proxy http://10.0.0.1")]:  # fmt: skip
        with pytest.raises(outcomes.BlockedAddress, match="is not one of the job's proxies") as no:
            proxies.requested(asked, POOL)
        assert shown in str(no.value) and "s3cret" not in str(no.value)
    with pytest.raises(outcomes.BlockedAddress, match="asks for no proxy"):
        proxies.requested(None, POOL)


def test_a_requests_proxy_is_filled_with_the_jobs_credentials(monkeypatch):
    monkeypatch.setenv("CRAWL_PROXY_USER", "u")
    monkeypatch.setenv("CRAWL_PROXY_PASS", "p")
    visitor = fetching.Visitor(proxy="socks5://proxy.test:1080")
    fetching.Asked.of({"url": "http://s.test/", "meta": {"proxy": "http://127.0.0.3:3128"}},
                      visitor, (), proxies=POOL)  # fmt: skip
    assert visitor.proxy == "http://u:p@127.0.0.3:3128"
    monkeypatch.delenv("CRAWL_PROXY_PASS")
    with pytest.raises(outcomes.ProxyFailed, match=r"needs \$\{CRAWL_PROXY_PASS\}"):
        fetching.Asked.of({"url": "http://s.test/", "meta": {"proxy": "http://127.0.0.3:3128"}},
                          fetching.Visitor(), (), proxies=POOL)  # fmt: skip


def _visitor() -> fetching.Visitor:
    jar = requests.cookies.RequestsCookieJar()
    jar.set("session", "carol", domain="s.test", path="/")
    return fetching.Visitor(cookies=jar)


def test_dont_merge_cookies_sends_only_a_cookie_header_of_its_own_and_keeps_nothing():
    kept = {"url": "http://s.test/", "cookies": {"own": "1"}, "headers": [["Cookie", "h=1"]],
            "meta": {"dont_merge_cookies": True}}  # fmt: skip
    visitor = _visitor()
    asked = fetching.Asked.of(kept, visitor, ())
    assert asked.headers == (("Cookie", "h=1"),)
    assert list(visitor.cookies) == []  # neither the jar's nor its own cookies=
    visitor.set_cookies.set("later", "1", domain="s.test")
    assert list(visitor.set_cookies) == []  # what the answer sets is not kept


def test_without_dont_merge_cookies_the_jars_cookies_replace_a_cookie_header():
    kept = {"url": "http://s.test/", "cookies": {"own": "1"}, "headers": [["Cookie", "h=1"],
                                                                          ["X-A", "b"]]}
    visitor = _visitor()
    asked = fetching.Asked.of(kept, visitor, ())
    assert asked.headers == (("X-A", "b"),)
    assert sorted(c.name for c in visitor.cookies) == ["own", "session"]
    assert [c.name for c in visitor.set_cookies] == ["own"]  # kept in the jar, as Scrapy's


def test_a_requests_cookies_are_kept_for_its_paths_directory_or_the_domain_and_path_they_name():
    kept = {"url": "http://s.test/echo/b/second", "cookies": [
        {"name": "here", "value": "1"}, {"name": "site", "value": "2", "path": "/"},
        {"name": "wide", "value": "3", "domain": "s.test", "path": "/"}]}  # fmt: skip
    visitor = fetching.Visitor()
    fetching.Asked.of(kept, visitor, ())
    assert {c.name: (c.domain, c.path) for c in visitor.cookies} == {
        "here": ("s.test", "/echo/b"), "site": ("s.test", "/"), "wide": (".s.test", "/")}
    sent = requests.Request("GET", "http://s.test/echo/a/third", cookies=visitor.cookies)
    assert sent.prepare().headers["Cookie"] == "site=2; wide=3"  # as Scrapy's jar sends them
