"""Spider jobs in-process against the local shop (tests/shop.py), the real database and
Redis: the example spider's items exactly, POST dedup by body, and how user code fails."""

from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler

import pytest
from django.utils import timezone

from crawlplatform.spiders import Spider
from tasks import engine
from tasks.content import callbacks, spiders
from tasks.defaults import setting
from tasks.frontier import jobs
from tests import chaos
from tests.conftest import wait_for
from tests.shop import Shop, expected_products, expected_stock
from tests.site import LocalSite, Site, send
from web.models import PENDING_STATES, CrawlJob, FrontierURL, Item, JobState, URLState

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def installed(monkeypatch, redis, fast):
    monkeypatch.setenv("CRAWL_SPIDER_MODULES", "tests.spiders")
    spiders._classes.clear()
    yield
    spiders._classes.clear()
    spiders._instances.clear()


def run_job(job: CrawlJob, rounds: int = 60) -> None:
    """Process every URL the job has until none is pending, as workers would."""
    for _ in range(rounds):
        pending = list(FrontierURL.objects.filter(job=job, state=URLState.QUEUED))
        if not pending:
            return
        for row in pending:
            FrontierURL.objects.filter(pk=row.pk, state=URLState.QUEUED).update(
                state=URLState.SCHEDULED, not_before=timezone.now()
            )
            engine.process(row.pk, job.pk)
    raise AssertionError("URLs still pending")


def shop_job(shop: Shop, **args) -> CrawlJob:
    job = jobs.create_job([], spider="shop", max_depth=20, spider_args={
        "base": shop.base, "user": "alice", "password": "s3cret", **args})  # fmt: skip
    jobs.start(job)
    job.refresh_from_db()
    return job


def kept(job: CrawlJob) -> list[dict]:
    return list(Item.objects.filter(job=job, dropped="").values_list("data", flat=True))


def by_sku(items: list[dict]) -> list[dict]:
    return sorted(items, key=lambda i: (i["kind"], i["sku"]))


def test_the_shop_spider_logs_in_and_yields_exactly_the_expected_items(installed):
    with Shop() as shop:
        job = shop_job(shop)
        assert job.state == JobState.RUNNING, job.error
        assert job.settings == {"RETRY_MAX_ATTEMPTS": 2, "FETCH_READ_TIMEOUT_S": 5.0}
        assert (job.delay, job.allowed_domains) == (0, ["127.0.0.1"])
        assert job.headers == {"Accept-Language": "en"}
        own = jobs.create_job([], spider="shop", headers={"Accept-Language": "de", "X-Team": "a"},
                              spider_args={"base": shop.base})  # fmt: skip
        jobs.start(own)
        own.refresh_from_db()
        assert own.headers == {"Accept-Language": "de", "X-Team": "a"}  # the job's own win
        run_job(job)
    assert by_sku(kept(job)) == by_sku(expected_products() + expected_stock())
    assert shop.hits["POST /login"] == 1
    assert not [k for k, n in shop.hits.items() if n > 1 and k != "GET /robots.txt"]


def test_broken_products_end_as_schema_drop_pipeline_error_and_spider_error(installed):
    with Shop() as shop:
        job = shop_job(shop)
        run_job(job)
    dropped = dict(Item.objects.filter(job=job).exclude(dropped="").values_list(
        "data__sku", "dropped"))  # fmt: skip
    assert dropped["SKU-0007"] == "no price"
    assert dropped["SKU-0008"].startswith("schema: price: -3.0 is less than the minimum of 0")
    assert dropped["SKU-0010"] == "pipeline_error"
    failed = FrontierURL.objects.get(job=job, url__endswith="/product/9")
    assert (failed.state, failed.error_reason, failed.attempts) == ("failed", "spider_error", 1)
    assert failed.error_message.startswith("AttributeError: 'NoneType' object has no attribute")
    assert "parse_product" in failed.error_message  # the traceback's last lines


def test_a_callback_error_is_retried_only_when_the_request_asks(installed):
    with Shop() as shop:
        job = jobs.create_job([], spider="stubborn", spider_args={"base": shop.base})
        jobs.start(job)
        run_job(job)
    failed = FrontierURL.objects.get(job=job, url=shop.url("/product/9"))
    assert (failed.state, failed.error_reason, failed.attempts) == ("failed", "spider_error", 3)
    assert shop.hits["GET /product/9"] == 3  # RETRY_MAX_ATTEMPTS of the test budgets


def test_a_request_whose_meta_is_not_json_fails_the_page_that_yielded_it(installed):
    with Shop() as shop:
        job = jobs.create_job([], spider="unkeepable", spider_args={"base": shop.base})
        jobs.start(job)
        run_job(job)
    page = FrontierURL.objects.get(job=job, url__contains="/login")
    assert (page.state, page.error_reason) == ("failed", "spider_error")
    assert page.error_message.startswith(f"ValueError: <GET {shop.url('/account')}>: meta, "
                                         "cb_kwargs and cookies must be JSON")  # fmt: skip
    assert not Item.objects.filter(job=job).exists()  # nothing of the page is kept


def test_what_json_has_no_type_for_in_meta_and_cb_kwargs_comes_back_as_it_was(installed):
    """A Decimal, a set, a date, a tuple, an ``Item`` and a dataclass carried in ``meta`` and
    ``cb_kwargs`` reach the callback with their types, as under Scrapy: a loader given the
    item applies its fields' processors (Scrapy 2.19's item for the same spider and site)."""
    with Site(pages=3) as site:
        job = jobs.create_job([], spider="carrying", spider_args={"seed": site.url("/p/0")})
        jobs.start(job)
        run_job(job)
    assert kept(job) == [{"price": "9.90", "seen": [1, 2], "when": "2026-01-02", "pair": [1, 2],
                          "book": {"title": "Page 1", "price": "9.90"}, "pages": [0],
                          "types": ["Decimal", "set", "date", "tuple", "Book", "Decimal", "Seen",
                                    "date"]}]  # fmt: skip


def test_async_callbacks_and_pipelines_share_one_loop_as_on_scrapys_reactor(installed):
    """What async code made in one call (a connection, a client session) serves the next: a
    worker runs every coroutine of the spider and its pipelines on one loop."""
    with Site(pages=12) as site:
        job = jobs.create_job([], spider="one_loop", spider_args={"seed": site.url("/p/0")})
        jobs.start(job)
        run_job(job)
    items = kept(job)
    assert len(items) >= 12
    assert {(i["callback_loops"], i["pipeline_same_loop"]) for i in items} == {(1, True)}


