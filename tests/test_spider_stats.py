"""A spider job's ``crawler.stats`` and signals, in-process against a local site, the real
database and Redis: what a callback, a pipeline and signal handlers count is the job's, once
per page; the stats fold as Scrapy's collector keeps them (on PostgreSQL's aggregate and on
the rows alike); each signal reaches its receivers with Scrapy's arguments, and a receiver
that raises harms nothing; the job's status, the API, the dashboard and the metrics show the
stats. The kill -9 test is in ``tests/test_spider_durability.py``."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from prometheus_client.parser import text_string_to_metric_families
from psycopg import _queries as psycopg_queries  # its limits of the parse it keeps

from crawlplatform.spiders import (
    DropItem,
    NotSupported,
    Request,
    Response,
    SignalManager,
    Spider,
    StatsCollector,
    signals,
)
from tasks.content import pipelines
from tasks.content import stats as job_stats
from tasks.frontier import jobs
from tasks.frontier import pages as page_statements
from tasks.frontier import stats as stat_rows
from tasks.frontier.scheduler import finish_if_done
from tests.site import Site
from tests.spiders.counting import Heard
from tests.test_spiders import installed, run_job  # noqa: F401 (the fixture)
from web.models import CrawlJob, FrontierURL, Item, Page, Stat, StatKind, URLState

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def counting(installed):  # noqa: F811
    """The counting spider's extension forgets what it heard; the pipelines this process
    opened are closed while the test's database is there."""
    Heard.calls.clear()
    yield
    pipelines.close_all()


def counting_job(site: Site, **args) -> CrawlJob:
    job = jobs.create_job([], spider="counting", spider_args={"seed": site.url("/p/0"), **args})
    jobs.start(job)
    job.refresh_from_db()
    assert job.error == ""
    return job


def heard(name: str) -> list[dict]:
    return [kwargs for signal, kwargs in Heard.calls if signal == name]


def test_what_a_callback_a_pipeline_and_signal_handlers_count_is_the_jobs_once_per_page(
    counting,
):
    with Site(pages=30) as site:
        job = counting_job(site)
        run_job(job)
    job.refresh_from_db()
    stats = stat_rows.stats_of(job)
    done = FrontierURL.objects.filter(job=job, state=URLState.DONE).count()
    kept = Item.objects.filter(job=job, dropped="").count()
    assert done == Page.objects.filter(job=job).count() == 31 and kept == 30
    assert stats["counting/pages"] == stats["heard/response_received"] == done
    assert stats["counting/items"] == Item.objects.filter(job=job).count() == 31
    assert stats["item_scraped_count"] == stats["heard/item_scraped"] == kept
    assert stats["item_dropped_count"] == stats["heard/item_dropped"] == 1
    assert stats["item_dropped_reasons_count/odd page"] == 1
    assert stats["response_received_count"] == stats["downloader/response_status_count/200"]
    assert stats["response_received_count"] == done
    # every /p/ link is in scope: each is scheduled, the start's seed too (in the start)
    assert stats["heard/request_scheduled"] == stats["counting/requests"] + 1
    deepest = max(Item.objects.filter(job=job).values_list("data__depth", flat=True))
    assert stats["counting/depth_max"] == stats["request_depth_max"] == deepest
    assert stats["counting/depth_min"] == 0
    assert stats["heard/spider_opened"] == 2  # the start's process, then this "worker"
    assert isinstance(stats["start_time"], datetime) and "finish_time" not in stats
    pages = Stat.objects.filter(job=job, url__isnull=False).values("url").distinct().count()
    assert pages == done  # each page's changes are rows of that page


