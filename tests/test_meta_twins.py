"""Scrapy's meta keys ``cookiejar``, ``dont_merge_cookies`` and ``proxy``: the same spiders
run under Scrapy 2.19 and, their imports changed, on the platform with two worker processes,
against a local site that sets and reads cookies and local forward proxies, give the same
items; and what the platform refuses (a proxy that is not the job's) ends its URL saying so."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

import pytest

from tests import twins
from tests.antibot import ForwardProxy
from tests.site import LocalSite, send
from web.models import CrawlJob, FrontierURL

pytestmark = pytest.mark.django_db(transaction=True)


class CookieSite(LocalSite):
    """``/login?user=U`` sets ``session=U``; ``/set?name=N`` sets ``N=1``; ``/echo/...``
    answers with the ``Cookie`` header it was sent and the address it came from, as JSON in
    the page's title."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                headers = {}
                if parts.path == "/login":
                    headers["Set-Cookie"] = f"session={query['user']}; Path=/"
                elif parts.path == "/set":
                    headers["Set-Cookie"] = f"{query['name']}=1; Path=/"
                seen = json.dumps({"cookie": self.headers.get("Cookie"),
                                   "from": self.client_address[0]})  # fmt: skip
                body = f"<html><head><title>{seen}</title></head><body>ok</body></html>"
                send(self, 200, headers, body.encode())

        super().__init__(Handler)


SESSIONS = '''
import json

import scrapy


class SessionsSpider(scrapy.Spider):
    name = "twin_sessions"

    async def start(self):
        for user in ("alice", "bob"):  # two sessions of their own, each logged in
            yield scrapy.Request(f"{self.base}/login?user={user}", callback=self.logged_in,
                                 meta={"cookiejar": user})
        yield scrapy.Request(f"{self.base}/login?user=carol", callback=self.logged_in)

    def logged_in(self, response):
        jar = response.meta.get("cookiejar")
        for n in range(8):
            yield scrapy.Request(f"{self.base}/echo/{jar}/{n}", callback=self.echo,
                                 meta={"cookiejar": jar})
        if jar is None:  # the default session: requests that leave its jar alone
            yield scrapy.Request(f"{self.base}/echo/private", callback=self.echo,
                                 cookies={"own": "1"}, headers={"Cookie": "manual=1"},
                                 meta={"dont_merge_cookies": True})
            yield scrapy.Request(f"{self.base}/echo/header", callback=self.echo,
                                 headers={"Cookie": "manual=1"})
            yield scrapy.Request(f"{self.base}/set?name=unkept", callback=self.unkept,
                                 meta={"dont_merge_cookies": True})

    def unkept(self, response):
        yield scrapy.Request(f"{self.base}/echo/after-unkept", callback=self.echo)

    def echo(self, response):
        seen = json.loads(response.css("title::text").get())
        yield {"url": response.url, "jar": response.meta.get("cookiejar"),
               "cookie": sorted((seen["cookie"] or "").split("; "))}
'''


def test_cookie_sessions_of_one_job_are_kept_apart_across_two_workers_as_in_scrapy(
    worker_env, tmp_path
):
    with CookieSite() as site:
        args = {"base": site.base}
        scrapy = twins.under_scrapy(SESSIONS, tmp_path, args)
        ours = twins.on_platform(SESSIONS, "twin_sessions", worker_env, tmp_path, args,
                                 ["--workers", "2", "--concurrency", "4"])  # fmt: skip
    assert twins.same(ours.items) == twins.same(scrapy.items)
    seen = {(i["jar"], tuple(i["cookie"])) for i in scrapy.items if "/echo/" in i["url"]}
    assert ("alice", ("session=alice",)) in seen and ("bob", ("session=bob",)) in seen
    by_url = {i["url"].rsplit("/", 1)[1]: i["cookie"] for i in scrapy.items}
    assert by_url["private"] == ["manual=1"]  # dont_merge_cookies: its own header alone
    assert by_url["header"] == ["session=carol"]  # otherwise the jar's, not its own header
    assert by_url["after-unkept"] == ["session=carol"]  # what dont_merge_cookies met: not kept


PROXIED = '''
import json

import scrapy


class ProxiedSpider(scrapy.Spider):
    name = "twin_proxied"

    async def start(self):
        for n, proxy in enumerate([self.first, self.second, self.first]):
            yield scrapy.Request(f"{self.base}/echo/{n}", meta={"proxy": proxy},
                                 callback=self.parse)

    def parse(self, response):
        seen = json.loads(response.css("title::text").get())
        yield {"url": response.url, "through": seen["from"]}
'''


def test_a_requests_own_proxy_of_the_jobs_takes_it_there_as_in_scrapy(worker_env, tmp_path):
    with (CookieSite() as site, ForwardProxy("127.0.0.2") as first,
          ForwardProxy("127.0.0.4") as second):  # fmt: skip
        args = {"base": site.base, "first": first.url(), "second": second.url()}
        scrapy = twins.under_scrapy(PROXIED, tmp_path, args)
        ours = twins.on_platform(PROXIED, "twin_proxied", worker_env, tmp_path, args,
                                 ["--workers", "2", "--proxy", first.url(), "--proxy",
                                  second.url()])  # fmt: skip
    assert twins.same(ours.items) == twins.same(scrapy.items)
    assert sorted(i["through"] for i in scrapy.items) == ["127.0.0.2", "127.0.0.2", "127.0.0.4"]


def test_a_proxy_that_is_not_the_jobs_ends_its_url_saying_so_and_nothing_goes_direct(
    worker_env, tmp_path
):
    with (CookieSite() as site, ForwardProxy("127.0.0.2") as allowed,
          ForwardProxy("127.0.0.4") as other):  # fmt: skip
        args = {"base": site.base, "first": other.url(), "second": allowed.url()}
        ours = twins.on_platform(PROXIED, "twin_proxied", worker_env, tmp_path, args,
                                 ["--proxy", allowed.url()])  # fmt: skip
        assert other.requests == 0
    assert [i["through"] for i in ours.items] == ["127.0.0.2"]
    job = CrawlJob.objects.get(spider="twin_proxied")
    refused = FrontierURL.objects.filter(job=job, error_reason="blocked_address")
    assert sorted(u.url.rsplit("/", 1)[1] for u in refused) == ["0", "2"]
    assert all(f"proxy {other.url()} in the request's meta is not one of the job's proxies"
               in u.error_message for u in refused)  # fmt: skip


def test_a_requests_proxy_of_the_jobs_still_passes_the_address_guard(worker_env, tmp_path):
    with (CookieSite() as site,
          ForwardProxy("127.0.0.2", listen="127.0.0.3") as guarded):  # fmt: skip
        args = {"base": site.base, "first": guarded.url(), "second": guarded.url()}
        env = {**worker_env, "CRAWL_ALLOWED_NETWORKS": "127.0.0.1/32"}  # the site's, not 127.0.0.3
        ours = twins.on_platform(PROXIED, "twin_proxied", env, tmp_path, args,
                                 ["--proxy", guarded.url()])  # fmt: skip
        assert guarded.requests == 0
    assert ours.items == []
    refused = FrontierURL.objects.filter(job__spider="twin_proxied", error_reason="blocked_address")
    assert refused.count() == 3
    assert all(f"proxy {guarded.url()} refused" in u.error_message for u in refused)