def test_a_spiders_user_agent_and_http_auth_arguments_are_sent_as_under_scrapy(installed):
    """Scrapy's ``UserAgentMiddleware`` and ``HttpAuthMiddleware`` read the spider's
    ``user_agent``, ``http_user``, ``http_pass`` and ``http_auth_domain`` (Scrapy's docs pass
    them as ``-a`` arguments), and a request's ``meta`` credentials."""
    sent: dict[str, tuple[str, str]] = {}

    class Recording(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            sent[self.path] = (self.headers.get("User-Agent"), self.headers.get("Authorization"))
            send(self, 200, {}, b"<html><body>ok</body></html>")

        def log_message(self, *args) -> None:
            pass

    with LocalSite(Recording) as site, LocalSite(Recording, "127.0.0.2") as other:
        job = jobs.create_job([], spider="introduced", spider_args={
            "seed": site.base, "other": other.base, "user_agent": "mybot/1.0",
            "http_user": "me", "http_pass": "secret", "http_auth_domain": "127.0.0.1"})
        jobs.start(job)
        run_job(job)
    assert len(kept(job)) == 4
    assert sent == {
        "/robots.txt": ("mybot/1.0", None),
        "/a": ("mybot/1.0", "Basic bWU6c2VjcmV0"),  # me:secret, on its domain
        "/b": ("mybot/1.0", None),  # another host: none
        "/c": ("mybot/1.0", "Basic b3duOnB3"),  # own:pw, the request's own
        "/d": ("mybot/1.0", "Bearer t"),  # its own header stands
    }


def test_two_posts_with_different_bodies_are_two_requests_and_the_same_body_one(installed):
    with Shop() as shop:
        job = jobs.create_job([], spider="search", spider_args={"base": shop.base})
        jobs.start(job)
        run_job(job)
    assert shop.hits["POST /search"] == 2
    assert sorted(i["q"] for i in kept(job)) == ["hats", "shoes"]


def test_request_priorities_reach_the_frontier_and_order_its_release(installed):
    from tasks.frontier import release

    with Shop() as shop:
        job = jobs.create_job([], spider="ranked", spider_args={"base": shop.base})
        jobs.start(job)
        job.refresh_from_db()
        ranks = dict(FrontierURL.objects.filter(job=job).values_list("url", "priority"))
        assert ranks == {f"{shop.base}/gone": -1, f"{shop.base}/login": 32767}
        due = release._candidates(job, 10, [], lock=False)
        assert [row.url for row in due] == [f"{shop.base}/login", f"{shop.base}/gone"]
        FrontierURL.objects.filter(pk=due[0].id).update(state=URLState.SCHEDULED)
        engine.process(due[0].id, job.pk)
    assert FrontierURL.objects.get(job=job, url=f"{shop.base}/account").priority == 3
    assert kept(job) == [{"priority": 32767}]  # the callback's request has its row's priority


def test_a_job_naming_a_spider_that_is_not_installed_fails_at_start_with_the_import_error(
    installed,
):
    job = jobs.create_job([], spider="broken")
    jobs.start(job)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "no spider named 'broken' is installed" in job.error
    assert "ModuleNotFoundError: No module named 'crawlplatform.spiders.nothing_here'" in job.error


def test_custom_settings_a_job_cannot_have_fail_it_at_start_naming_them(installed):
    job = jobs.create_job([], spider="odd_settings")
    jobs.start(job)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "DOWNLOAD_DELAY: 'soon' cannot be taken" in job.error
    assert "CLOSESPIDER_ERRORCOUNT: a Scrapy setting the platform has no equivalent of" in job.error
    assert "FETCH_READ_TIMEOUT: no such setting" in job.error and "docs/spiders.md" in job.error
    assert "SHOP_FEED_TAG" not in job.error


def test_a_finished_spider_job_writes_its_items_feed_and_counts_drops(installed):
    from tasks.content import bodies
    from tasks.frontier.scheduler import finish_if_done

    with Shop() as shop:
        job = shop_job(shop)
        run_job(job)
    finish_if_done(job)
    job.refresh_from_db()
    assert job.stats["items"] == len(expected_products() + expected_stock())
    assert job.stats["drops"] == {"no price": 1, "schema": 1, "pipeline_error": 1}
    with bodies.storage().open(job.stats["items_feed"], "rb") as feed:
        assert len(feed.read().decode().splitlines()) == job.stats["items"]


def test_a_jobs_pipelines_close_once_when_its_run_ends_not_when_the_worker_leaves(installed):
    """close_spider runs once a process and run: not while the job runs or is paused, once
    its run ends (finished; cancelled, seen from an idle worker's heartbeat); the same
    process's other jobs keep theirs. The job's start opens and closes them once too (in the
    process that starts it), so that a pipeline that cannot open fails the job there."""
    from tasks.content import pipelines
    from tasks.frontier.scheduler import finish_if_done
    from tests.spiders.shop import CleanPrice, ShopSpider

    def closed(job: CrawlJob) -> list[int]:
        return [seen for job_id, seen in CleanPrice.closed if job_id == job.pk]

    CleanPrice.closed.clear()
    ShopSpider.ended.clear()
    with Shop() as shop:
        job, other = shop_job(shop), shop_job(shop)
        assert closed(job) == closed(other) == [0]  # the start's: it yields no item
        run_job(job)
        run_job(other)
        pipelines.close_ended(every=0)
        assert closed(job) == closed(other) == [0]  # both still running
        finish_if_done(job)
        jobs.pause(other)
        pipelines.close_ended(every=0)
        seen = Item.objects.filter(job=job).count()  # every item reaches it, kept or dropped
        assert seen > 20 and closed(job) == [0, seen] and closed(other) == [0]
        jobs.resume(other)
        jobs.cancel(other)
        pipelines._looked[0] = 0.0  # the heartbeat's look is not held back by the last one
        pipelines.close_ended_soon()  # as the heartbeat calls it: on a thread of its own
        wait_for(lambda: len(closed(other)) == 2, 5, "the cancelled job's pipelines closed")
        with pipelines._looking:  # its thread is done, its connection closed
            pass
    assert closed(job) == [0, seen] and closed(other) == [0, seen]
    assert pipelines.opened() == 0
    ours = sorted(e for e in ShopSpider.ended if e[0] in (job.pk, other.pk))  # none at start
    assert ours == [(job.pk, "finished"), (other.pk, "cancelled")]


def test_pipelines_a_page_holds_when_its_run_ends_close_when_it_gives_them_back(installed):
    """A page between its callback and its items' turn in the pipelines keeps them open."""
    from tasks.content import pipelines
    from tasks.frontier.claims import Claim
    from tests.spiders.shop import CleanPrice

    CleanPrice.closed.clear()
    with Shop() as shop:
        job = shop_job(shop)
    claimed = Claim(url=FrontierURL.objects.filter(job=job).first(), job=job, attempt=1,
                    run=job.run)  # fmt: skip
    held = pipelines.take(claimed, spiders.for_job(job))
    jobs.cancel(job)
    pipelines.close_ended(every=0)
    assert CleanPrice.closed == [(job.pk, 0)]  # the start's only: the page still holds them
    assert held.pipes.process({"kind": "stock", "sku": "SKU-0001"}) == (
        {"kind": "stock", "sku": "SKU-0001"}, "")  # fmt: skip
    pipelines.give_back(held)
    assert CleanPrice.closed == [(job.pk, 0), (job.pk, 1)]
    assert pipelines.opened() == 0


def test_a_process_leaving_waits_for_a_close_under_way_within_a_callbacks_time(
    installed, monkeypatch
):
    """The process leaves while its closing thread (a daemon) runs a slow close_spider: the
    exit waits for it, so that what the pipeline flushes at its close is not cut short; one
    that runs past SPIDER_CALLBACK_TIMEOUT_S holds the exit up no longer."""
    from tasks.content import pipelines
    from tasks.frontier.claims import Claim
    from tests.spiders.shop import CleanPrice

    def slow_close(self, spider):
        time.sleep(float(self.pause))
        self.closed.append((spider.job_id, "flushed"))

    def leave_while_closing(pause: float) -> list:
        with Shop() as shop:
            job = shop_job(shop)
        monkeypatch.setattr(CleanPrice, "close_spider", slow_close)
        monkeypatch.setattr(CleanPrice, "pause", pause, raising=False)
        CleanPrice.closed.clear()
        claimed = Claim(url=FrontierURL.objects.filter(job=job).first(), job=job, attempt=1,
                        run=job.run)  # fmt: skip
        pipelines.give_back(pipelines.take(claimed, spiders.for_job(job)))
        jobs.cancel(job)
        pipelines._looked[0] = 0.0
        pipelines.close_ended_soon()  # the look and the slow close, on their thread
        wait_for(lambda: not pipelines.opened(), 2, "the ended run's pipelines taken to close")
        assert CleanPrice.closed == []  # still closing
        pipelines.close_all()  # what the process runs as it leaves
        return [what for _, what in CleanPrice.closed]

    assert leave_while_closing(1.0) == ["flushed"]
    monkeypatch.setenv("CRAWL_SPIDER_CALLBACK_TIMEOUT_S", "0.5")
    assert leave_while_closing(3.0) == []  # the exit went on without it
    wait_for(lambda: CleanPrice.closed, 5, "the hung close ends on its own")
    with pipelines._looking:  # its thread is done, its connection closed
        pass


def test_a_worker_that_cannot_open_the_pipelines_retries_the_url_and_holds_nothing(
    installed, monkeypatch
):
    """A pipeline that cannot open in a worker (a credential missing there, say) ends the
    URL's attempt as spider_unavailable, to be tried again; no pipelines are left held."""
    from tasks.content import pipelines
    from tests.spiders.shop import CleanPrice

    with Shop() as shop:
        job = shop_job(shop)

        def refuse(self, spider):
            raise RuntimeError("no credentials here")

        monkeypatch.setattr(CleanPrice, "open_spider", refuse)
        url = FrontierURL.objects.get(job=job)
        FrontierURL.objects.filter(pk=url.pk).update(state=URLState.SCHEDULED,
                                                     not_before=timezone.now())  # fmt: skip
        engine.process(url.pk, job.pk)
    url.refresh_from_db()
    assert (url.state, url.error_reason) == (URLState.QUEUED, "spider_unavailable")
    assert "RuntimeError: no credentials here" in url.error_message
    assert pipelines.opened() == 0 and not Item.objects.filter(job=job).exists()


def test_a_spider_job_from_the_api_runs_and_its_items_are_paginated_and_streamed(
    installed, django_user_model
):
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_login(django_user_model.objects.create_user("alice", is_staff=True))
    with Shop() as shop:
        made = api.post("/api/jobs/", {"spider": "shop", "spider_args": {
            "base": shop.base, "user": "alice", "password": "s3cret"}}, format="json")  # fmt: skip
        assert made.status_code == 201, made.json()
        assert api.post(f"/api/jobs/{made.json()['id']}/start/").status_code == 200
        job = CrawlJob.objects.get(pk=made.json()["id"])
        run_job(job)
    expected = by_sku(expected_products() + expected_stock())
    rows, url = [], f"/api/jobs/{job.pk}/items/?page_size=7"
    while url:
        page = api.get(url).json()
        rows += page["results"]
        url = page["next"]
    assert by_sku([r["data"] for r in rows]) == expected
    assert all(r["url"] and r["spider"] == "shop" for r in rows)
    dropped = api.get(f"/api/jobs/{job.pk}/items/?dropped=no price").json()["results"]
    assert [r["data"]["sku"] for r in dropped] == ["SKU-0007"]
    streamed = api.get(f"/api/jobs/{job.pk}/items/export/?format=jsonl")
    lines = b"".join(streamed.streaming_content).decode().splitlines()
    assert by_sku([json.loads(line) for line in lines]) == expected
    table = b"".join(api.get(f"/api/jobs/{job.pk}/items/export/?format=csv").streaming_content)
    assert len(table.decode().splitlines()) == len(expected) + 1
    stats = api.get(f"/api/jobs/{job.pk}/stats/").json()
    assert stats["items"] == len(expected)
    assert stats["drops"] == {"no price": 1, "schema": 1, "pipeline_error": 1}


def test_a_spider_job_from_a_spec_runs(installed, tmp_path):
    from django.core.management import call_command

    with Shop() as shop:
        spec = tmp_path / "shop.yaml"
        spec.write_text(f"""\
apiVersion: crawlplatform/v1
kind: CrawlJob
metadata: {{name: shop}}
spec:
  spider: shop
  spider_args: {{base: "{shop.base}", user: alice, password: s3cret}}
""")
        call_command("apply", "-f", str(spec))
        job = CrawlJob.objects.get(name="shop")
        assert (job.spider, job.seeds, job.max_depth) == ("shop", [], 32767)
        jobs.start(job)
        run_job(job)
    assert by_sku(kept(job)) == by_sku(expected_products() + expected_stock())


class Redirecting(LocalSite):
    """``/`` links to ``/r/X``, each redirecting to a ``/t/N`` (or to ``/a/5``), and to
    some of those targets; ``/r/e`` (a ``dont_filter`` request) and ``/r/a`` both lead to
    ``/t/1``, ``/r/c1`` and ``/r/c2`` to ``/t/3``, ``/r/g`` (another callback) to ``/t/7``,
    ``/r/h`` to ``/t/8`` (requested for another callback); ``/s/N`` answers status N with
    no ``Location``. Two spellings of one query URL too. ``asked``: the paths requested, as
    sent."""

    TARGETS = {"/r/a": "/t/1", "/r/b": "/t/2", "/r/c1": "/t/3", "/r/c2": "/t/3", "/r/e": "/t/1",
               "/r/f": "/a/5", "/r/g": "/t/7", "/r/h": "/t/8", "/r/m": "mailto:a@example.com",
               "/r/n": "ftp://127.0.0.1/f"}  # fmt: skip
    LINKS = ["/r/a", "/t/1", "/r/b", "/r/c1", "/r/c2", "/a/5", "/r/f", "/t/7",
             "/q?b=2&a=1&flag", "/q?a=1&b=2&flag="]  # fmt: skip

    def __init__(self) -> None:
        site = self
        self.asked: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.asked.append(self.path)
                if self.path in site.TARGETS:
                    send(self, 301 if self.path < "/r/c" else 302,
                         {"Location": site.TARGETS[self.path]}, b"")  # fmt: skip
                    return
                if self.path.startswith("/s/"):  # a 3xx with no Location: not followed
                    status = int(self.path[3:])
                    send(self, status, {}, b"" if status == 304 else b"<p>choose</p>")
                    return
                send(self, *site.page(self.path))

            def log_message(self, *args) -> None:
                pass

        super().__init__(Handler)

    def page(self, path: str) -> tuple[int, dict, bytes]:
        links = self.LINKS if path == "/" else []
        body = "".join(f'<a href="{href}">{href}</a>' for href in links)
        return 200, {}, f"<html><body>{body}</body></html>".encode()


@pytest.mark.parametrize("looked", ["before the callback", "only in the commit"])
def test_a_page_reached_through_redirects_yields_its_items_once(installed, monkeypatch, looked):
    if looked == "only in the commit":  # the target taken between the look and the commit
        monkeypatch.setattr(callbacks, "redirect_target_free", lambda *args: True)
    with Redirecting() as site:
        job = jobs.create_job([], spider="redirects", max_depth=5, spider_args={"base": site.base})
        jobs.start(job)
        run_job(job)
    items = sorted((i["url"].removeprefix(site.base), i.get("again", False), i.get("other", False))
                   for i in kept(job))  # fmt: skip
    assert items == [
        ("/", False, False),
        ("/a/5", False, False),  # fetched as itself: /r/f, later, stores nothing
        ("/q?b=2&a=1&flag", False, False),  # fetched as given, deduplicated as canonical
        ("/t/1", False, False),  # /r/a took the queued /t/1 ...
        ("/t/1", True, False),  # ... and dont_filter asked for it again, as in Scrapy
        ("/t/2", False, False),  # nothing else links to it: /r/b stores it
        ("/t/3", False, False),  # /r/c1 first: /r/c2 stores nothing
        ("/t/7", False, False),  # /r/g runs another callback: the queued /t/7 is its own
        ("/t/8", False, True),  # queued for another callback: /r/h (plain) leaves it be
    ]
    assert [path for path in site.asked if path.startswith("/q")] == ["/q?b=2&a=1&flag"]
    ends = dict(FrontierURL.objects.filter(job=job).values_list("url", "error_reason"))
    ends = {url.removeprefix(site.base): reason for url, reason in ends.items()}
    assert {url for url, reason in ends.items() if reason == "duplicate_redirect"} == {
        "/r/c2", "/r/f", "/r/g", "/r/h"}  # fmt: skip
    assert ends["/t/1"] == ends["/t/3"] == "fetched_via_redirect"


class RedirectingToErrors(Redirecting):
    """``/r/x`` redirects to ``/gone/1``, ``/r/y`` to ``/gone/2``, ``/r/loop1`` to
    ``/r/loop2`` and back, ``/r/off`` to another host, ``/r/refused`` to a port nothing
    listens on, ``/r/mN`` to ``/r/mN+1``; every other page is a 404."""

    def __init__(self) -> None:
        super().__init__()
        self.TARGETS = {"/r/x": "/gone/1", "/r/y": "/gone/2", "/r/loop1": "/r/loop2",
                        "/r/loop2": "/r/loop1", "/r/off": f"http://localhost:{self.server.server_address[1]}/t/1",
                        "/r/refused": f"http://127.0.0.1:{chaos.free_port()}/x",
                        **{f"/r/m{n}": f"/r/m{n + 1}" for n in range(5)}}  # fmt: skip

    def page(self, path: str) -> tuple[int, dict, bytes]:
        return 404, {}, b"<html><body>gone</body></html>"


@pytest.mark.parametrize("looked", ["before the errback", "only in the commit"])
def test_an_error_answer_reached_through_a_redirect_is_the_errbacks_once(
    installed, monkeypatch, looked
):
    """Scrapy 2.19's items for the same spider and site (``tests/spiders/redirects.py``): a
    redirect to a URL requested as its own is dropped, its errback not called; a URL first
    reached through a redirect is seen, and a request for it later is dropped; a redirect
    loop or one off the domains is dropped; a hop that cannot connect, or one redirect too
    many (``IgnoreRequest``), is the errback's, with the hop's request."""
    if looked == "only in the commit":  # the target inserted between the look and the commit
        monkeypatch.setattr(callbacks, "redirect_target_seen", lambda *args: False)
    with RedirectingToErrors() as site:
        job = jobs.create_job([], spider="redirected_errors", spider_args={"base": site.base})
        jobs.start(job)
        run_job(job)
    items = sorted((i["url"].removeprefix(site.base), i["status"], i["raised"],
                    [u.removeprefix(site.base) for u in i["redirect_urls"]])
                   for i in kept(job))  # fmt: skip
    refused = site.TARGETS["/r/refused"]
    assert items == [("/gone/1", 404, "HttpError", []), ("/gone/2", 404, "HttpError", ["/r/y"]),
                     ("/r/m3", None, "IgnoreRequest", ["/r/m0", "/r/m1", "/r/m2"]),
                     (refused, None, "DownloadConnectionRefusedError", ["/r/refused"])]  # fmt: skip
    assert "/r/m4" not in site.asked  # REDIRECT_MAX_TIMES 3: the 4th hop is not taken
    ends = dict(FrontierURL.objects.filter(job=job).values_list("url", "error_reason"))
    assert ends[site.url("/r/x")] == "duplicate_redirect"
    assert ends[site.url("/gone/2")] == "fetched_via_redirect"  # seen: asked for once only
    assert site.asked.count("/gone/2") == 1
    assert (ends[site.url("/r/loop1")], ends[site.url("/r/off")]) == (
        "redirect_loop", "out_of_scope")  # no errback: Scrapy's filters drop the hop  # fmt: skip


def test_a_post_a_redirect_turns_into_a_get_is_that_get_to_the_duplicate_filter(installed):
    """Scrapy 2.19's items for the same spider and site (``tests/spiders/redirects.py``)."""

    class Posted(Redirecting):
        TARGETS = {"/r/1": "/t/1"}

        def __init__(self) -> None:
            super().__init__()
            site, handler = self, self.server.RequestHandlerClass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers["Content-Length"]))
                site.asked.append(f"POST {self.path}")
                send(self, 303, {"Location": "/t/" + self.path.rsplit("/", 1)[1]}, b"")

            handler.do_POST = do_POST

    with Posted() as site:
        job = jobs.create_job([], spider="posted_redirects", spider_args={"base": site.base})
        jobs.start(job)
        run_job(job)
    items = sorted((i["url"].removeprefix(site.base), i["method"]) for i in kept(job))
    assert items == [("/t/1", "GET"), ("/t/2", "GET")]  # each once
    ends = {url.removeprefix(site.base).split("#")[0]: reason for url, reason in
            FrontierURL.objects.filter(job=job).values_list("url", "error_reason")}  # fmt: skip
    assert (ends["/r/1"], ends["/post/2"]) == ("duplicate_redirect", "duplicate_redirect")


