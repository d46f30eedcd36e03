"""A spider job survives SIGKILL of a worker mid-crawl with every item stored exactly once, and
every stat its code counts counted exactly once: a callback's items and stat changes commit
with its page, so a page whose worker died before the commit is run again (by redelivery or
the lease sweep) and adds its items and counts then, never twice; a CrawlSpider's page finds
its rule again then."""

from __future__ import annotations

import os
import signal

import pytest

from tests.conftest import wait_for
from tests.shop import Shop, expected_products, expected_stock
from tests.test_e2e import finished
from web.models import FrontierURL, Item, URLState

pytestmark = pytest.mark.django_db(transaction=True)
LISTINGS = 25  # 100 products, 20 API pages


def test_sigkill_of_a_worker_mid_spider_crawl_leaves_every_item_stored_once(
    worker_env, workers, scheduler, monkeypatch
):
    from tasks.frontier import jobs

    monkeypatch.setenv("CRAWL_SPIDER_MODULES", "tests.spiders")
    worker_env["CRAWL_SPIDER_MODULES"] = "tests.spiders"
    pool = workers(processes=2, concurrency=4)
    with Shop(listings=LISTINGS, delay=0.1) as shop:
        job = jobs.create_job([], spider="shop", spider_args={
            "base": shop.base, "user": "alice", "password": "s3cret"})  # fmt: skip
        jobs.start(job)

        def in_flight() -> bool:
            leased = FrontierURL.objects.filter(job=job, state=URLState.LEASED).count()
            return Item.objects.filter(job=job).count() >= 30 and leased >= 2

        wait_for(in_flight, 90, "items stored and pages in flight")
        victim = next(iter(pool.procs))
        os.killpg(pool.procs[victim].pid, signal.SIGKILL)
        pool.procs.pop(victim).wait()
        pool.spawn()  # the replacement, as a Deployment would start one
        wait_for(lambda: finished(job), 180, "the crawl to finish after the kill")
    kept = list(Item.objects.filter(job=job, dropped="").values_list("data", flat=True))
    expected = expected_products(LISTINGS) + expected_stock(LISTINGS)
    key = lambda i: (i["kind"], i["sku"])  # noqa: E731
    assert sorted(kept, key=key) == sorted(expected, key=key)  # none lost, none twice
    assert Item.objects.filter(job=job).exclude(dropped="").count() == 3
    assert shop.hits["POST /login"] == 1  # the login's session held for every worker


def test_sigkill_after_a_callback_yielded_its_item_stores_that_item_once(
    worker_env, workers, scheduler, monkeypatch, tmp_path
):
    """The worker dies at a known point: the callback has yielded the page's item and has not
    returned. The item is not stored yet; the URL's next attempt stores it, once."""
    from tasks.frontier import jobs
    from tests.site import Site

    monkeypatch.setenv("CRAWL_SPIDER_MODULES", "tests.spiders")
    worker_env["CRAWL_SPIDER_MODULES"] = "tests.spiders"
    marker = tmp_path / "stalled"
    pool = workers(processes=2, concurrency=2)
    with Site(pages=12) as site:
        job = jobs.create_job([site.url("/p/0")], spider="stall",
                              spider_args={"marker": str(marker)})  # fmt: skip
        jobs.start(job)
        wait_for(marker.exists, 90, "the callback of /p/5 to stop after its item")
        stalled = FrontierURL.objects.get(job=job, url=site.url("/p/5"))
        assert stalled.state == URLState.LEASED and not Item.objects.filter(url=stalled).exists()
        for name in list(pool.procs):  # whichever holds it: kill both, start two
            os.killpg(pool.procs[name].pid, signal.SIGKILL)
            pool.procs.pop(name).wait()
        pool.spawn()
        pool.spawn()
        wait_for(lambda: finished(job), 180, "the crawl to finish after the kill")
    urls = list(Item.objects.filter(job=job).values_list("data__url", flat=True))
    assert sorted(urls) == sorted({u for u in urls}) and site.url("/p/5") in urls
    assert len(urls) == FrontierURL.objects.filter(job=job, state=URLState.DONE).count()