def test_an_error_answer_nothing_takes_is_heard_as_received_all_the_same(counting):
    """Scrapy's engine sends ``response_received`` for every answer: a 404 that neither a
    callback nor an errback takes too. What its handler counts commits with the URL's end."""
    with Site(pages=3) as site:
        job = jobs.create_job([], spider="counting", spider_args={"seed": site.url("/missing/1")})
        jobs.start(job)
        run_job(job)
    stats = stat_rows.stats_of(job)
    assert FrontierURL.objects.get(job=job).error_reason == "http_4xx"
    assert stats["heard/response_received"] == stats["response_received_count"] == 1
    assert [kwargs["response"].status for kwargs in heard("response_received")] == [404]


def test_a_page_whose_callback_fails_counts_nothing_and_counts_once_when_run_again(
    installed,  # noqa: F811
):
    """Stats change with the page's commit: a callback that raises (and is retried, as its
    request asks) counts only in the run that commits."""
    from tests.spiders.counting import Flaky

    Flaky.failed.clear()
    with Site(pages=12) as site:
        job = jobs.create_job([], spider="flaky", spider_args={"seed": site.url("/p/0")})
        jobs.start(job)
        run_job(job)
    done = FrontierURL.objects.filter(job=job, state=URLState.DONE)
    assert done.count() == done.filter(attempts=2).count() == 13  # each page failed once
    assert stat_rows.stats_of(job)["flaky/calls"] == 13  # and counted once


def test_what_a_callback_or_errback_yielded_before_it_raised_is_kept_as_under_scrapy(
    installed,  # noqa: F811
):
    """Scrapy 2.19's items and counts for the same spider (run there): the callback's item and
    request before its exception, the errback's item before its own; counted once, with the
    URL's failure."""
    with Site(pages=5) as site:
        job = jobs.create_job([], spider="half_done", spider_args={"seed": site.url("/p/0")})
        jobs.start(job)
        run_job(job)
    items = sorted((i.data["url"].removeprefix(site.base), i.data["part"])
                   for i in Item.objects.filter(job=job))  # fmt: skip
    assert items == [("/missing/0", "missed"), ("/p/0", "first"), ("/p/1", "last")]
    ends = {u.removeprefix(site.base): (state, reason) for u, state, reason in
            FrontierURL.objects.filter(job=job).values_list("url", "state", "error_reason")}
    assert ends == {"/p/0": ("failed", "spider_error"), "/p/1": ("done", ""),
                    "/missing/0": ("failed", "http_4xx")}  # fmt: skip
    stats = stat_rows.stats_of(job)
    assert stats["item_scraped_count"] == stats["response_received_count"] == 3
    assert (stats["spider_exceptions/count"], stats["spider_exceptions/RuntimeError"],
            stats["spider_exceptions/ValueError"]) == (2, 1, 1)  # fmt: skip


def test_a_recrawl_replaces_each_pages_stat_rows_as_it_replaces_its_items(counting):
    with Site(pages=10) as site:
        job = counting_job(site)
        run_job(job)
        finish_if_done(job)
        pipelines.close_ended(every=0)
        assert jobs.recrawl(job)
        run_job(job)
    stats = stat_rows.stats_of(job)
    assert stats["counting/pages"] == Page.objects.filter(job=job).count() == 11
    assert stats["item_scraped_count"] == stats["heard/item_scraped"] == 10
    assert stats["heard/spider_opened"] == 3  # outside a page: the start, each run's opening
    assert stats["heard/closed_reason"] == "finished"


def test_deleting_a_spider_job_deletes_its_items_and_stat_rows_before_its_urls(counting):
    with Site(pages=5) as site:
        job = counting_job(site)
        run_job(job)
    assert Item.objects.filter(job=job).exists() and Stat.objects.filter(job=job).exists()
    jobs.delete(job.pk)
    assert not CrawlJob.objects.filter(pk=job.pk).exists()
    assert not Item.objects.filter(job_id=job.pk).exists()
    assert not Stat.objects.filter(job_id=job.pk).exists()


# The collector's arithmetic --------------------------------------------------------------


