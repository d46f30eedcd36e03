"""A defended site crawled as a new user crawls it: every kind of trouble on one host
(``tests/defended.py``: a cookie gate, a busy section that bans each part of an identity after
a burst for longer than a URL's retries last, soft blocks, a CAPTCHA, a section its script
builds), through ``manage.py crawl`` with real workers, a render worker with Chromium, three
proxies and two user agents. Every real page, nothing else stored, the CAPTCHA in review.
"""

from __future__ import annotations

import io
import json
import re
from types import SimpleNamespace

import pytest
from django.core.management import call_command

from tasks.fetch import identity, render
from tasks.frontier import jobs
from tests.antibot import ForwardProxy
from tests.conftest import crawl_to_end
from tests.defended import DefendedSite
from web.models import FrontierURL, Page, Review

pytestmark = pytest.mark.django_db(transaction=True)

AGENTS = ["Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0", "Mozilla/5.0 (Macintosh) Safari/19"]
# Bans of seconds (a real site's are minutes), each longer than a URL's retries last in tests
# (tests/budgets.py: three attempts 0.05 s apart), on a busy section a few times larger than
# what one identity may have in a window.
BANS = {"session": ("soft", 4.0, 3), "ua": ("403", 6.0, 5), "ip": ("429", 5.0, 7)}


def small_site(**kwargs) -> DefendedSite:
    shape = {"open_pages": 6, "gated": 6, "busy": 16, "captchas": 2, "js_items": 5,
             "window": 2.0, "bans": BANS, **kwargs}  # fmt: skip
    return DefendedSite(**shape)


def stored(site: DefendedSite, rows: dict) -> set[str]:
    return {u[len(site.base) :] for u, r in rows.items() if r["error"] is None}


@pytest.mark.skipif(bool(render.unavailable()), reason=f"render step: {render.unavailable()}")
def test_a_defended_site_gives_every_real_page_and_nothing_else(
    worker_env, tmp_path, crawl_command
):
    out = tmp_path / "out.jsonl"
    with (
        small_site() as site,
        ForwardProxy("127.0.0.2") as one,
        ForwardProxy("127.0.0.3") as two,
        ForwardProxy("127.0.0.4", kind="socks5") as three,
    ):
        proc = crawl_command(
            worker_env, site.url("/"), "--render", "auto", "--max-depth", "4",
            "--proxy", one.url(), "--proxy", two.url(), "--proxy", three.url(),
            "--user-agent", AGENTS[0], "--user-agent", AGENTS[1], "--output", str(out),
        )  # fmt: skip
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
    rows = {r["url"]: r for r in map(json.loads, out.read_text().splitlines())}
    lost = {u: r["error"] for u, r in rows.items() if r["error"] and "/verify/" not in u}
    assert stored(site, rows) == site.real_pages(), (site.real_pages() - stored(site, rows), lost)
    assert site.refusals()  # bans were met
    assert site.answered("/app/", 200) >= 2  # fetched, then rendered: the items are its script's
    titles = set(Page.objects.values_list("title", flat=True))
    assert not titles & {"Access denied", "Sorry", "Just a moment"}  # no block stored
    captchas = {u[len(site.base) :]: r["error"] for u, r in rows.items() if "/verify/" in u}
    assert set(captchas) == site.captcha_pages()
    assert all(e.startswith("needs_review: challenge") for e in captchas.values()), captchas
    assert Review.objects.count() == len(site.captcha_pages())
    # no URL spent an attempt on a ban: the busy pages were each fetched on their first
    spent = FrontierURL.objects.filter(url__contains="/busy/").exclude(attempts=1)
    assert not spent.exists(), list(spent.values_list("url", "attempts", "error_reason"))
    assert "banned (in review)" in stdout  # the summary counts what ended parked


