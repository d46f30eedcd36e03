"""The admin and the live dashboard as people use them: a real Chromium (Playwright on Debian's
chromium) against the real gunicorn web process with DEBUG off, real workers, the scheduler
and a local site; and what the dashboard shows to whom.

Screenshots of each step go to ``$TEST_ARTIFACTS/browser/`` (default: ``test-artifacts/`` at
the repository's root).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.utils import timezone

from tasks.defaults import setting
from tasks.fetch import circuit, politeness, render
from tasks.frontier import jobs, transitions
from tasks.worker import registry
from tests.conftest import wait_for
from tests.site import Site
from tests.webserver import ROOT, WebServer
from web import dashboard
from web.models import CrawlJob, FrontierURL, JobState, Page, URLState

pytestmark = pytest.mark.django_db(transaction=True)

ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS") or ROOT / "test-artifacts") / "browser"
PASSWORD = "a long test password 7"  # noqa: S105 (a throwaway user of the test database)
WAIT_MS = 60_000  # the longest a page waits for what it expects


@contextmanager
def chromium() -> Iterator:
    """A headless Chromium (the system's, as the render workers use it). Start it after the
    processes of the test: Playwright's sync API runs an event loop in this thread, so the
    ORM calls of the test need DJANGO_ALLOW_ASYNC_UNSAFE (they are synchronous all the same),
    which processes started later would inherit; and they get connections of their own
    (another context), closed here so that the test database can be dropped."""
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as mp, sync_playwright() as playwright:
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(
            executable_path=setting("CHROMIUM_PATH"), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser
        finally:
            browser.close()
            connections.close_all()


class Screenshots:
    """Numbered full-page screenshots in ``ARTIFACTS``."""

    def __init__(self) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for old in ARTIFACTS.glob("*.png"):
            old.unlink()
        self.taken: list[Path] = []

    def __call__(self, page, name: str) -> None:
        path = ARTIFACTS / f"{len(self.taken) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        self.taken.append(path)


def run_action(page, base: str, job: CrawlJob, action: str) -> str:
    """Select ``job`` on the admin's changelist, run ``action``; the message it reported."""
    page.goto(f"{base}/admin/web/crawljob/")
    page.check(f"input[name=_selected_action][value='{job.pk}']")
    page.select_option("select[name=action]", action)
    with page.expect_navigation():
        page.get_by_role("button", name="Go").click()
    return page.locator(".messagelist li").first.inner_text().lower()


def shown(page, key: str) -> str:
    return page.locator(f"[data-value={key}]").first.inner_text()


def count(page, key: str) -> int:
    return int(shown(page, key).replace(",", ""))


@pytest.mark.skipif(bool(render.unavailable()), reason=f"no browser: {render.unavailable()}")
def test_a_job_made_started_watched_paused_resumed_and_exported_in_the_browser(
    worker_env, workers, scheduler, tmp_path
):
    User.objects.create_superuser("ada", "ada@example.com", PASSWORD)
    shots = Screenshots()
    with (
        Site(pages=200, delay=0.02) as site,
        WebServer(worker_env, tmp_path / "web.log") as web,
    ):
        workers(processes=2, concurrency=4)
        with chromium() as browser:
            walk_through(browser, web.url, site, shots)
    assert all(path.stat().st_size > 10_000 for path in shots.taken)


def walk_through(browser, base: str, site: Site, shots: Screenshots) -> None:
    """Sign in, make a job, start it, watch it, pause, resume and export it."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    admin = context.new_page()
    loaded: dict[str, int] = {}
    context.on("response", lambda r: loaded.__setitem__(r.url.split("?")[0], r.status))

    admin.goto(f"{base}/admin/login/?next=/admin/")
    admin.fill("#id_username", "ada")
    admin.fill("#id_password", PASSWORD)
    shots(admin, "admin-login")
    admin.click("input[type=submit]")
    admin.wait_for_url(f"{base}/admin/")
    # DEBUG is off: the admin's styles come from WhiteNoise, and they apply.
    assert loaded[f"{base}/static/admin/css/base.css"] == 200
    header = admin.eval_on_selector("#header", "e => getComputedStyle(e).backgroundColor")
    assert header not in ("rgba(0, 0, 0, 0)", "transparent")
    shots(admin, "admin-index")

    admin.goto(f"{base}/admin/web/crawljob/add/")
    admin.fill("#id_name", "browser crawl")
    admin.fill("#id_seeds", site.url("/p/0"))
    admin.fill("#id_max_depth", "1000")  # every page of the site
    admin.fill("#id_delay", "0.1")  # about ten pages a second: slow enough to watch
    shots(admin, "admin-add-form")
    admin.click("input[name=_save]")
    admin.wait_for_url(f"{base}/admin/web/crawljob/")
    job = CrawlJob.objects.get(name="browser crawl")
    assert job.seeds == [site.url("/p/0")] and job.state == JobState.DRAFT
    shots(admin, "admin-changelist")

    assert "started: #" in run_action(admin, base, job, "started_jobs")

    dash = context.new_page()
    dash.goto(f"{base}/dashboard/")
    assert loaded[f"{base}/static/dashboard/dashboard.css"] == 200
    assert loaded[f"{base}/static/dashboard/dashboard.js"] == 200
    dash.wait_for_function(
        "() => document.querySelector('[data-value=workers]').textContent === '2'"
    )
    workers_table = dash.locator("tbody[data-table=workers]").inner_text()
    assert "main" in workers_table and "online" in workers_table  # the channel
    assert dash.locator("tbody[data-table=jobs] a", has_text="browser crawl").count() == 1
    shots(dash, "dashboard-fleet")

    dash.locator("tbody[data-table=jobs] a", has_text="browser crawl").click()
    dash.wait_for_url(f"{base}/dashboard/jobs/{job.pk}/")
    dash.evaluate("window.sameDocument = true")  # gone if the page were loaded again
    seen = count(dash, "done")
    for _ in range(2):  # the count moves on its own, twice
        dash.wait_for_function(
            "n => Number(document.querySelector('[data-value=done]').textContent"
            ".replace(/,/g, '')) > n",
            arg=seen,
        )
        seen = count(dash, "done")
    assert dash.evaluate("window.sameDocument") is True
    assert shown(dash, "state") == "running"
    shots(dash, "dashboard-job-running")

    assert "paused: #" in run_action(admin, base, job, "paused_jobs")
    dash.wait_for_function(
        "() => document.querySelector('[data-value=state]').textContent === 'paused'"
    )
    shots(dash, "dashboard-job-paused")
    assert "resumed: #" in run_action(admin, base, job, "resumed_jobs")
    dash.wait_for_function(
        "() => document.querySelector('[data-value=state]').textContent === 'finished'",
        timeout=120_000,
    )
    dash.wait_for_timeout(2_500)  # one more refresh: the final counts
    assert dash.evaluate("window.sameDocument") is True
    counts = jobs.counts(job.pk)
    assert count(dash, "done") == counts["done"] > 0
    assert count(dash, "queued") == count(dash, "leased") == 0
    assert dash.locator("tbody[data-table=checkpoints] tr").count() >= 2  # pause, finish
    shots(dash, "dashboard-job-finished")

    admin.goto(f"{base}/admin/web/crawljob/")
    admin.check(f"input[name=_selected_action][value='{job.pk}']")
    admin.select_option("select[name=action]", "export_jsonl")
    with admin.expect_download() as download:
        admin.get_by_role("button", name="Go").click()
    lines = Path(download.value.path()).read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    fetched = {row["url"] for row in rows if row["final_url"] is not None}
    stored = set(Page.objects.filter(job=job).values_list("url__url", flat=True))
    assert fetched == stored and len(rows) == sum(
        counts[s] for s in ("done", "failed", "needs_review")
    )
    shots(admin, "admin-after-export")
    context.close()


def test_a_person_who_is_not_staff_sees_only_their_own_jobs_and_hosts(client, redis, monkeypatch):
    monkeypatch.setenv("CRAWL_CIRCUIT_MIN_SPAN_S", "0")
    ada = User.objects.create_user("ada", password=PASSWORD)
    bob = User.objects.create_user("bob", password=PASSWORD)
    mine = jobs.create_job(["http://127.0.0.1:9/"], name="ada's crawl", owner=ada)
    theirs = jobs.create_job(["http://127.0.0.1:8/"], name="bob's crawl", owner=bob)
    for job, host in ((mine, "mine.test"), (theirs, "secret.test")):
        jobs.start(job)
        politeness.slow_down(job.pk, host, 5)
        for _ in range(3):
            circuit.record(job.pk, f"dead.{host}", failed=True, reason="connection refused")

    assert client.get("/dashboard/").url.startswith("/admin/login/?next=/dashboard/")
    client.force_login(ada)
    page = client.get("/dashboard/").content.decode()
    assert "ada&#x27;s crawl" in page and "mine.test" in page and "dead.mine.test" in page
    assert "bob" not in page and "secret.test" not in page
    data = client.get("/dashboard/data").json()
    assert data["values"]["throttled"] == "2" and data["values"]["circuits"] == "2"  # fleet-wide
    assert "secret.test" not in json.dumps(data)
    assert client.get(f"/dashboard/jobs/{mine.pk}/").status_code == 200
    assert client.get(f"/dashboard/jobs/{theirs.pk}/").status_code == 404
    assert client.get(f"/dashboard/jobs/{theirs.pk}/data").status_code == 404

    client.force_login(User.objects.create_user("root", password=PASSWORD, is_staff=True))
    page = client.get("/dashboard/").content.decode()
    assert "bob&#x27;s crawl" in page and "secret.test" in page
    assert client.get(f"/dashboard/jobs/{theirs.pk}/data").json()["values"]["queued"] == "1"


def test_the_job_view_counts_pages_per_minute_and_outcomes(client, redis):
    client.force_login(User.objects.create_user("ada", password=PASSWORD, is_staff=True))
    job = jobs.create_job(["http://127.0.0.1:9/"], name="rates")
    jobs.start(job)
    transitions.insert_urls(job.pk, [f"http://127.0.0.1:9/{i}" for i in range(6)], 1)
    now = timezone.now()
    urls = list(FrontierURL.objects.filter(job=job, depth=1).order_by("id"))
    for minutes_ago, url in zip([30, 30, 30, 0, 0], urls, strict=False):
        Page.objects.create(job=job, url=url, final_url=url.url, status=200, size=1,
                            elapsed_ms=1, fetched_at=now - timedelta(minutes=minutes_ago),
                            content_hash="x")  # fmt: skip
    FrontierURL.objects.filter(pk__in=[u.pk for u in urls[:5]]).update(
        state=URLState.DONE, http_status=200
    )
    FrontierURL.objects.filter(pk=urls[5].pk).update(
        state=URLState.FAILED, http_status=404, error_reason="http_404", error_message="gone"
    )
    data = client.get(f"/dashboard/jobs/{job.pk}/data").json()
    rate, start = data["charts"]["rate"]["values"], data["charts"]["rate"]["start"]

    def minute(moment) -> int:
        return (int(moment.timestamp()) // 60 * 60 - start) // 60

    earlier = minute(now - timedelta(minutes=30))
    assert len(rate) == dashboard.RATE_MINUTES and rate[earlier] == round(3 / 60, 2)
    assert rate[minute(now)] > 0 and sum(v > 0 for v in rate) == 2
    assert (data["values"]["done"], data["values"]["failed"], data["values"]["queued"]) == (
        "5", "1", "1"
    )  # fmt: skip
    assert [c["text"] for c in data["tables"]["outcomes"][0]] == ["http_404", "failed", "1"]
    assert [[c["text"] for c in row] for row in data["tables"]["statuses"]] == [
        ["200", "5"], ["404", "1"]
    ]  # fmt: skip
    assert data["tables"]["hosts"][0][0]["text"] == "127.0.0.1:9"
    assert data["tables"]["errors"][0][1]["text"] == "http://127.0.0.1:9/5"
    assert [s["name"] for s in data["bars"]["progress"]] == ["done", "failed", "queued"]
    # Settled minutes are counted once: a page that appears in one later is not seen.
    Page.objects.filter(job=job).update(fetched_at=now - timedelta(minutes=20))
    again = client.get(f"/dashboard/jobs/{job.pk}/data").json()["charts"]["rate"]["values"]
    assert again[earlier] == rate[earlier]


def test_workers_register_with_version_and_channel_and_leave_on_shutdown(
    worker_env, workers, client
):
    client.force_login(User.objects.create_user("ada", password=PASSWORD))
    pool = workers(processes=1, concurrency=2)
    found = wait_for(registry.workers, 30, "the worker in the registry")
    assert [(w["name"].split("@")[0], w["channel"], w["queues"]) for w in found] == [
        ("worker1", "main", "crawl")
    ]
    assert found[0]["pid"] == pool.procs["worker1"].pid and found[0]["version"]
    assert time.time() - found[0]["started"] < 60
    assert client.get("/dashboard/data").json()["values"]["workers"] == "1"
    pool.stop(grace=15)
    assert registry.workers() == []
    assert client.get("/dashboard/data").json()["values"]["workers"] == "0"