def _apply(collector: StatsCollector, changes: list[tuple]) -> None:
    for method, *args in changes:
        getattr(collector, method)(*args)


# Each list a page's changes, in order; the last ones outside a page.
PAGES = [
    [("inc_value", "a"), ("inc_value", "a", 2), ("set_value", "b", "x"), ("max_value", "m", 3),
     ("min_value", "n", 5), ("inc_value", "s", 1, 10), ("max_value", "t", "2026-01-02")],
    [("inc_value", "a"), ("max_value", "m", 7), ("max_value", "m", 1), ("min_value", "n", 2),
     ("set_value", "b", "y"), ("inc_value", "s", 1, 10), ("max_value", "t", "2026-01-01"),
     ("inc_value", "f", 0.5)],
    [("set_value", "c", 1), ("inc_value", "c", 4), ("inc_value", "a", 1), ("set_value", "a", 9),
     ("inc_value", "a"), ("min_value", "m", 0), ("inc_value", "f", 1)],
]  # fmt: skip
OUTSIDE = [("set_value", "d", datetime(2026, 12, 5, tzinfo=UTC)), ("set_value", "e", {"k": [1]}),
           ("set_value", "g", None)]  # fmt: skip


def _written(job: CrawlJob) -> job_stats.JobStats:
    """PAGES committed as pages commit them (each page's rows at once), then OUTSIDE."""
    collector = job_stats.JobStats(job.pk)
    for n, changes in enumerate(PAGES):
        url = FrontierURL.objects.create(job=job, url=f"http://s.test/{n}", host="s.test")
        with job_stats.bound(job_stats.Pending(job.pk)) as pending:
            _apply(collector, changes)
        stat_rows.replace(job.pk, url.pk, pending.rows())
    _apply(collector, OUTSIDE)  # no page: each written at once
    return collector


def test_the_stats_fold_as_scrapys_collector_keeps_them_whichever_page_changed_them(db):
    job = jobs.create_job([], spider="counting")
    collector = _written(job)
    scrapy = StatsCollector()
    for changes in [*PAGES, OUTSIDE]:
        _apply(scrapy, changes)
    expected = {**scrapy.get_stats(), "d": "2026-12-05T00:00:00+00:00"}
    assert expected == {"a": 10, "b": "y", "c": 5, "d": "2026-12-05T00:00:00+00:00",
                        "e": {"k": [1]}, "f": 1.5, "g": None, "m": 0, "n": 2, "s": 12,
                        "t": "2026-01-02"}  # fmt: skip
    assert collector.get_stats() == stat_rows.stats_of(job) == expected
    assert collector.get_value("a") == 10 and collector.get_value("nothing", 7) == 7
    rows = Stat.objects.filter(job=job).order_by("id").values_list("id", "name", "kind", "value")
    assert stat_rows._grouped(rows) == stat_rows.aggregate(job.pk)  # the database's fold is ours


def test_clear_and_set_stats_start_the_spiders_stats_again_from_the_page_that_commits(db):
    job = jobs.create_job([], spider="counting")
    collector = _written(job)
    url = FrontierURL.objects.create(job=job, url="http://s.test/c", host="s.test")
    with job_stats.bound(job_stats.Pending(job.pk)) as pending:
        collector.inc_value("a")
        collector.set_stats({"x": 1})
        collector.inc_value("x", 2)
        assert collector.get_stats() == {"x": 3}  # the page reads its own changes
    assert collector.get_value("a") == 10  # not committed yet
    stat_rows.replace(job.pk, url.pk, pending.rows())
    assert collector.get_stats() == stat_rows.stats_of(job) == {"x": 3}
    collector.inc_value("a")
    assert collector.get_stats() == {"a": 1, "x": 3}