def test_redirects_a_request_keeps_are_its_answer_as_under_scrapy(installed):
    """Scrapy 2.19's items for the same spider and site (``tests/spiders/redirects.py``)."""
    with Redirecting() as site:
        job = jobs.create_job([], spider="unfollowed", spider_args={"base": site.base})
        jobs.start(job)
        run_job(job)
    items = sorted((i["url"].removeprefix(site.base), i["status"], i.get("location"),
                    i.get("http_error"), i.get("raised")) for i in kept(job))  # fmt: skip
    assert items == [
        ("/r/a", 301, "/t/1", None, None),
        ("/r/c1", 302, "/t/3", None, None),
        ("/r/c2", 302, None, True, "HttpError"),  # not handled: its errback, with HttpError
        ("/r/e", 302, "/t/1", None, None),
        ("/r/m", None, None, False, "ValueError"),  # mailto: no request Scrapy can make
        ("/r/n", 302, None, True, "HttpError"),  # ftp: the 3xx as it came
        ("/s/300", 300, "", None, None),  # in the request's list: its callback
        ("/s/304", 304, None, True, "HttpError"),  # not followed, not handled: its errback
        ("/t/7", 200, "", None, None),
    ]
    assert [path for path in site.asked if path.startswith("/t")] == ["/t/7"]
    ends = dict(FrontierURL.objects.filter(job=job).values_list("url", "error_reason"))
    assert ends[site.url("/r/c2")] == "http_3xx"
    assert ends[site.url("/s/302")] == "http_3xx"  # no Location, no errback: no callback


