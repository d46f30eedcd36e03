"""The anti-bot ladder end to end: a site that bans identities, gates a section behind a
cookie, answers some URLs with a CAPTCHA, and builds a section with JavaScript
(``tests/antibot.py``), crawled through real workers with pools of user agents and proxies.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from http.server import BaseHTTPRequestHandler

import pytest

from tasks.fetch import render
from tests.antibot import AntiBotSite, ForwardProxy
from tests.conftest import crawl_to_end
from tests.site import LocalSite, send
from web.models import FrontierURL, Page, Review

pytestmark = pytest.mark.django_db(transaction=True)

AGENTS = ["Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0", "Mozilla/5.0 (Macintosh) Safari/19"]
PASSWORD = "pr0xy-s3cret-8f2a"  # noqa: S105 (a test proxy's password; must appear in no log)
SECRET_ENV = {"CRAWL_PROXY_TEST_PASSWORD": PASSWORD}
SETTINGS = {"LADDER_BACKOFF_DELAY_S": 0.2, "PROXY_REST_S": 1.0}


def paths(urls, base: str) -> set[str]:
    return {u[len(base) :] for u in urls}


def check_outcome(site: AntiBotSite, job, expected: set[str], logs) -> None:
    stored = list(Page.objects.filter(url__job=job).values_list("url__url", "title"))
    stored_paths = paths([u for u, _ in stored], site.base)
    assert len(stored) == len(stored_paths)
    missing = FrontierURL.objects.filter(
        job=job, url__in=[site.url(p) for p in expected - stored_paths]
    ).values_list("url", "state", "error_reason", "error_message", "attempts")
    assert stored_paths == expected, (list(missing), stored_paths - expected)
    titles = {t for _, t in stored}
    assert not titles & {"Just a moment"}  # no CAPTCHA page stored as a page
    assert all(site.answered(p, 200) >= 1 for p in expected)
    parked = FrontierURL.objects.filter(job=job, state="needs_review")
    assert paths(parked.values_list("url", flat=True), site.base) == site.offer_paths()
    reviews = list(Review.objects.filter(job=job))
    assert len(reviews) == len(site.offer_paths())
    # the site's last answer, for a person: the CAPTCHA (or, had that attempt's identity just
    # been banned, the 403 that says so)
    for review in reviews:
        seen = (review.url.url, review.status, review.reason, review.level)
        assert review.status in (200, 403) and review.body, seen
        assert review.reason.startswith(("challenge", "http_403")), seen
    assert any("g-recaptcha" in review.body for review in reviews)
    others = FrontierURL.objects.filter(job=job).exclude(state__in=["done", "needs_review"])
    assert not others.exclude(url__contains="/private/").exists(), list(
        others.values_list("url", "state", "error_reason")
    )
    # rotation happened: the site saw several identities, and banned some of them
    assert len(site.identities()) >= 3 and site.banned
    text = "".join(p.read_text(errors="replace") for p in logs.glob("*.log"))
    assert PASSWORD not in text
    messages = FrontierURL.objects.filter(job=job).values_list("error_message", flat=True)
    assert not any(PASSWORD in m for m in messages)


def test_a_defended_site_is_crawled_through_rotating_identities(redis, tmp_path):
    with (
        AntiBotSite(pages=40, members=8, offers=3, limit=20) as site,
        ForwardProxy("127.0.0.2", credentials=f"crawler:{PASSWORD}") as authed,
        ForwardProxy("127.0.0.3", kind="socks5") as socks,
        ForwardProxy("127.0.0.4") as plain,
    ):
        pool = [authed.url("crawler:${CRAWL_PROXY_TEST_PASSWORD}"), socks.url(), plain.url()]
        job, _ = crawl_to_end(
            site.url("/"), tmp_path, SECRET_ENV, timeout=150, max_depth=5,
            user_agents=AGENTS, proxies=pool, warmup_path="/", settings=SETTINGS,
            headers={"Accept-Language": "en"},
        )  # fmt: skip
        (tmp_path / "site.log").write_text("\n".join(map(str, site.log)))
        check_outcome(site, job, site.content_paths() - {f"/app/item/{i}" for i in range(5)},
                      tmp_path / "logs")  # fmt: skip
        assert authed.requests and socks.requests and plain.requests
        assert site.answered("/", 200) >= 2  # warm-ups: each new session fetched the home page
    member_pages = {u.ladder_level for u in FrontierURL.objects.filter(url__contains="/members/")}
    assert member_pages  # the cookie-gated section was reached (its levels are recorded)


@pytest.mark.skipif(bool(render.unavailable()), reason=f"render step: {render.unavailable()}")
def test_render_auto_finds_the_javascript_section(worker_env, tmp_path, crawl_command):
    out = tmp_path / "out.jsonl"
    with (
        AntiBotSite(pages=10, members=3, offers=2, limit=1000) as site,
        ForwardProxy("127.0.0.2", credentials=f"crawler:{PASSWORD}") as authed,
    ):
        proc = crawl_command(
            {**worker_env, **SECRET_ENV}, site.url("/"), "--render", "auto",
            "--proxy", authed.url("crawler:${CRAWL_PROXY_TEST_PASSWORD}"),
            "--user-agent", AGENTS[0], "--warmup", "/", "--max-depth", "5",
            "--concurrency", "4", "--output", str(out), "--name", "render-auto",
        )  # fmt: skip
        stdout, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 0, stderr[-3000:]
        assert site.answered("/app/", 200) >= 2  # once plainly, once by Chromium
        # the job's identity, in the browser too: its user agent, through its proxy
        assert {(ip, ua) for ip, ua, _ in site.served["/app/"]} == {("127.0.0.2", AGENTS[0])}
    rows = {r["url"]: r for r in map(json.loads, out.read_text().splitlines())}
    done = {u[len(site.base) :] for u, r in rows.items() if r["error"] is None}
    assert {f"/app/item/{i}" for i in range(site.items)} <= done
    assert site.content_paths() <= done
    for path in site.offer_paths():
        assert re.match(r"needs_review: ", rows[site.url(path)]["error"])
    assert PASSWORD not in stdout + stderr


def test_without_chromium_the_render_step_is_skipped_and_the_url_parked(redis, monkeypatch, caplog):
    from tasks import engine
    from tasks.frontier import jobs, transitions

    monkeypatch.setenv("CRAWL_CHROMIUM_PATH", "/nonexistent/chromium")
    with AntiBotSite(limit=1000) as site:
        job = jobs.create_job([site.url("/app/")], render="auto", obey_robots=False)
        jobs.start(job)
        url = FrontierURL.objects.get(job=job)
        transitions.schedule([url.pk])
        with caplog.at_level("WARNING"):
            assert engine.process(url.pk, job.pk, rendering=True) == "needs_review"
        assert not site.served  # nothing was fetched
    row = FrontierURL.objects.get(pk=url.pk)
    assert "render step skipped: no Chromium at /nonexistent/chromium" in row.error_message
    assert "render step skipped" in caplog.text


# A site that bans an identity for BAN_S seconds after more than LIMIT requests in WINDOW
# seconds (429 without Retry-After for the first half of the ban, then 403), times scaled down
# from a real one (10 requests in 10 s, 20 s bans) so that a crawl takes seconds.
LIMIT, WINDOW, BAN_S = 6, 2.0, 2.0
PATIENT = {
    "IDENTITY_REST_S": 0.3, "IDENTITY_REST_MAX_S": 1.5, "LADDER_BACKOFF_DELAY_S": 0.1,
    "PROXY_REST_S": 1.0, "BAN_PATIENCE_S": 60.0, "RETRY_BACKOFF_BASE_S": 0.2,
}  # fmt: skip


def banning_site(**kwargs) -> AntiBotSite:
    return AntiBotSite(**{"pages": 24, "members": 6, "offers": 0, "limit": LIMIT,
                          "window": WINDOW, "ban_s": BAN_S, **kwargs})  # fmt: skip


def plain_pages(site: AntiBotSite) -> set[str]:
    """What a crawl that does not render stores: every page but the script-built ones."""
    return site.content_paths() - {f"/app/item/{i}" for i in range(site.items)}


def check_every_page_without_spending_attempts(site: AntiBotSite, job) -> None:
    rows = FrontierURL.objects.filter(job=job)
    done = paths(rows.filter(state="done").values_list("url", flat=True), site.base)
    left = rows.exclude(state="done").values_list("url", "state", "error_reason", "attempts")
    assert done == plain_pages(site), (plain_pages(site) - done, list(left))
    spent = rows.exclude(attempts=1).values_list("url", "attempts", "error_reason")
    assert not spent, list(spent)  # a ban gives the attempt back: one attempt per page
    refusals = {s for served in site.served.values() for _, _, s in served} & {429, 403}
    assert refusals == {429, 403}, "the site's bans were met, in both of their phases"


def test_bans_cost_identities_not_urls_and_the_plain_crawl_gets_every_page_too(redis, tmp_path):
    with (
        banning_site() as site,
        ForwardProxy("127.0.0.2") as one,
        ForwardProxy("127.0.0.3") as two,
        ForwardProxy("127.0.0.4") as three,
    ):
        pool = [one.url(), two.url(), three.url()]
        job, pooled_s = crawl_to_end(
            site.url("/"), tmp_path / "pooled", {}, timeout=120, max_depth=3,
            user_agents=AGENTS, proxies=pool, settings=PATIENT,
        )  # fmt: skip
        check_every_page_without_spending_attempts(site, job)
        assert len(site.identities()) >= 4 and site.banned
        # the cookie-gated section: each identity that got in had fetched the home page itself
        members = {(ip, ua) for p in site.served if p.startswith("/members/")
                   for ip, ua, status in site.served[p] if status == 200}  # fmt: skip
        warmed = {(ip, ua) for ip, ua, status in site.served["/"] if status == 200}
        assert members and members <= warmed, (members, warmed)
    with banning_site() as site:
        job, plain_s = crawl_to_end(site.url("/"), tmp_path / "plain", {}, timeout=120,
                                    max_depth=3, settings=PATIENT)  # fmt: skip
        check_every_page_without_spending_attempts(site, job)
        assert len(site.identities()) == 1
    print(f"pooled crawl {pooled_s:.1f} s, plain crawl {plain_s:.1f} s")


def test_a_cookie_gate_is_passed_by_every_identity_warming_up_by_itself(redis, tmp_path):
    with (
        banning_site(pages=4, members=20) as site,
        ForwardProxy("127.0.0.2") as one,
        ForwardProxy("127.0.0.3") as two,
    ):
        # bans move the host from identity to identity, each without a session at first: each
        # must fetch the home page (the job's seed) itself before the gate lets it in
        job, _ = crawl_to_end(
            site.url("/"), tmp_path, {}, timeout=120, max_depth=3, user_agents=AGENTS,
            proxies=[one.url(), two.url()], settings=PATIENT,
        )  # fmt: skip
        rows = FrontierURL.objects.filter(job=job, url__contains="/members/")
        done = paths(rows.filter(state="done").values_list("url", flat=True), site.base)
        assert done == {"/members/", *(f"/members/{i}" for i in range(20))}, list(
            rows.exclude(state="done").values_list("url", "state", "error_reason")
        )
        members = {(ip, ua) for p in site.served if p.startswith("/members/")
                   for ip, ua, status in site.served[p] if status == 200}  # fmt: skip
        warmed = {(ip, ua) for ip, ua, status in site.served["/"] if status == 200}
        assert len(members) >= 2 and members <= warmed, (members, warmed)


def test_a_page_refused_to_an_identity_the_host_lets_in_ends_on_its_attempts(redis, tmp_path):
    with AntiBotSite(pages=6, members=0, offers=0, limit=1000,
                     forbidden=frozenset({"/p/2"})) as site:  # fmt: skip
        job, took = crawl_to_end(site.url("/"), tmp_path, {}, timeout=60, max_depth=1,
                                 settings={**PATIENT, "BAN_PATIENCE_S": 3600.0})  # fmt: skip
        row = FrontierURL.objects.get(job=job, url=site.url("/p/2"))
        assert (row.state, row.error_reason, row.attempts) == ("needs_review", "banned", 4)
        # each refusal asked once for the page nearest to it, which was let in: the page's
        # refusal, so no identity was parked and the host kept its pace
        fetched = [p for p in site.content_paths() if site.answered(p, 200)]
        asked_again = sum(site.answered(p, 200) for p in fetched) - len(fetched)
        assert asked_again == 4 and took < 30, (asked_again, took)


def test_the_same_crawl_of_a_defended_site_gives_the_same_pages_five_times(redis, tmp_path):
    # two attempts a URL: what a run gets must not depend on how its bans fell
    settings = {**PATIENT, "RETRY_MAX_ATTEMPTS": 2}
    results = []
    with (
        banning_site(pages=12, members=4, offers=1) as site,
        ForwardProxy("127.0.0.2") as one,
        ForwardProxy("127.0.0.3") as two,
    ):
        for run in range(5):
            job, took = crawl_to_end(
                site.url("/"), tmp_path / str(run), {}, timeout=120, max_depth=3,
                user_agents=AGENTS, proxies=[one.url(), two.url()], settings=settings,
            )  # fmt: skip
            print(f"run {run}: {took:.1f} s")
            rows = FrontierURL.objects.filter(job=job)
            results.append((
                paths(rows.filter(state="done").values_list("url", flat=True), site.base),
                paths(rows.filter(state="needs_review").values_list("url", flat=True), site.base),
            ))  # fmt: skip
    assert results[0] == (plain_pages(site), site.offer_paths())
    assert all(result == results[0] for result in results), results


def test_a_url_refused_whatever_asks_ends_parked_after_the_patience(redis, tmp_path):
    with AntiBotSite(pages=4, members=0, offers=0, limit=1) as site:  # the home page, then 403s
        job, took = crawl_to_end(site.url("/"), tmp_path, {}, timeout=60, max_depth=1,
                                 settings={**PATIENT, "BAN_PATIENCE_S": 3.0})  # fmt: skip
        rows = FrontierURL.objects.filter(job=job).exclude(url=site.url("/"))
        assert len(rows) == 6  # /p/0-3, /members/, /app/
        # the host refused its one identity past the patience: its waiting URLs ended at once,
        # none of them spending an attempt on the bans
        assert set(rows.values_list("state", "error_reason")) == {("needs_review", "banned")}
        assert set(rows.values_list("attempts", flat=True)) <= {0, 1}
        assert max(rows.values_list("ladder_level", flat=True)) >= 1  # it climbed meanwhile
        reviews = Review.objects.filter(job=job)
        assert reviews.count() == 6 and all(r.status == 403 and r.body for r in reviews)
        assert all("past BAN_PATIENCE_S" in r.url.error_message for r in reviews)
        assert took < 3.0 + 10.0, took


@pytest.mark.parametrize("nearby", ["home page", "page that fails"])
def test_a_page_refused_to_everyone_is_its_own_whatever_else_the_host_answers(
    redis, tmp_path, nearby
):
    """A 403 to everyone: the seed itself, when no page was let in yet (its host's home page
    is asked instead, and let in), or a page whose nearest page that was let in answers 500
    now (the site answered: the identity is let in). Either way the refusal is the page's
    own: it spends its attempts and is parked, with no wait for a ban that is not there."""
    asked: dict[str, int] = {}

    class Docs(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            asked[self.path] = n = asked.get(self.path, 0) + 1
            if self.path == "/docs/secret":
                send(self, 403, {}, b"<html><body>Forbidden</body></html>")
            elif self.path == "/docs/page" and n > 1:  # stored once, then the server fails
                send(self, 500, {}, b"<html><body>Internal error</body></html>")
            else:
                body = '<a href="/docs/page">p</a><a href="/docs/secret">s</a>'
                send(self, 200, {}, f"<html><body>{body}</body></html>".encode())

        def log_message(self, *args) -> None:
            pass

    with LocalSite(Docs) as site:
        seed = site.url("/docs/secret" if nearby == "home page" else "/")
        job, took = crawl_to_end(seed, tmp_path, {}, timeout=60, max_depth=2, concurrency=1,
                                 settings={**PATIENT, "BAN_PATIENCE_S": 20.0})  # fmt: skip
    row = FrontierURL.objects.get(job=job, url=site.url("/docs/secret"))
    tries = row.attempts
    assert (row.state, row.error_reason) == ("needs_review", "banned"), row.error_message
    assert tries > 1 and "BAN_PATIENCE_S" not in row.error_message, row.error_message
    assert asked["/docs/secret"] == tries and took < 15, (asked, took)


def test_the_page_asked_nearby_is_one_let_in_by_a_get_a_recrawls_304_included(redis):
    """The nearby question goes to the nearest page of the section a GET of its URL let in: a
    2xx page or a recrawl's unchanged one (304), not a spider's 404 or POST; the home page
    only where the host let none in."""
    from tasks.fetch import refusals
    from tasks.frontier import jobs
    from tasks.frontier.claims import Claim

    job = jobs.create_job(["http://s.test/"], obey_robots=False)
    rows = {"/": (None, "queued"), "/shop/a": (304, "done"), "/shop/b": (200, "done"),
            "/shop/c": (404, "done"), "/shop/c#POST:0a": (200, "done"), "/shop/d": (None, "leased")}
    made = {path: FrontierURL.objects.update_or_create(
        job=job, url="http://s.test" + path,
        defaults={"host": "s.test", "state": state, "http_status": status})[0]
        for path, (status, state) in rows.items()}  # fmt: skip

    def nearest() -> str | None:
        claimed = Claim(url=made["/shop/d"], job=job, attempt=1, run=job.run)
        return refusals.nearest_let_in(claimed)

    assert nearest() == "http://s.test/shop/b"  # /shop/c (a 404) and its POST passed over
    FrontierURL.objects.filter(pk=made["/shop/b"].pk).update(state="failed")
    assert nearest() == "http://s.test/shop/a"  # unchanged in a recrawl: let in
    FrontierURL.objects.filter(pk=made["/shop/a"].pk).update(state="failed")
    assert nearest() == "http://s.test/"  # none let in: the home page


@pytest.mark.parametrize("bursts", [False, True], ids=["plain", "with burst bans"])
def test_a_section_refused_for_longer_than_the_patience_ends_alone(redis, tmp_path, bursts):
    """A 429 whose ``Retry-After`` (a date or seconds) outlasts ``BAN_PATIENCE_S`` on one
    section, while the rest of the host answers: the identity is let in nearby, so each URL of
    that section ends banned on its own and the rest of the host is crawled. With burst bans
    too (a 403 for a second after 4 requests within one), the nearby page may be refused for
    the identity's own short ban: the identity rests as for any ban, and is asked again."""
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    times: list[float] = []

    class Archive(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            now = time.monotonic()
            times.append(now)
            if bursts and self.path != "/robots.txt" and sum(t > now - 1 for t in times) > 4:
                send(self, 403, {}, b"<html><body>Too fast</body></html>")
                return
            if self.path.startswith("/archive/"):
                wait = later if self.path.endswith("/0") else "3600"
                send(self, 429, {"Retry-After": wait}, b"<html><body>Slow down</body></html>")
                return
            links = [f"/archive/{i}" for i in range(4)] + [f"/p/{i}" for i in range(60)]
            body = "".join(f'<a href="{href}">{href}</a>' for href in links)
            send(self, 200, {}, f"<html><body>{self.path} {body}</body></html>".encode())

        def log_message(self, *args) -> None:
            pass

    with LocalSite(Archive) as site:
        job, took = crawl_to_end(site.url("/"), tmp_path, {}, timeout=60, max_depth=2,
                                 delay=0.1, settings={**PATIENT, "BAN_PATIENCE_S": 300.0})
    rows = dict(FrontierURL.objects.filter(job=job).values_list("url", "state"))
    assert {u for u, s in rows.items() if s == "done"} == {
        site.url("/"), *(site.url(f"/p/{i}") for i in range(60))}
    archive = FrontierURL.objects.filter(job=job, url__contains="/archive/")
    assert set(archive.values_list("state", "error_reason")) == {("needs_review", "banned")}
    assert all("while its identity is let in nearby" in m
               for m in archive.values_list("error_message", flat=True))
    assert took < 60, took


@pytest.mark.parametrize("status", [200, 503])
def test_a_javascript_challenge_is_passed_by_the_browser_whatever_its_status(
    worker_env, tmp_path, crawl_command, status
):
    """Every page answers a challenge whose script sets a cookie and reloads, until the
    cookie comes back: ``--render auto`` hands it to Chromium at once (a 503 too, which a
    plain fetch would take for the page's own error), and plain fetches carry the cookie
    after."""
    if render.unavailable():
        pytest.skip(f"no browser here: {render.unavailable()}")
    challenge = (b"<html><head><title>Just a moment...</title><script>document.cookie="
                 b"'jc=ok; path=/';setTimeout(function(){location.reload()}, 200);</script>"
                 b"</head><body><p>One moment.</p></body></html>")  # fmt: skip

    class Challenged(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            links = "".join(f'<a href="/p/{i}">{i}</a>' for i in range(8))
            if self.path == "/robots.txt":
                send(self, 404, {}, b"")
            elif "jc=ok" not in self.headers.get("Cookie", ""):
                send(self, status, {}, challenge)
            else:
                send(self, 200, {}, f"<html><body>{self.path} {links}</body></html>".encode())

        def log_message(self, *args) -> None:
            pass

    out = tmp_path / "out.jsonl"
    with LocalSite(Challenged) as site:
        proc = crawl_command(worker_env, site.url("/"), "--render", "auto", "--max-depth", "2",
                             "--concurrency", "2", "--output", str(out))  # fmt: skip
        stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-3000:]
    rows = {r["url"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert {u for u, r in rows.items() if r["error"] is None} == {
        site.url("/"), *(site.url(f"/p/{i}") for i in range(8))}, [
            (u, r["error"]) for u, r in rows.items()]



def test_a_javascript_challenge_met_nearby_is_no_refusal_of_the_identity(redis, monkeypatch):
    """A page let in through the browser (its JavaScript challenge passed there) meets the
    challenge again when an identity new to the site asks it plainly: what every visitor new
    to the site is shown, no refusal of that identity. A block page nearby still is one."""
    from types import SimpleNamespace

    from tasks.content.links import JobCache
    from tasks.fetch import antibot, identity, refusals
    from tasks.frontier import jobs
    from tasks.frontier.claims import Claim
    from tasks.rules.urls import Scope

    monkeypatch.setenv("CRAWL_RENDER_WORKERS", "true")
    blocked = {"now": False}

    class Challenged(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if blocked["now"]:
                send(self, 200, {}, b"<html><body><h1>Access denied</h1></body></html>")
            else:
                send(self, 200, {}, b"<html><head><script>document.cookie='jc=ok';"
                                    b"location.reload();</script></head></html>")  # fmt: skip

        def log_message(self, *args) -> None:
            pass

    with LocalSite(Challenged) as site:
        job = jobs.create_job([site.url("/")], obey_robots=False, render="auto",
                              settings={"ALLOWED_NETWORKS": "127.0.0.0/8"})  # fmt: skip
        host = site.base.removeprefix("http://")
        FrontierURL.objects.filter(job=job).update(state="done", http_status=200)
        url = FrontierURL.objects.create(job=job, url=site.url("/p/5"), host=host)
        claimed = Claim(url=url, job=job, attempt=1, run=job.run)
        who = identity.current(job, host)
        passage = SimpleNamespace(who=who)

        def asked() -> bool | None:
            session = antibot.open_session(job, host, who, False)
            cache = JobCache(Scope.for_job(job), 100)
            return refusals.let_in_nearby(claimed, cache, host, passage, session)

        assert asked() is True  # the challenge: no refusal
        blocked["now"] = True
        assert asked() is False  # a block page: refused too