def test_a_pages_reads_are_cached_for_stats_cache_s_and_a_read_outside_a_page_is_fresh(
    db, monkeypatch
):
    monkeypatch.setenv("CRAWL_STATS_CACHE_S", "3600")
    job = jobs.create_job([], spider="counting")
    collector, other = job_stats.JobStats(job.pk), job_stats.JobStats(job.pk)
    page = job_stats.Pending(job.pk)
    with job_stats.bound(page):
        assert collector.get_value("n") is None
    other.inc_value("n", 5)  # another worker's page, committed
    with job_stats.bound(page):
        assert collector.get_value("n") is None  # the cached aggregate
        collector.inc_value("n")
        assert collector.get_value("n") == 1  # with the page's own change on it
    assert collector.get_value("n") == 5  # outside a page: the database's
    with job_stats.bound(page):
        assert collector.get_value("n") == 6


def test_a_pages_reads_count_what_this_processs_pages_committed_at_once(db, monkeypatch):
    """As Scrapy's one process sees its own counts: a callback that counts and reads back
    sees each page before it, in its process, however fast they come."""
    monkeypatch.setenv("CRAWL_STATS_CACHE_S", "3600")
    job = jobs.create_job([], spider="counting")
    collector, other = job_stats.JobStats(job.pk), job_stats.JobStats(job.pk)
    seen = []
    for n in range(3):
        page = job_stats.Pending(job.pk)
        with job_stats.bound(page):
            collector.inc_value("n")
            collector.max_value("most", n)
            seen.append((collector.get_value("n"), collector.get_value("most")))
        stat_rows.add(job.pk, page.rows())  # the page's commit
        collector.committed(page)
        if n == 0:
            other.inc_value("n", 10)  # another worker's: seen when the rows are read again
    assert seen == [(1, 0), (2, 1), (3, 2)]
    cleared = job_stats.Pending(job.pk)
    with job_stats.bound(cleared):
        collector.clear_stats()
        collector.inc_value("m")
    stat_rows.add(job.pk, cleared.rows())
    collector.committed(cleared)
    with job_stats.bound(job_stats.Pending(job.pk)):
        assert (collector.get_value("n"), collector.get_value("m")) == (None, 1)
    # a read of the rows that began after a page's commit did holds it: not counted twice
    late = job_stats.Pending(job.pk)
    with job_stats.bound(late):
        collector.inc_value("m")
    stat_rows.add(job.pk, late.rows())
    collector._read.clear()  # another thread's read, now
    with job_stats.bound(job_stats.Pending(job.pk)):
        assert collector.get_value("m") == 2
    collector.committed(late)
    with job_stats.bound(job_stats.Pending(job.pk)):
        assert collector.get_value("m") == 2
    # what a process keeps of its own pages lasts one read's time: a spider that counts and
    # never reads again keeps none
    monkeypatch.setenv("CRAWL_STATS_CACHE_S", "0")
    monkeypatch.setenv("CRAWL_STATS_READ_SHARE", "1000000")  # nor kept for a slow read's cost
    collector._read.clear()
    with job_stats.bound(job_stats.Pending(job.pk)):
        collector.get_value("m")
    for _ in range(3):
        page = job_stats.Pending(job.pk)
        with job_stats.bound(page):
            collector.inc_value("m")
        stat_rows.add(job.pk, page.rows())
        time.sleep(0.01)
        collector.committed(page)
    assert collector._mine == [] and "rows" not in collector._read


def test_values_that_are_not_json_and_counts_that_are_not_numbers_are_refused(db, monkeypatch):
    monkeypatch.setenv("CRAWL_STATS_PAGE_MAX_NAMES", "2")
    job = jobs.create_job([], spider="counting")
    collector = job_stats.JobStats(job.pk)
    with job_stats.bound(job_stats.Pending(job.pk)):
        with pytest.raises(TypeError, match="stat 'x': object is not JSON"):
            collector.set_value("x", object())
        with pytest.raises(TypeError, match="inc_value takes a number, not str"):
            collector.inc_value("x", "1")
        with pytest.raises(TypeError, match="stat 'x': Out of range float values"):
            collector.set_value("x", float("nan"))  # PostgreSQL's JSON has no NaN
        with pytest.raises(TypeError, match="stat 'x': Out of range float values"):
            collector.max_value("x", {"ratio": float("inf")})
        collector.inc_value("a", spider=Spider("s"))  # Scrapy's spider argument is taken
        collector.inc_value("b")
        with pytest.raises(ValueError, match="a page may change STATS_PAGE_MAX_NAMES"):
            collector.inc_value("c")
        with pytest.raises(ValueError, match="a stat's name is a text"):
            collector.inc_value("n" * 201)