def test_sigkill_of_a_worker_mid_crawl_leaves_every_stat_counted_once(
    worker_env, workers, scheduler, monkeypatch
):
    """The counting spider counts its pages in its callback (then waits, so that the kill
    finds pages that counted and did not commit), its items in a pipeline, and every signal
    in an extension; each count ends equal to what the tables hold, not more, not fewer."""
    from tasks.frontier.stats import stats_of

    site, job = _crawl_killed_mid_page(worker_env, workers, monkeypatch, "counting")
    stats = stats_of(job)
    done = FrontierURL.objects.filter(job=job, state=URLState.DONE).count()
    assert done == len(site.expected_done())
    assert max(n for url, n in site.hits.items() if "/p/" in url) > 1  # pages run again
    assert stats["counting/pages"] == stats["heard/response_received"] == done
    assert stats["response_received_count"] == done
    assert stats["counting/items"] == Item.objects.filter(job=job).count() == done
    kept = Item.objects.filter(job=job, dropped="").count()
    assert stats["item_scraped_count"] == stats["heard/item_scraped"] == kept == done - 1
    assert stats["item_dropped_count"] == stats["heard/item_dropped"] == 1
    assert stats["heard/request_scheduled"] == stats["counting/requests"] + 1


def test_sigkill_of_a_worker_mid_crawlspider_job_leaves_every_item_and_stat_once(
    worker_env, workers, scheduler, monkeypatch
):
    """A CrawlSpider's rules' requests are stored with their frontier rows (the rule by its
    index in ``meta``): a page run again after the kill, by another process, finds its rule,
    and its items, its callback's and errback's counts and the signals heard count once."""
    from tasks.frontier.stats import stats_of

    site, job = _crawl_killed_mid_page(worker_env, workers, monkeypatch, "crawl_rules")
    stats = stats_of(job)
    done = FrontierURL.objects.filter(job=job, state=URLState.DONE).count()
    queries = len(range(0, site.pages, 40))
    missing = len(range(0, site.pages, 25))
    assert done == len(site.expected_done()) == site.pages + queries
    assert max(n for url, n in site.hits.items() if "/p/" in url) > 1  # pages run again
    items = list(Item.objects.filter(job=job).values_list("data__url", "data__kind"))
    assert len(items) == len(set(items)) == done + missing  # each once
    assert sorted(kind for _, kind in items) == sorted(
        ["start"] + ["page"] * (site.pages - 1) + ["query"] * queries + ["missing"] * missing
    )
    assert (stats["rules/start"], stats["rules/page"], stats["rules/query"],
            stats["rules/missing"]) == (1, site.pages - 1, queries, missing)  # fmt: skip
    assert stats["counting/items"] == len(items)
    kept = Item.objects.filter(job=job, dropped="").count()
    assert stats["item_scraped_count"] == stats["heard/item_scraped"] == kept == len(items) - 1
    assert stats["item_dropped_count"] == stats["heard/item_dropped"] == 1
    assert stats["response_received_count"] == stats["heard/response_received"] == done + missing


def _crawl_killed_mid_page(worker_env, workers, monkeypatch, spider: str):
    """``spider``'s job over a 150-page site (its callbacks pausing 0.3 s), every worker
    process SIGKILLed once 30 items are stored and 3 pages are in flight (whichever process
    holds them), as many started again, and the crawl run to its end: the site and the job."""
    from tasks.frontier import jobs
    from tests.site import Site

    monkeypatch.setenv("CRAWL_SPIDER_MODULES", "tests.spiders")
    worker_env["CRAWL_SPIDER_MODULES"] = "tests.spiders"
    pool = workers(processes=2, concurrency=4)
    with Site(pages=150) as site:
        job = jobs.create_job([], spider=spider, spider_args={
            "seed": site.url("/p/0"), "pause": "0.3"})  # fmt: skip
        jobs.start(job)

        def in_flight() -> bool:
            leased = FrontierURL.objects.filter(job=job, state=URLState.LEASED).count()
            return Item.objects.filter(job=job).count() >= 30 and leased >= 3

        wait_for(in_flight, 90, "pages stored and pages in flight")
        for name in list(pool.procs):
            os.killpg(pool.procs[name].pid, signal.SIGKILL)
            pool.procs.pop(name).wait()
        pool.spawn()
        pool.spawn()
        wait_for(lambda: finished(job), 180, "the crawl to finish after the kill")
    return site, job
