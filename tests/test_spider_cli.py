"""Spider jobs as users run them: ``manage.py crawl --spider NAME -a k=v --output items``
with real workers, ``manage.py spiders``, and ``manage.py export JOB --items``."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler

import pytest
from django.conf import settings
from scrapy.exporters import CsvItemExporter

from tasks.frontier.stats import stats_of
from tests.shop import Shop, expected_products, expected_stock
from tests.site import LocalSite, Site, send
from web.models import CrawlJob, FrontierURL, Item, JobState

pytestmark = pytest.mark.django_db(transaction=True)


def manage(env: dict, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=settings.BASE_DIR, timeout=timeout,
        env={**env, "CRAWL_SPIDER_MODULES": "tests.spiders"}, capture_output=True, text=True,
    )  # fmt: skip


def by_sku(items: list[dict]) -> list[dict]:
    return sorted(items, key=lambda i: (i["kind"], i["sku"]))


def test_crawl_with_a_spider_writes_its_items_and_export_gives_them_in_both_formats(
    worker_env, tmp_path
):
    out = tmp_path / "items.jsonl"
    with Shop() as shop:
        done = manage(worker_env, "crawl", "--spider", "shop", "-a", f"base={shop.base}",
                      "-a", "user=alice", "-a", "password=s3cret", "--concurrency", "4",
                      "--output", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected = by_sku(expected_products() + expected_stock())
    assert by_sku([json.loads(line) for line in out.read_text().splitlines()]) == expected
    assert f"{len(expected)} items; dropped: 1 no price, 1 pipeline_error, 1 schema" in done.stdout
    assert "(threads, forked)" in done.stderr  # forked after start() ran on the spider's loop
    job = CrawlJob.objects.get(spider="shop")
    assert job.state == JobState.FINISHED

    again = manage(worker_env, "export", str(job.pk), "--items", "--format", "jsonl", "-o", "-")
    assert again.returncode == 0, again.stderr
    assert by_sku([json.loads(line) for line in again.stdout.splitlines()]) == expected
    table = manage(worker_env, "export", str(job.pk), "--items", "--format", "csv", "-o", "-")
    stored = [json.loads(line) for line in out.read_text().splitlines()]  # in the stored order
    rows = list(csv.DictReader(io.StringIO(table.stdout)))
    assert len(rows) == len(expected)
    assert list(rows[0]) == list(stored[0])  # as Scrapy's CSV: the first item's fields
    scrapy = io.BytesIO()
    exporter = CsvItemExporter(scrapy)
    for item in stored:
        exporter.export_item(item)
    exporter.finish_exporting()
    assert table.stdout == scrapy.getvalue().decode().replace("\r\n", "\n")  # read as text


def test_every_worker_closes_its_pipelines_when_the_crawl_command_ends(worker_env, tmp_path):
    """The command stops its workers as soon as the job finishes: each process that opened
    the pipelines closes them (close_spider) and tells the spider why (closed: finished),
    though a forked worker leaves by os._exit, which runs no atexit hook."""
    journal = tmp_path / "journal"
    with Site(pages=40) as site:
        done = manage(worker_env, "crawl", "--spider", "journaled", "-a",
                      f"seed={site.url('/p/0')}", "-a", f"journal={journal}", "--workers", "2",
                      "--concurrency", "4")  # fmt: skip
    assert done.returncode == 0, done.stderr
    events: dict[str, list[str]] = {}
    for line in journal.read_text().splitlines():
        pid, event = line.split(" ", 1)
        events.setdefault(pid, []).append(event)
    started = [pid for pid, seen in events.items() if seen == ["open", "close"]]
    workers = [pid for pid, seen in events.items() if seen == ["open", "close", "closed finished"]]
    assert len(started) == 1 and workers, events  # the job's start opens and closes them too
    assert len(started) + len(workers) == len(events), events


def test_a_crawl_its_spider_closes_finishes_with_the_pages_in_flight_and_says_why(
    worker_env, tmp_path
):
    out = tmp_path / "items.jsonl"
    with Site(pages=300, delay=0.05) as site:
        done = manage(worker_env, "crawl", "--spider", "enough", "-a", f"seed={site.url('/p/0')}",
                      "-a", "last=40", "--concurrency", "4", "--output", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "the spider closed the crawl: enough pages" in done.stdout
    job = CrawlJob.objects.get(spider="enough")
    assert (job.state, job.stats["close_reason"]) == (JobState.FINISHED, "enough pages")
    items = [json.loads(line)["url"] for line in out.read_text().splitlines()]
    assert site.url("/p/40") in items and len(items) == len(set(items)) < 300


def test_a_spider_job_ended_by_its_max_pages_finishes_as_closespider_pagecount(worker_env):
    """``--max-pages`` (a spider's ``CLOSESPIDER_PAGECOUNT``): the ``finish_reason`` stat
    (and what the spider's closed() is told) is ``closespider_pagecount``, as under Scrapy."""
    with Site(pages=40) as site:
        done = manage(worker_env, "crawl", "--spider", "enough", "-a", f"seed={site.url('/p/0')}",
                      "-a", "last=99", "--max-pages", "3")  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = CrawlJob.objects.get(spider="enough")
    assert job.state == JobState.FINISHED and 0 < Item.objects.filter(job=job).count() <= 3
    assert stats_of(job)["finish_reason"] == "closespider_pagecount"


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_items_on_standard_output_are_all_it_holds_whatever_the_spider_prints(worker_env,
                                                                              log_format):
    with Site(pages=4) as site:
        done = manage({**worker_env, "LOG_FORMAT": log_format}, "crawl", "--spider", "printing",
                      "-a", f"seed={site.url('/p/0')}", "--concurrency", "2", "-o", "jsonl")
    assert done.returncode == 0, done.stderr
    items = [json.loads(line) for line in done.stdout.splitlines()]  # nothing else
    assert {item["url"] for item in items} >= {site.url(f"/p/{i}") for i in range(4)}
    for printed in ("starting http", "opened printing", "closed printing"):  # this process's
        assert printed in done.stderr  # (the workers' go to their logs)


def test_a_spider_job_ends_at_its_closespider_itemcount(worker_env):
    """As Scrapy's: the crawl ends once the run has scraped that many items (pages in flight
    add theirs), with ``closespider_itemcount`` as its finish reason."""
    with Site(pages=200) as site:
        done = manage(worker_env, "crawl", "--spider", "enough_items", "-a",
                      f"seed={site.url('/p/0')}", "--concurrency", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = CrawlJob.objects.get(spider="enough_items")
    assert job.state == JobState.FINISHED and 5 <= Item.objects.filter(job=job).count() < 40
    assert stats_of(job)["finish_reason"] == "closespider_itemcount"


def test_a_page_refused_to_everyone_among_404s_a_spider_takes_is_the_pages_own(worker_env):
    """A 403 among pages and 404s that the spider's callback takes (``handle_httpstatus_list``):
    the identity it refused is let in by the nearest page with a 2xx answer, not asked a
    404 of the spider's again, so the refusal is the page's own. It spends its attempts and
    is parked for review; nothing waits for a ban that is not there (the spider's
    ``BAN_PATIENCE_S`` would park it with its first attempt), and each other page is asked
    once, but for a question to a page nearby at each refusal."""
    asked: dict[str, int] = {}
    pages = [f"/docs/p{n:02}" for n in range(10)] + [f"/docs/q{n:02}" for n in range(5)]

    class Docs(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            asked[self.path] = asked.get(self.path, 0) + 1
            links = "".join(f'<a href="{p}">{p}</a>' for p in [*pages, "/docs/q02x"])
            if self.path == "/docs/":
                send(self, 200, {}, f"<html><body>{links}</body></html>".encode())
            elif self.path.startswith("/docs/p"):
                send(self, 200, {}, b"<html><title>page</title><body>text</body></html>")
            elif self.path == "/docs/q02x":
                send(self, 403, {}, b"<html><body>Forbidden</body></html>")
            else:
                send(self, 404, {}, b"<html><body>Not found</body></html>")

        def log_message(self, *args) -> None:
            pass

    with LocalSite(Docs) as site:
        done = manage(worker_env, "crawl", "--spider", "pages_and_404",
                      "-a", f"seed={site.url('/docs/')}")  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = CrawlJob.objects.get(spider="pages_and_404")
    row = FrontierURL.objects.get(job=job, url=site.url("/docs/q02x"))
    tries = int(worker_env.get("CRAWL_RETRY_MAX_ATTEMPTS", 4))
    assert (row.state, row.error_reason, row.attempts) == ("needs_review", "banned", tries)
    assert "BAN_PATIENCE_S" not in row.error_message, row.error_message
    assert asked["/docs/q02x"] == tries
    let_in = [p for p in ["/docs/", *pages] if not p.startswith("/docs/q")]
    # a question nearby at each refusal, and a warm-up visit (no session yet) at the first
    assert tries <= sum(asked[p] - 1 for p in let_in) <= tries + 1, asked
    assert all(asked[p] == 1 for p in pages if p.startswith("/docs/q")), asked  # 404s once
    assert Item.objects.filter(job=job).count() == 1 + len(pages)  # the 404s' items too


def test_crawl_output_replaces_the_feeds_as_scrapys_o_does(worker_env, tmp_path):
    """With ``--output`` a spider job writes its items there alone, as ``scrapy crawl -o``
    writes no ``FEEDS`` of the spider's or the project's; a run without it (the job's
    recrawl) writes its ``FEEDS``."""
    feed, out = tmp_path / "feed.jsonl", tmp_path / "out.jsonl"
    env = {**worker_env, "CRAWL_FEEDS": json.dumps({str(feed): {"format": "jsonlines"}})}
    with Site(pages=20) as site:
        args = ["crawl", "--spider", "enough", "-a", f"seed={site.url('/p/0')}", "-a", "last=3"]
        replaced = manage(env, *args, "--output", str(out))
        assert replaced.returncode == 0, replaced.stderr
        assert out.read_text() and not feed.exists()
        job = CrawlJob.objects.get(spider="enough")
        written = manage(env, "crawl", "--recrawl", str(job.pk))
    assert written.returncode == 0, written.stderr
    for written_to in (out, feed):  # each run's items: where the crawl ends among them
        assert site.url("/p/3") in [json.loads(line)["url"]
                                    for line in written_to.read_text().splitlines()]  # fmt: skip


def test_spiders_lists_what_is_installed_and_what_cannot_be_loaded(worker_env):
    done = manage(worker_env, "spiders")
    assert done.stdout.splitlines() == [
        "carrying\ttests.spiders.pages.Carrying",
        "consent\ttests.spiders.cookies.Consent",
        "counting\ttests.spiders.counting.Counting",
        "crawl_rules\ttests.spiders.rules.CrawlRules",
        "deaf\ttests.spiders.counting.Deaf",
        "depths\ttests.spiders.redirects.Depths",
        "enough\ttests.spiders.pages.Enough",
        "enough_at_start\ttests.spiders.pages.EnoughAtStart",
        "enough_items\ttests.spiders.pages.EnoughItems",
        "enough_on_error\ttests.spiders.pages.EnoughOnError",
        "errbacks\ttests.spiders.shop.ErrbackSpider",
        "flaky\ttests.spiders.counting.Flaky",
        "half_done\ttests.spiders.counting.HalfDone",
        "introduced\ttests.spiders.pages.Introduced",
        "journaled\ttests.spiders.pages.Journaled",
        "odd_settings\ttests.spiders.shop.OddSettingsSpider",
        "offsite\ttests.spiders.offsite.Offsite",
        "one_loop\ttests.spiders.pages.OneLoop",
        "pages\ttests.spiders.pages.Pages",
        "pages_and_404\ttests.spiders.pages.PagesAnd404",
        "posted_redirects\ttests.spiders.redirects.PostedRedirects",
        "printing\ttests.spiders.pages.Printing",
        "ranked\ttests.spiders.shop.RankedSpider",
        "redirected_errors\ttests.spiders.redirects.RedirectedErrors",
        "redirects\ttests.spiders.redirects.Redirects",
        "refreshed\ttests.spiders.redirects.Refreshed",
        "search\ttests.spiders.shop.SearchSpider",
        "shop\ttests.spiders.shop.ShopSpider",
        "stall\ttests.spiders.stall.Stall",
        "stateful\ttests.spiders.pages.Stateful",
        "statuses\ttests.spiders.redirects.Statuses",
        "stubborn\ttests.spiders.shop.StubbornSpider",
        "uncookied\ttests.spiders.cookies.Uncookied",
        "unfollowed\ttests.spiders.redirects.Unfollowed",
        "unkeepable\ttests.spiders.shop.UnkeepableSpider",
        "unreached\ttests.spiders.redirects.Unreached",
        "unredirected\ttests.spiders.redirects.Unredirected",
        "unrefreshed\ttests.spiders.redirects.Unrefreshed",
        "updating\ttests.spiders.pages.Updating",
    ]
    assert "cannot load tests.spiders.broken: ModuleNotFoundError" in done.stderr


def test_crawl_naming_an_unknown_spider_fails_at_start_with_the_reason(worker_env):
    done = manage(worker_env, "crawl", "--spider", "nosuch", "--workers", "0")
    assert done.returncode != 0
    assert "no spider named 'nosuch' is installed" in done.stderr


def test_parse_prints_what_a_callback_yields_for_one_url_and_stores_nothing(worker_env):
    with Shop() as shop:
        done = manage(worker_env, "parse", f"{shop.base}/catalog/1", "--spider", "shop",
                      "--ignore-robots", "-a", f"base={shop.base}")  # fmt: skip
        assert done.returncode != 0 and "http_4xx" in done.stderr  # 403: not logged in
        page = manage(worker_env, "parse", f"{shop.base}/login", "--spider", "shop",
                      "--callback", "login", "-a", f"base={shop.base}", "-a", "user=alice",
                      "-a", "password=s3cret")  # fmt: skip
    assert page.returncode == 0, page.stderr
    lines = page.stdout.splitlines()
    assert lines[0] == f">>> 200 {shop.base}/login <<<"
    assert lines[-1] == f"<POST {shop.base}/login> -> logged_in"
    assert not CrawlJob.objects.exists()
    wrong = manage(worker_env, "parse", f"{shop.base}/login", "--spider", "shop", "--meta", "[1]")
    assert wrong.returncode != 0 and "--meta: a JSON object, not '[1]'" in wrong.stderr


def test_parse_with_rules_calls_back_by_the_crawlspiders_rule_that_takes_the_url(worker_env):
    """``--rules``, as Scrapy's ``parse --rules``: the first rule whose link extractor takes
    the URL names the callback, called with the rule's ``cb_kwargs``."""
    env = {**worker_env, "CRAWL_SPIDER_MODULES": "tests.spiders"}
    with Site(pages=30) as site:
        page = manage(env, "parse", site.url("/p/4"), "--spider", "crawl_rules", "--rules")
        query = manage(env, "parse", site.url("/p/0?a=1&b=2"), "--spider", "crawl_rules", "-r")
        both = manage(env, "parse", site.url("/p/3"), "--spider", "crawl_rules", "--rules",
                      "--callback", "parse_page")  # fmt: skip
        plain = manage(env, "parse", site.url("/p/3"), "--spider", "pages", "--rules")
    assert page.returncode == 0, page.stderr
    lines = page.stdout.splitlines()
    assert json.loads(lines[2]) == {"url": site.url("/p/4"), "depth": 0, "kind": "page"}
    assert query.returncode == 0, query.stderr
    assert json.loads(query.stdout.splitlines()[2])["kind"] == "query"  # the second rule's
    assert both.returncode != 0 and "give --callback or --rules" in both.stderr
    assert plain.returncode != 0 and "has no CrawlSpider rules" in plain.stderr


def test_parse_runs_on_the_embedded_defaults_with_no_crawl_running(worker_env, tmp_path):
    """No database or Redis configured and no crawl running: the command starts its own
    private redis-server for robots.txt and identities, and stops it; a redirect within the
    URL's host is followed."""
    env = {key: value for key, value in worker_env.items()
           if key not in ("DATABASE_URL", "REDIS_URL", "CRAWL_ALLOWED_NETWORKS")}  # fmt: skip
    env.update(CRAWL_DATA_DIR=str(tmp_path / "data"), PATH=os.environ["PATH"])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/old":
                send(self, 302, {"Location": "/new"}, b"")
            else:
                send(self, 200 if self.path == "/new" else 404, {}, b"<a href='/x'>x</a>")

        def log_message(self, *args) -> None:
            pass

    with LocalSite(Handler) as site:
        done = manage(env, "parse", f"{site.base}/old", "--spider", "redirects",
                      "--allow-network", "127.0.0.0/8", "-a", f"base={site.base}",
                      "--cbkwargs", '{"again": true}', "--meta", '{"m": 1}')  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f">>> 200 {site.base}/new <<<"
    assert lines[2] == json.dumps({"again": True, "url": f"{site.base}/new"}, sort_keys=True)
    assert lines[-2:] == [f"<GET {site.base}/x>", f"<GET {site.base}/r/g> -> parse_other"]
    assert not (tmp_path / "data" / "redis.sock").exists()  # its redis-server stopped


def test_startspider_writes_a_spider_that_imports_and_runs_its_template(worker_env, tmp_path):
    done = manage(worker_env, "startspider", "books", "books.example", "--directory",
                  str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    namespace: dict = {}
    exec(compile((tmp_path / "books.py").read_text(), "books.py", "exec"), namespace)  # noqa: S102
    spider = namespace["BooksSpider"]()
    assert (spider.name, spider.allowed_domains) == ("books", ["books.example"])
    again = manage(worker_env, "startspider", "books", "books.example", "--directory",
                   str(tmp_path))  # fmt: skip
    assert again.returncode != 0 and "exists" in again.stderr
    deep = manage(worker_env, "startspider", "blog", "https://Blog.example/2026/?page=2",
                  "--directory", str(tmp_path))  # fmt: skip
    assert deep.returncode == 0, deep.stderr
    exec(compile((tmp_path / "blog.py").read_text(), "blog.py", "exec"), namespace)  # noqa: S102
    blog = namespace["BlogSpider"]()
    assert blog.allowed_domains == ["blog.example"]
    assert blog.start_urls == ["https://Blog.example/2026/?page=2"]