def test_a_count_of_a_text_is_refused_as_in_python_and_one_that_races_it_leaves_the_text(db):
    job = jobs.create_job([], spider="counting")
    collector = job_stats.JobStats(job.pk)
    with job_stats.bound(job_stats.Pending(job.pk)) as page:
        collector.set_value("label", "text")
        with pytest.raises(TypeError, match="stat 'label': inc_value on a str value"):
            collector.inc_value("label")
        collector.inc_value("flags", True)  # Python's 0 + True
    collector.commit(page)
    job_stats.JobStats(job.pk).inc_value("label", 2)  # a worker that never read the text
    assert {k: v for k, v in collector.get_stats().items() if k in ("label", "flags")} == {
        "label": "text", "flags": 1}  # fmt: skip
    assert stat_rows.fold({StatKind.SET: True, StatKind.INC: 1}) == 2


# Signals ---------------------------------------------------------------------------------


def test_each_signal_reaches_its_receivers_with_scrapys_arguments(counting):
    with Site(pages=12) as site:
        job = counting_job(site, break_pipeline="1")
        run_job(job)
        finish_if_done(job)
        pipelines.close_ended(every=0)
    (_at_start, opened), closed = heard("spider_opened"), heard("spider_closed")
    assert isinstance(opened["spider"], Spider) and opened["spider"].name == "counting"
    assert [c["reason"] for c in closed] == ["finished"]  # the start's close ends no run
    assert closed[0]["spider"] is opened["spider"]
    received = heard("response_received")
    assert len(received) == 13 and all(r["request"] is r["response"].request for r in received)
    assert all(isinstance(r["request"], Request) for r in heard("request_scheduled"))
    scraped = heard("item_scraped")
    assert {s["item"]["url"] for s in scraped} == {s["response"].url for s in scraped}
    assert all(isinstance(s["response"], Response) for s in scraped)
    (dropped,) = heard("item_dropped")
    assert isinstance(dropped["exception"], DropItem) and str(dropped["exception"]) == "odd page"
    assert dropped["item"]["url"].endswith("/p/3") and dropped["response"].url.endswith("/p/3")
    (error,) = heard("item_error")
    assert error["failure"].getErrorMessage() == "the pipeline breaks"
    assert error["failure"].check(RuntimeError) and error["item"]["url"].endswith("/p/4")
    order = [name for name, kwargs in Heard.calls
             if kwargs.get("response") is dropped["response"]]  # fmt: skip
    assert order == ["response_received", "item_dropped"]
    assert Item.objects.get(job=job, data__url__endswith="/p/4").dropped == "pipeline_error"
    assert stat_rows.stats_of(job)["heard/closed_reason"] == "finished"  # outside a page
    assert Stat.objects.filter(job=job, url=None, name="heard/closed_reason").exists()


def test_a_receiver_that_raises_is_logged_and_harms_neither_the_page_nor_its_stats(
    counting, caplog
):
    with Site(pages=8) as site, caplog.at_level(logging.ERROR):
        job = counting_job(site, raising="1")
        run_job(job)
    assert "Error caught on signal handler" in caplog.text
    assert "a receiver that fails" in caplog.text
    stats = stat_rows.stats_of(job)
    assert stats["item_scraped_count"] == stats["heard/item_scraped"] == 8  # counted, then raised
    assert FrontierURL.objects.filter(job=job, state=URLState.DONE).count() == 9