def test_a_spider_with_scrapys_redirect_and_retry_middlewares_off_follows_and_retries_none(
    installed
):
    with Redirecting() as site:
        job = jobs.create_job([], spider="unredirected", spider_args={"base": site.base})
        jobs.start(job)
        job.refresh_from_db()
        run_job(job)
    assert job.settings["RETRY_MAX_ATTEMPTS"] == 1  # RETRY_ENABLED off wins over RETRY_TIMES
    items = sorted((i["url"].removeprefix(site.base), i["status"], i.get("location"),
                    i.get("http_error")) for i in kept(job))  # fmt: skip
    assert items == [("/r/a", 301, None, True), ("/r/g", 302, "/t/7", None)]
    assert not [path for path in site.asked if path.startswith("/t")]


def test_requests_beyond_the_domains_go_where_scrapys_offsite_filter_lets_them(installed):
    """``dont_filter`` and ``allow_offsite`` requests reach another host, and their redirects
    there; the others are left out (Scrapy 2.19 fetches the same pages). The job's patterns
    still bound them: its exclude pattern leaves one out."""
    asked: list[str] = []

    class Other(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            asked.append(self.path)
            if self.path == "/hop":
                send(self, 302, {"Location": "/landed"}, b"")
            else:
                send(self, 200, {}, b"<html><body><a href='/linked'>a</a></body></html>")

        def log_message(self, *args) -> None:
            pass

    with Site(pages=1) as site, LocalSite(Other, "127.0.0.2") as other:
        where = {"first": site.url("/p/0"), "other": other.base}
        job = jobs.create_job([], spider="offsite", spider_args=where,
                              exclude_patterns=["/excluded"])  # fmt: skip
        jobs.start(job)
        run_job(job)
    job.refresh_from_db()
    assert job.allowed_domains == ["127.0.0.1"]
    assert sorted(i["url"].removeprefix(other.base) for i in kept(job)) == [
        "/again", "/allowed", "/landed", "/start", site.url("/p/0")]  # fmt: skip
    assert sorted(p for p in asked if p != "/robots.txt") == [
        "/again", "/allowed", "/hop", "/landed", "/start"]  # fmt: skip


def test_error_answers_go_to_the_callback_where_the_request_or_spider_handles_them(installed):
    class Erring(LocalSite):
        def __init__(self) -> None:
            class Handler(BaseHTTPRequestHandler):
                def do_GET(self) -> None:
                    if self.path.startswith("/slow"):
                        time.sleep(2)
                    status = 500 if self.path.startswith("/broken") else 404  # robots.txt too
                    if self.path.startswith("/refused/"):  # what a defended site answers
                        status = int(self.path.rsplit("/", 1)[1])
                    retry_after = {"Retry-After": "1"} if status == 503 else {}
                    send(self, status, retry_after,
                         f"<h1>{status} at {self.path}</h1>".encode() * 3000)  # fmt: skip

                def log_message(self, *args) -> None:
                    pass

            super().__init__(Handler)

    with Erring() as site:
        job = jobs.create_job([], spider="statuses", spider_args={"base": site.base})
        jobs.start(job)
        job.refresh_from_db()
        assert job.settings == {"RETRY_MAX_ATTEMPTS": 2}
        run_job(job)
    got = sorted((i["url"].removeprefix(site.base), i.get("status"), i.get("h1"),
                  i.get("http_error"), i.get("timeout"), i.get("raised"))
                 for i in kept(job))  # fmt: skip
    assert got == [
        ("/broken/1", 500, "500 at /broken/1", None, None, None),  # after retries, as Scrapy's
        ("/broken/2", 500, "500 at /broken/2", None, None, None),
        ("/broken/4", None, None, True, False, "HttpError"),  # dont_retry: one attempt
        ("/broken/5", None, None, True, False, "HttpError"),  # max_retry_times 0: the same
        ("/missing/1", 404, "404 at /missing/1", None, None, None),
        ("/missing/2", None, None, True, False, "HttpError"),  # its errback
        ("/refused/403", 403, "403 at /refused/403", None, None, None),  # no block: the spider's
        ("/refused/429", 429, "429 at /refused/429", None, None, None),
        ("/refused/503", 503, "503 at /refused/503", None, None, None),
        ("/slow/1", None, None, False, True, "DownloadTimeoutError"),  # 0.5 s, not the job's 30
    ]
    # What Scrapy 2.19's middlewares and downloader put in a start request's meta before it is
    # sent, its own download_timeout kept; depth only where an answer came back (Scrapy's
    # DepthMiddleware sets it on the response).
    deadline = setting("FETCH_DEADLINE_S", job)
    assert {i["url"].removeprefix(site.base): i["sent"] for i in kept(job) if "sent" in i} == {
        "/broken/4": [0, "127.0.0.1", deadline, True],
        "/broken/5": [0, "127.0.0.1", deadline, True],
        "/missing/2": [0, "127.0.0.1", deadline, True],
        "/slow/1": [None, "127.0.0.1", 0.5, True]}  # fmt: skip
    rows = {u.removeprefix(site.base): (state, reason, attempts)
            for u, state, reason, attempts in FrontierURL.objects.filter(job=job).values_list(
                "url", "state", "error_reason", "attempts")}  # fmt: skip
    assert rows == {"/missing/1": ("done", "", 1), "/broken/1": ("done", "", 2),
                    "/broken/2": ("done", "", 2), "/missing/2": ("failed", "http_4xx", 1),
                    "/broken/3": ("failed", "http_5xx", 2),
                    "/broken/4": ("failed", "http_5xx", 1), "/broken/5": ("failed", "http_5xx", 1),
                    "/slow/1": ("failed", "read_timeout", 1),
                    "/refused/403": ("done", "", 1), "/refused/429": ("done", "", 2),
                    "/refused/503": ("done", "", 2)}  # retried first, as Scrapy retries them
    retried = {i["url"].removeprefix(site.base) for i in kept(job) if i.get("retry_times")}
    assert retried == {"/broken/1", "/broken/2", "/refused/429", "/refused/503"}  # once each
    assert {i["retry_times"] for i in kept(job) if i.get("retry_times")} == {1}
    page = Item.objects.get(job=job, data__url=site.url("/missing/1")).url.page
    assert (page.status, page.size) == (404, len("<h1>404 at /missing/1</h1>") * 3000)


def test_requests_that_end_before_an_answer_reach_their_errback(installed):
    """robots.txt (``IgnoreRequest``), a refused host and its open circuit (``ConnectError``):
    as under Scrapy, where each raises into the request's errback; a request with
    ``dont_obey_robotstxt`` is fetched whatever robots.txt says, as Scrapy fetches it."""

    class Guarded(LocalSite):
        def __init__(self) -> None:
            class Handler(BaseHTTPRequestHandler):
                def do_GET(self) -> None:
                    if self.path == "/robots.txt":
                        send(self, 200, {}, b"User-agent: *\nDisallow: /private\n")
                    else:
                        send(self, 200, {}, b"<html><body>open</body></html>")

                def log_message(self, *args) -> None:
                    pass

            super().__init__(Handler)

    with socket.socket() as free:  # a port nothing listens on once this socket closes
        free.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{free.getsockname()[1]}"
    with Guarded() as site:
        job = jobs.create_job([], spider="unreached", spider_args={"base": site.base,
                                                                   "dead": dead})  # fmt: skip
        jobs.start(job)
        run_job(job)
    got = sorted((i["url"].removeprefix(site.base).removeprefix(dead), i.get("status"),
                  i.get("ignored"), i.get("connect"), i.get("refused"))
                 for i in kept(job))  # fmt: skip
    assert got == [
        ("/open/1", 200, None, None, None),
        ("/private/1", None, True, False, False),
        ("/private/2", None, True, False, False),  # yielded by a callback: its claim's gate
        ("/private/4", 200, None, None, None),  # dont_obey_robotstxt: fetched all the same
        ("/x/0", None, False, True, True),
        ("/x/1", None, False, True, True),
        ("/x/2", None, False, True, True),
    ]
    rows = FrontierURL.objects.filter(job=job).values_list("url", "state", "error_reason")
    ends = {url.removeprefix(site.base): (state, reason) for url, state, reason in rows}
    assert ends["/private/3"] == ends["/private/1"] == ("skipped", "robots")
    # The request's meta as Scrapy 2.19 has it (run there on such a site): robots.txt's
    # IgnoreRequest comes before the download's keys; a refused one went to the download.
    deadline = setting("FETCH_DEADLINE_S", job)
    sent = {i["url"].removeprefix(site.base).removeprefix(dead): i["sent"] for i in kept(job)
            if "sent" in i}  # fmt: skip
    assert sent == {"/private/1": [None, None, None, True], "/private/2": [1, None, None, None],
                    **{f"/x/{n}": [None, "127.0.0.1", deadline, True] for n in range(3)}}


def test_a_jobs_own_fields_win_over_its_spiders_custom_settings(installed):
    """As Scrapy's command line wins over ``custom_settings``: ``ROBOTSTXT_OBEY`` and
    ``DEPTH_LIMIT`` set a job's fields where nothing else did."""
    args = {"base": "http://127.0.0.1:9", "dead": "http://127.0.0.1:9"}
    plain = jobs.create_job([], spider="unreached", spider_args=args)
    own = jobs.create_job([], spider="unreached", spider_args=args, obey_robots=False,
                          max_depth=2)  # fmt: skip
    for job in (plain, own):
        jobs.start(job)
        job.refresh_from_db()
    assert (plain.obey_robots, plain.max_depth) == (True, 4)
    assert (own.obey_robots, own.max_depth) == (False, 2)


def test_a_spiders_settings_read_what_its_job_does_under_scrapys_names(installed):
    """``self.settings`` as a Scrapy spider reads them: the job's own values under the Scrapy
    names mapped to them, its fields over the spider's ``custom_settings``, the operator's caps
    over both, and the platform's defaults where nothing set them."""
    args = {"base": "http://127.0.0.1:9", "dead": "http://127.0.0.1:9"}
    plain = jobs.create_job([], spider="unreached", spider_args=args)
    own = jobs.create_job([], spider="unreached", spider_args=args, obey_robots=False,
                          max_depth=7, max_pages=50, delay=0.5, host_concurrency=3,
                          headers={"Accept-Language": "de"}, user_agents=["ua/1", "ua/2"],
                          settings={"RETRY_MAX_ATTEMPTS": 2, "FETCH_MAX_REDIRECTS": 3,
                                    "FETCH_DEADLINE_S": 2.5})  # fmt: skip
    for job in (plain, own):
        jobs.start(job)
        job.refresh_from_db()
    names = ["ROBOTSTXT_OBEY", "DEPTH_LIMIT", "CLOSESPIDER_PAGECOUNT", "DOWNLOAD_DELAY",
             "CONCURRENT_REQUESTS_PER_DOMAIN", "DEFAULT_REQUEST_HEADERS", "USER_AGENT",
             "RETRY_TIMES", "REDIRECT_MAX_TIMES", "DOWNLOAD_TIMEOUT"]  # fmt: skip
    read = [[spiders.create(job).settings.get(name) for name in names] for job in (plain, own)]
    scrapys = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
               "Accept-Language": "en"}  # sent as Scrapy's DefaultHeadersMiddleware sends them
    assert read[0] == [True, 4, 0, 0.0, 0, scrapys, setting("USER_AGENT"),
                       setting("RETRY_MAX_ATTEMPTS") - 1, setting("FETCH_MAX_REDIRECTS"),
                       setting("FETCH_DEADLINE_S")]  # fmt: skip
    assert read[1] == [False, 7, 50, 0.5, 3, {**scrapys, "Accept-Language": "de"}, "ua/1", 1, 3,
                       2.5]  # fmt: skip
    assert plain.headers == scrapys  # the job's own, as its fetches send them