def test_without_chromium_the_crawl_says_so_once_and_stores_pages_as_fetched(
    worker_env, tmp_path, crawl_command
):
    out = tmp_path / "out.jsonl"
    env = {**worker_env, "CRAWL_CHROMIUM_PATH": "/nonexistent/chromium"}
    with small_site(busy=0, captchas=0) as site:
        proc = crawl_command(env, site.url("/"), "--render", "auto", "--max-depth", "2",
                             "--output", str(out))  # fmt: skip
        stdout, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 0, stderr[-3000:]
        assert site.answered("/app/", 200) == 1  # fetched, never rendered
    warnings = [line for line in stderr.splitlines() if line.startswith("warning: --render")]
    assert warnings == ["warning: --render auto: no page is rendered: no Chromium at "
                        "/nonexistent/chromium (apt-get install chromium, or set "
                        "CRAWL_CHROMIUM_PATH)"], stderr[-3000:]  # fmt: skip
    rows = {r["url"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows[site.url("/app/")]["error"] is None  # stored as fetched, not parked


# Every signal a ban may answer with, each part with its own, in a crawl without a browser.
SIGNALS = [
    {"session": ("redirect", 3.0, 3), "ua": ("503", 5.0, 5), "ip": ("429ra", 4.0, 7)},
    {"session": ("soft", 3.0, 3), "ua": ("reset", 4.0, 5), "ip": ("429", 6.0, 7)},
]


@pytest.mark.parametrize("bans", SIGNALS, ids=["redirect-503-retry-after", "soft-reset-429"])
def test_every_ban_signal_costs_the_identity_never_the_url(redis, tmp_path, bans):
    with (
        small_site(bans=bans, js_items=0) as site,
        ForwardProxy("127.0.0.2") as one,
        ForwardProxy("127.0.0.3") as two,
    ):
        job, took = crawl_to_end(
            site.url("/"), tmp_path, {}, timeout=240, max_depth=4, user_agents=AGENTS,
            proxies=[one.url(), two.url()], render="never",
        )  # fmt: skip
    rows = FrontierURL.objects.filter(job=job)
    done = {u[len(site.base) :] for u in rows.filter(state="done").values_list("url", flat=True)}
    left = rows.exclude(state="done").exclude(url__contains="/verify/")
    assert done == site.real_pages(), list(
        left.values_list("url", "state", "error_reason", "error_message")
    )
    assert site.refusals()
    spent = rows.filter(url__contains="/busy/").exclude(attempts=1)
    assert not spent.exists(), list(spent.values_list("url", "attempts", "error_reason"))
    titles = set(Page.objects.filter(url__job=job).values_list("title", flat=True))
    assert not titles & {"Access denied", "Sorry", "Just a moment"}
    print(f"{sorted(bans.values())}: {took:.1f} s, {site.refusals()} refusals")


def test_a_host_that_refuses_every_identity_past_the_patience_ends_banned_at_once(redis, tmp_path):
    # the busy section refuses everyone after its first page, for far longer than the patience
    bans = {"ua": ("403", 3600.0, 1)}
    with small_site(bans=bans, open_pages=0, gated=0, captchas=0, js_items=0) as site:
        job, took = crawl_to_end(
            site.url("/busy/"), tmp_path, {}, timeout=120, max_depth=2, render="never",
            settings={"BAN_PATIENCE_S": 4.0, "IDENTITY_REST_S": 1.0},
        )  # fmt: skip
    rows = FrontierURL.objects.filter(job=job)
    parked = rows.filter(state="needs_review")
    assert parked.count() == site.sizes["busy"]  # the index was let in, then nothing
    assert set(parked.values_list("error_reason", flat=True)) == {"banned"}
    assert all("past BAN_PATIENCE_S" in m for m in parked.values_list("error_message", flat=True))
    assert set(parked.values_list("attempts", flat=True)) <= {0, 1}  # no attempt spent on bans
    assert Review.objects.filter(job=job).count() == parked.count()
    # at once: the patience and the parks, then the scheduler's next pass, nowhere near the
    # ban's hour (the bounds leave room for a loaded machine)
    let_in = Page.objects.get(url__job=job, url__url=site.url("/busy/")).fetched_at
    ended = max(Review.objects.filter(job=job).values_list("parked_at", flat=True))
    assert (ended - let_in).total_seconds() < 4.0 + 30.0, (let_in, ended)
    job.refresh_from_db()
    assert (job.finished_at - ended).total_seconds() < 30.0, (ended, job.finished_at, took)


def test_a_wait_for_a_ban_to_lapse_is_shown_by_job_status_and_the_dashboard(redis, admin_client):
    job = jobs.create_job(["http://shop.test/"])
    assert identity.wait_for_lapse(SimpleNamespace(pk=job.pk), "shop.test", 42.0)  # news
    assert not identity.wait_for_lapse(SimpleNamespace(pk=job.pk), "shop.test", 41.0)  # logged
    out = io.StringIO()
    call_command("job", "status", str(job.pk), stdout=out)
    assert re.search(r"\n  waiting for a ban to lapse on shop\.test, (41|40) s\n", out.getvalue())
    problems = admin_client.get(f"/dashboard/jobs/{job.pk}/data").json()["problems"]
    assert len(problems) == 1 and re.fullmatch(
        r"waiting for a ban to lapse on shop\.test, (41|40|39) s", problems[0]
    ), problems