def test_a_request_scheduled_handler_raising_ignore_request_leaves_the_request_out(counting):
    with Site(pages=12) as site:
        job = counting_job(site, ignore="/p/7")
        run_job(job)
        assert not FrontierURL.objects.filter(job=job, url=site.url("/p/7")).exists()
    assert FrontierURL.objects.filter(job=job, state=URLState.DONE).count() > 1


def test_connecting_to_a_signal_the_platform_never_sends_fails_the_job_at_start_saying_why(
    installed,  # noqa: F811
):
    job = jobs.create_job([], spider="deaf")
    jobs.start(job)
    job.refresh_from_db()
    assert job.state == "failed"
    assert "extension 'tests.spiders.counting.Idle': from_crawler failed: NotSupported: signal " \
           "spider_idle is never sent on this platform: a job ends when the database has no " \
           "URL left to fetch" in job.error  # fmt: skip


def test_receivers_get_the_arguments_they_take_once_each_and_errors_come_back():
    manager, got = SignalManager("crawler"), []
    ping = signals.Signal("ping")  # a spider's own signal is sent as Scrapy's are

    def only_spider(spider):
        got.append(("only_spider", spider))

    def everything(**kwargs):
        got.append(("everything", kwargs))

    def fails(spider):
        raise ValueError("no")

    async def later(spider):
        got.append(("later", spider))
        return "awaited"

    for receiver in (only_spider, everything, only_spider, fails, later):
        manager.connect(receiver, signal=ping)
    results = manager.send_catch_log(ping, spider="s", extra=1)
    assert got == [("only_spider", "s"),
                   ("everything", {"signal": ping, "sender": "crawler", "spider": "s",
                                   "extra": 1}),
                   ("later", "s")]  # fmt: skip
    assert [r for _, r in results][:2] == [None, None]
    assert isinstance(results[2][1], ValueError) and results[3][1] == "awaited"
    manager.disconnect(fails, signal=ping)
    assert manager.receivers(ping) == [only_spider, everything, later]
    with pytest.raises(NotSupported, match="signal engine_started is never sent"):
        manager.connect(only_spider, signal=signals.engine_started)


def test_a_crawler_made_alone_has_stats_in_a_dict_and_its_own_signals():
    from crawlplatform.spiders.settings import Crawler, Settings

    crawler = Crawler(Settings({}), None)
    crawler.stats.inc_value("x", start=5)
    crawler.stats.max_value("y", 3)
    assert crawler.stats.get_stats() == {"x": 6, "y": 3}
    assert crawler.signals.send_catch_log(signals.spider_opened, spider=None) == []


# Where the stats are shown ---------------------------------------------------------------