def cookies_sent(spider: str, answers_set: dict[str, str]) -> tuple[CrawlJob, dict[str, str]]:
    """The ``Cookie`` header of each request ``spider`` makes of a site whose answers carry
    ``answers_set`` (a ``Set-Cookie``, say)."""
    sent: dict[str, str] = {}

    class Recording(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            sent[self.path] = self.headers.get("Cookie", "")
            send(self, 200, answers_set, b"<html><body>ok</body></html>")

        def log_message(self, *args) -> None:
            pass

    with LocalSite(Recording) as site:
        job = jobs.create_job([], spider=spider, host_concurrency=1,
                              spider_args={"base": site.base})  # fmt: skip
        jobs.start(job)
        run_job(job)
    return job, sent


def test_a_requests_cookies_are_kept_for_the_requests_after_it(installed):
    """As Scrapy's cookie middleware: a request's own cookies join the jar, replacing one of
    the same name, and go with the job's later requests to that host."""
    job, sent = cookies_sent("consent", {})
    assert len(kept(job)) == 4
    assert sent == {"/robots.txt": "", "/start": "consent=yes", "/next": "consent=yes",
                    "/changed": "consent=no", "/later": "consent=no"}  # fmt: skip


def test_a_spider_with_scrapys_cookie_middleware_off_keeps_and_sends_none(installed):
    _, sent = cookies_sent("uncookied", {"Set-Cookie": "site=1; Path=/"})
    assert sent == {"/robots.txt": "", "/start": "", "/next": "", "/changed": "", "/later": "",
                    "/own": "mine=1"}  # fmt: skip


@pytest.mark.parametrize("spider", ["refreshed", "unrefreshed"])
def test_a_meta_refresh_is_followed_as_scrapys_middleware_follows_it(installed, spider):
    """... unless the spider's ``METAREFRESH_ENABLED`` is off: then each page is its own."""
    refreshes = {"/refresh/now": '0; url=/landing/a', "/refresh/late": "200; url=/landing/b",
                 "/refresh/quiet": "0; url=/landing/c"}  # fmt: skip

    class Refreshing(LocalSite):
        def __init__(self) -> None:
            class Handler(BaseHTTPRequestHandler):
                def do_GET(self) -> None:
                    meta = refreshes.get(self.path)
                    head = f'<meta http-equiv="refresh" content="{meta}">' if meta else ""
                    send(self, 200, {}, f"<html><head>{head}</head><body>x</body></html>".encode())

                def log_message(self, *args) -> None:
                    pass

            super().__init__(Handler)

    with Refreshing() as site:
        job = jobs.create_job([], spider=spider, spider_args={"base": site.base})
        jobs.start(job)
        run_job(job)
    short = len(site.base)
    got = sorted((i["url"][short:], i["tag"], [u[short:] for u in i["redirect_urls"]])
                 for i in kept(job))  # fmt: skip
    first = ("/landing/a", "now", ["/refresh/now"]) if spider == "refreshed" else (
        "/refresh/now", "now", [])
    assert got == sorted([first, ("/refresh/late", "late", []), ("/refresh/quiet", "quiet", [])])


def test_depths_are_scrapys_across_refreshes_resets_and_errbacks(installed):
    """Scrapy 2.19's items for the same spider and site (``tests/spiders/redirects.py``,
    ``DEPTH_LIMIT`` 1): the page a refresh leads to is at its start page's depth, so its
    links are fetched; ``depth_reset`` and an errback's request after a refused connection
    start at 0, no start request, and their links at 1 are fetched too."""
    links = {"/landing": ["/a"], "/a": ["/b"], "/reset": ["/r1"], "/r1": ["/r2"],
             "/after": ["/after/1"], "/after/1": ["/after/2"]}  # fmt: skip

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            head = '<meta http-equiv="refresh" content="0; url=/landing">' if (
                self.path == "/refresh") else ""  # fmt: skip
            body = "".join(f'<a href="{href}">x</a>' for href in links.get(self.path, []))
            send(self, 200, {}, f"<html><head>{head}</head><body>{body}</body></html>".encode())

        def log_message(self, *args) -> None:
            pass

    with LocalSite(Handler) as site:
        job = jobs.create_job([], spider="depths", spider_args={
            "base": site.base, "dead": f"http://127.0.0.1:{chaos.free_port()}"})  # fmt: skip
        jobs.start(job)
        run_job(job)
    items = sorted((i["url"].removeprefix(site.base), i["depth"], i["start"]) for i in kept(job))
    assert items == [("/a", 1, False), ("/after", 0, False), ("/after/1", 1, False),
                     ("/landing", 0, True), ("/r1", 1, False), ("/reset", 0, False)]  # fmt: skip


def test_settings_a_spiders_update_settings_sets_are_its_custom_settings(installed):
    """A spider that overrides ``update_settings`` (Scrapy's classmethod): what it sets, by
    Scrapy's priorities, is what its callbacks read and what the job keeps to."""
    with Site(pages=30) as site:
        job = jobs.create_job([], spider="updating", spider_args={"seed": site.url("/p/0")})
        jobs.start(job)
        job.refresh_from_db()
        run_job(job)
    items = kept(job)
    assert job.max_depth == 1 and items
    assert {(i["a"], i["b"]) for i in items} == {("a", "b")}
    assert max(i["depth"] for i in items) == 1
    # As Scrapy 2.19 sends them: no Accept where DEFAULT_REQUEST_HEADERS has none
    assert {tuple(i["sent"]) for i in items} == {("Accept-Encoding", "Accept-Language",
                                                 "Connection", "User-Agent")}  # fmt: skip


def test_a_spider_whose_update_settings_raises_is_unavailable_saying_why(installed):
    class Raising(Spider):
        name = "raising_settings"

        @classmethod
        def update_settings(cls, settings):
            raise RuntimeError("no settings today")

    with pytest.raises(spiders.SpiderUnavailable, match="update_settings raised RuntimeError: "
                       "no settings today"):  # fmt: skip
        spiders._updated(Raising)


def test_a_spider_page_cut_at_fetch_max_bytes_is_noted_truncated_as_a_crawls(installed):
    class Large(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            send(self, 200, {}, b"<html><title>big</title><p>" + b"x" * 5000 + b"</p></html>")

        def log_message(self, *args) -> None:
            pass

    with LocalSite(Large) as site:
        job = jobs.create_job([], spider="pages", settings={"FETCH_MAX_BYTES": 1024},
                              spider_args={"seed": site.url("/big")})  # fmt: skip
        jobs.start(job)
        run_job(job)
    row = FrontierURL.objects.get(job=job, url=site.url("/big"))
    assert (row.state, row.error_reason, row.page.truncated) == (URLState.DONE, "truncated", True)
    assert kept(job) == [{"url": site.url("/big"), "title": "big"}]  # the first 1024 bytes


def test_attributes_start_sets_reach_the_callbacks_in_every_worker(installed, caplog):
    """A Scrapy spider's one process keeps what start() set; here start() runs where the job
    starts, and what it set that is JSON is given to each worker's spider."""
    with Site(pages=1) as site:
        job = jobs.create_job([], spider="stateful", spider_args={"seed": site.url("/p/0")})
        jobs.start(job)
        job.refresh_from_db()
        assert job.spider_state == {"categories": ["books", "music"], "limit": 2}
        run_job(job)
        CrawlJob.objects.filter(pk=job.pk).update(state=JobState.FINISHED)
        assert jobs.recrawl(job)  # start() does not run again: what it set stays the job's
        run_job(job)
    item = {"url": site.url("/p/0"), "categories": ["books", "music"], "limit": 2,
            "matcher": False}  # fmt: skip
    assert list(Item.objects.filter(job=job).values_list("run", "data")) == [(2, item)]
    assert "start() set attributes that are not JSON" in caplog.text and "matcher" in caplog.text


def test_close_spider_ends_the_crawl_with_what_pages_in_flight_add_not_fetched(installed):
    """CloseSpider on /p/3, the first URL of a message of four: its item kept, its requests
    not, the message's other URLs given back and skipped; what is queued is skipped in its
    page's transaction; what a page in flight adds after is skipped by the scheduler's pass,
    a claim of a URL scheduled before is refused; the job finishes with the reason, which
    the spider's closed() is told."""
    from tasks.content import pipelines
    from tasks.frontier import transitions
    from tasks.frontier.scheduler import Scheduler
    from tests.spiders.pages import Enough

    Enough.ended.clear()
    with Site(pages=40) as site:
        job = jobs.create_job([], spider="enough", spider_args={"seed": site.url("/p/0")})
        jobs.start(job)
        for page in range(3):  # /p/0 .. /p/2, one at a time
            row = FrontierURL.objects.get(job=job, url=site.url(f"/p/{page}"))
            FrontierURL.objects.filter(pk=row.pk).update(state=URLState.SCHEDULED)
            engine.process(row.pk, job.pk)
        transitions.insert_urls(job.pk, [site.url(f"/p/{n}") for n in (20, 21, 22)], depth=3)
        message = [FrontierURL.objects.get(job=job, url=site.url(f"/p/{n}")).pk
                   for n in (3, 20, 21, 22)]  # fmt: skip
        FrontierURL.objects.filter(pk__in=message).update(state=URLState.SCHEDULED)
        states = engine.process_many(message, job.pk)
        assert states == ["done"]  # /p/3: the message's other three were not started
        fetched = {u.removeprefix(site.base) for u, n in site.hits.items() if n}
        assert fetched & {"/p/20", "/p/21", "/p/22"} == set()
        skipped = FrontierURL.objects.filter(job=job, error_reason="close_spider")
        assert {u.error_message for u in skipped} == {"enough pages"}
        assert not FrontierURL.objects.filter(job=job, depth=4).exists()  # /p/3's requests
        transitions.insert_urls(job.pk, [site.url("/p/30")], depth=3)  # a page in flight's
        late = FrontierURL.objects.get(job=job, url=site.url("/p/30"))
        FrontierURL.objects.filter(pk=late.pk).update(state=URLState.SCHEDULED)  # released
        assert engine.process(late.pk, job.pk) is None  # before the close: its claim refused
        job.refresh_from_db()
        assert Scheduler()._pass_job(job) == (0, None)
        assert not FrontierURL.objects.filter(job=job, state__in=PENDING_STATES).exists()
    job.refresh_from_db()
    assert (job.state, job.stats["close_reason"]) == ("finished", "enough pages")
    assert sorted(i["url"].removeprefix(site.base) for i in kept(job)) == [
        "/p/0", "/p/1", "/p/2", "/p/3"]  # fmt: skip
    pipelines.close_ended(every=0)
    assert (job.pk, "enough pages") in Enough.ended
    assert jobs.recrawl(job) and (job.state, job.close_reason) == ("running", "")  # afresh
    assert CrawlJob.objects.get(pk=job.pk).close_reason == ""


def test_close_spider_in_start_keeps_what_it_yielded_before_and_ends_the_crawl(installed):
    from tasks.frontier.scheduler import finish_if_done
    from tests.spiders.pages import Enough

    Enough.ended.clear()
    with Site(pages=5) as site:
        job = jobs.create_job([], spider="enough_at_start", spider_args={
            "seed": site.url("/p/0")})  # fmt: skip
        assert jobs.start(job)
        run_job(job)
        assert sum(site.hits.values()) == 0  # its request not fetched
    job.refresh_from_db()
    assert finish_if_done(job)  # nothing pending: the scheduler's next pass ends it
    job.refresh_from_db()
    assert (job.state, job.error, job.close_reason) == ("finished", "", "from_start")
    assert kept(job) == [{"started": True}]
    assert (job.pk, "from_start") in Enough.ended  # closed by the start: no worker opened it


def test_close_spider_in_an_errback_commits_with_the_urls_failure(installed):
    with Site(pages=40) as site:
        job = jobs.create_job([], spider="enough_on_error", spider_args={
            "seed": site.url("/p/0")})  # fmt: skip
        jobs.start(job)
        run_job(job)  # /missing/0 first: its errback closes the crawl before /p/0 is fetched
    ends = {u.removeprefix(site.base): (state, reason) for u, state, reason in
            FrontierURL.objects.filter(job=job).values_list("url", "state", "error_reason")}
    assert ends == {"/missing/0": ("failed", "http_4xx"), "/p/0": ("skipped", "close_spider")}
    assert kept(job) == [{"gone": site.url("/missing/0"), "status": 404}]
    job.refresh_from_db()
    assert job.close_reason == "a page is gone"


def test_an_errback_sees_the_failure_and_its_items_commit_with_the_urls_failure(installed):
    with Shop() as shop:
        job = jobs.create_job([], spider="errbacks", spider_args={"base": shop.base})
        jobs.start(job)
        run_job(job)
    gone = FrontierURL.objects.get(job=job, url__contains="/gone")
    assert (gone.state, gone.error_reason) == ("failed", "http_4xx")
    assert kept(job) == [{"missing": shop.url("/gone"), "status": 404, "reason": "http_4xx",
                          "checked": True}]  # fmt: skip


def test_a_spider_job_is_released_only_while_an_online_worker_has_its_spider(installed, redis):
    import time

    from tasks.frontier.pacing import Pacing
    from tasks.frontier.release import release
    from tasks.worker import registry

    with Shop() as shop:
        job = shop_job(shop)

    def worker(spiders: str) -> None:  # as a worker's heartbeat registers it
        registry.write("w1", {
            "version": "1", "channel": "main", "queues": "crawl", "slots": 4, "pid": 1,
            "spiders": spiders, "started": time.time(), "heartbeat": time.time(),
            "last_task": 0}, 60)  # fmt: skip

    worker("search")
    assert release(job, Pacing())[0] == 0
    assert FrontierURL.objects.get(job=job).state == URLState.QUEUED
    worker("search,shop")
    assert release(job, Pacing())[0] == 1


def test_the_admin_and_dashboard_show_the_installed_spiders_a_jobs_items_and_drops(
    installed, admin_client
):
    page = admin_client.get("/admin/web/crawljob/add/").content.decode()
    assert '<option value="shop">shop</option>' in page
    with Shop() as shop:
        job = shop_job(shop)
        run_job(job)
    detail = admin_client.get(f"/admin/web/crawljob/{job.pk}/change/").content.decode()
    assert f"?job__id__exact={job.pk}\">20 items</a>; dropped: 1 no price, 1 pipeline_error, " \
           "1 schema" in detail  # fmt: skip
    listed = admin_client.get(f"/admin/web/item/?job__id__exact={job.pk}&kept=no").content.decode()
    assert "no price" in listed and "pipeline_error" in listed
    product = FrontierURL.objects.get(job=job, url=shop.url("/product/1"))
    page = admin_client.get(f"/admin/web/page/{product.page.pk}/change/").content.decode()
    assert f"?url__id__exact={product.pk}\">1 items</a>" in page
    one = admin_client.get(f"/admin/web/item/?url__id__exact={product.pk}").content.decode()
    assert "SKU-0001" in one and "SKU-0002" not in one
    data = admin_client.get(f"/dashboard/jobs/{job.pk}/data").json()
    assert data["values"]["items"] == "20"
    assert [[c["text"] for c in row] for row in data["tables"]["drops"]] == [
        ["no price", "1"], ["pipeline_error", "1"], ["schema", "1"]]  # fmt: skip
    shown = admin_client.get(f"/dashboard/jobs/{job.pk}/").content.decode()
    assert '<span data-value="items">20</span> kept' in shown


def test_a_package_ships_its_spiders_as_entry_points_read_once_per_process(
    monkeypatch, tmp_path
):
    # A package installed in the worker image, as pip leaves it: its metadata names a
    # spider, and a second entry point whose module does not import.
    info = tmp_path / "team_spiders-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: team-spiders\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{spiders.ENTRY_POINTS}]\n"
        "shipped = tests.spiders.cookies:Consent\n"
        "gone = team_spiders.missing:Spider\n"
    )
    monkeypatch.setenv("CRAWL_SPIDER_MODULES", "")
    monkeypatch.syspath_prepend(str(tmp_path))
    spiders.published.cache_clear()
    try:
        found = spiders.installed()
        assert found["consent"].cls.__name__ == "Consent"
        assert found["consent"].source == "tests.spiders.cookies:Consent"
        assert found["gone"].cls is None and "ModuleNotFoundError" in found["gone"].error
        assert spiders.names() == ["consent"]
        (info / "entry_points.txt").write_text(f"[{spiders.ENTRY_POINTS}]\n")
        assert "consent" in spiders.installed()  # read once: the image does not change
    finally:
        spiders.published.cache_clear()