def test_a_spider_jobs_stats_show_in_its_status_the_api_the_dashboard_and_the_metrics(
    counting, admin_client, client, monkeypatch
):
    with Site(pages=6) as site:
        job = counting_job(site)
        run_job(job)
    monkeypatch.setenv("CRAWL_METRICS_STATS_PER_JOB", "3")
    series = {}
    for family in text_string_to_metric_families(client.get("/metrics").content.decode()):
        for sample in family.samples:
            if sample.name.startswith("crawlplatform_spider_stat"):
                series[(sample.name, *sorted(sample.labels.values()))] = sample.value
    stats = stat_rows.stats_of(job)
    first = ["counting/depth_max", "counting/depth_min", "counting/items"]  # by name
    numbers = [name for name, value in stats.items() if not isinstance(value, str)]
    assert sorted(stats)[:3] == first and "start_time" in numbers  # as Unix time
    assert series == {
        **{("crawlplatform_spider_stat", str(job.pk), name): stats[name] for name in first},
        ("crawlplatform_spider_stats_omitted", str(job.pk)): len(numbers) - 3,
    }
    finish_if_done(job)
    job.refresh_from_db()
    out = StringIO()
    call_command("job", "status", str(job.pk), stdout=out)
    text = out.getvalue()
    assert "  stats:\n" in text and "    counting/pages: 7\n" in text
    assert "    finish_reason: finished\n" in text and "    item_scraped_count: 6\n" in text
    out = StringIO()
    call_command("job", "status", str(job.pk), "-o", "json", stdout=out)
    shown = json.loads(out.getvalue())["stats"]
    assert shown["counting/pages"] == 7 and shown["finish_reason"] == "finished"
    assert datetime.fromisoformat(shown["finish_time"]) == job.finished_at
    served = admin_client.get(f"/api/jobs/{job.pk}/stats/").json()["spider_stats"]
    times = ("start_time", "finish_time")
    assert {k: v for k, v in served.items() if k not in times} == {
        k: v for k, v in shown.items() if k not in times}  # fmt: skip
    assert all(datetime.fromisoformat(served[k]) == datetime.fromisoformat(shown[k])
               for k in times)  # fmt: skip
    data = admin_client.get(f"/dashboard/jobs/{job.pk}/data").json()
    table = {row[0]["text"]: row[1]["text"] for row in data["tables"]["stats"]}
    assert table["counting/pages"] == "7" and table["finish_reason"] == "finished"
    page = admin_client.get(f"/dashboard/jobs/{job.pk}/").content.decode()
    assert 'data-table="stats"' in page and "counting/requests" in page


def test_a_crawl_without_a_spider_has_no_spider_stats(admin_client):
    job = jobs.create_job(["http://127.0.0.1:9/"])
    assert admin_client.get(f"/api/jobs/{job.pk}/stats/").json()["spider_stats"] == {}


def test_the_jobs_stats_are_kept_with_the_start_when_the_start_changes_them(counting):
    with Site(pages=3) as site:
        job = counting_job(site)
    start = Stat.objects.filter(job=job, url=None)
    assert dict(start.values_list("name", "kind")) == {"heard/spider_opened": "inc",
                                                      "heard/request_scheduled": "inc"}
    assert stat_rows.stats_of(job)["heard/request_scheduled"] == 1


def test_a_page_of_the_job_is_not_counted_by_a_pending_of_another_job(db):
    job, other = jobs.create_job([], spider="counting"), jobs.create_job([], spider="counting")
    collector = job_stats.JobStats(job.pk)
    with job_stats.bound(job_stats.Pending(other.pk)) as pending:
        collector.inc_value("a")  # the other job's page is bound: this one writes at once
    assert pending.rows() == [] and collector.get_value("a") == 1


def test_a_stats_collector_is_scrapys(db):
    """Scrapy's own collector and the platform's in-memory one agree, change for change."""
    from scrapy.statscollectors import StatsCollector as ScrapyCollector

    class Settings:
        @staticmethod
        def getbool(name: str) -> bool:
            return False

    class ScrapyCrawler:
        settings = Settings()
        spider = None

    theirs, ours = ScrapyCollector(ScrapyCrawler()), StatsCollector()
    for changes in [*PAGES, OUTSIDE]:
        _apply(theirs, changes)
        _apply(ours, changes)
    assert ours.get_stats() == theirs.get_stats()


def test_a_pages_statement_has_no_more_parameters_than_psycopg_keeps_the_parse_of():
    """Above psycopg's limits a statement's text is parsed again at every run: for a spider's
    page (its items' and stats' CTEs on top of a crawl's page), 0.11 ms of a worker's CPU."""
    for statement in (page_statements._SPIDER_SQL, page_statements._RECORD_SQL):
        assert statement.count("%s") <= psycopg_queries.MAX_CACHED_STATEMENT_PARAMS
        assert len(statement.encode()) <= psycopg_queries.MAX_CACHED_STATEMENT_LENGTH
