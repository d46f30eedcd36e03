"""The pipeline of one URL in-process, against a real local site, database and Redis: every
way processing can go wrong ends in a recorded outcome, and nothing is retried forever."""

from __future__ import annotations

import multiprocessing
import time
from http.server import BaseHTTPRequestHandler

import pytest
from django.utils import timezone

from tasks import engine
from tasks.content import pages
from tasks.fetch import politeness
from tasks.frontier import jobs, leases, transitions, wakeup
from tasks.frontier.claims import Claim
from tasks.rules.urls import host_of
from tests.conftest import wait_for
from tests.hostile import HostileSite, page
from tests.site import LocalSite, send
from web.models import CrawlJob, FrontierURL, URLState

pytestmark = pytest.mark.django_db(transaction=True)

HTML = {"Content-Type": "text/html"}


def run_url(job, url: str) -> FrontierURL:
    """Release ``url`` and process it the way a worker's task does, until it ends."""
    row = FrontierURL.objects.get(job=job, url=url)
    for _ in range(10):
        FrontierURL.objects.filter(pk=row.pk).update(
            state=URLState.SCHEDULED, not_before=timezone.now()
        )
        engine.process(row.pk, job.pk)
        row.refresh_from_db()
        if row.state != URLState.QUEUED:
            return row
    raise AssertionError(f"{url} still queued after 10 attempts: {row.error_reason}")


@pytest.fixture
def fast_retries(monkeypatch):
    monkeypatch.setenv("CRAWL_RETRY_BACKOFF_BASE_S", "0.01")


def start(site: HostileSite, **fields):
    job = jobs.create_job([site.url("/")], obey_robots=False, **fields)
    jobs.start(job)
    return job


def test_a_cookie_check_that_redirects_to_the_page_itself_stores_the_page(redis):
    """A site that sets a cookie and redirects to the page itself (a cookie check): the crawl
    follows it with the cookie and stores the page as the URL's own, not a redirect loop."""

    class Checked(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if "checked=1" in (self.headers.get("Cookie") or ""):
                send(self, 200, {}, page("Inside"))
            else:
                send(self, 302, {"Location": self.path, "Set-Cookie": "checked=1; Path=/"}, b"")

        def log_message(self, *args) -> None:
            pass

    with LocalSite(Checked) as site:
        job = jobs.create_job([site.url("/")], obey_robots=False)
        jobs.start(job)
        row = run_url(job, site.url("/"))
    assert (row.state, row.error_reason, row.attempts) == ("done", "", 1)
    assert (row.page.title, row.page.final_url) == ("Inside", site.url("/"))


def test_a_link_that_is_not_a_url_is_dropped_and_the_page_stored(redis):
    body = page("Links", ["http://[x", "/next", "http://" + "h" * 300 + ".test/"])
    with HostileSite(overrides={"/": lambda n: (200, HTML, body)}) as site:
        job = start(site)
        row = run_url(job, site.url("/"))
    assert (row.state, row.attempts) == ("done", 1)
    assert list(FrontierURL.objects.filter(job=job, depth=1).values_list("url", flat=True)) == [
        site.url("/next")
    ]


def test_a_redirect_to_something_that_is_not_a_url_fails_once(redis):
    with HostileSite(overrides={"/": lambda n: (302, {"Location": "http://[x"}, b"")}) as site:
        job = start(site)
        row = run_url(job, site.url("/"))
        assert site.hits("/") == 1
    assert (row.state, row.error_reason, row.attempts) == ("failed", "invalid_url", 1)


def test_an_unexpected_error_is_recorded_and_retried_only_to_the_cap(
    redis, fast_retries, monkeypatch
):
    def broken(*args, **kwargs):
        raise KeyError("something nobody foresaw")

    monkeypatch.setattr(pages, "store", broken)
    with HostileSite() as site:
        job = start(site)
        row = run_url(job, site.url("/"))
    assert (row.state, row.error_reason, row.attempts) == ("failed", "internal_error", 4)
    assert "KeyError" in row.error_message


def test_a_claim_after_the_last_attempt_fails_the_url_without_a_fetch(redis):
    with HostileSite() as site:
        job = start(site)
        FrontierURL.objects.filter(job=job).update(
            attempts=4, error_reason="lease_expired", error_message="its worker died"
        )
        row = run_url(job, site.url("/"))
        assert site.hits("/") == 0
    assert (row.state, row.error_reason) == ("failed", "attempts_exhausted")
    assert "lease_expired" in row.error_message


def _claimed_seed(site: HostileSite) -> tuple[FrontierURL, Claim]:
    """The seed of a new job on ``site``, claimed (leased) as a worker claims it."""
    job = start(site)
    url = FrontierURL.objects.get(job=job)
    FrontierURL.objects.filter(pk=url.pk).update(state=URLState.SCHEDULED)
    claim = transitions.claim(url.pk, job.pk)
    url.refresh_from_db()
    return url, claim


def test_a_page_being_worked_on_keeps_its_lease_until_it_ends(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_LEASE_S", "2")
    with HostileSite() as site:
        url, claim = _claimed_seed(site)
        first = url.lease_until
        leases.hold(url.pk, claim.attempt)
        assert leases.renew() == 1
        assert FrontierURL.objects.get(pk=url.pk).lease_until > first
        leases.let_go(url.pk)
        assert leases.renew() == 0


def test_the_lease_renewer_keeps_no_connection_while_the_process_holds_no_lease(
    redis, monkeypatch
):
    """A worker between pages (or idle for hours) holds no database connection for its
    lease renewer: it renews through one while leases are held, and closes it after."""
    from django.db import connection

    def sessions() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                           "current_database() AND pid <> pg_backend_pid()")  # fmt: skip
            return cursor.fetchone()[0]

    monkeypatch.setenv("CRAWL_LEASE_RENEW_S", "0.1")  # the renewer may be in a 3 s sleep now
    with HostileSite() as site:
        url, claim = _claimed_seed(site)
        wait_for(lambda: not leases._held and sessions() == 0, 6, "no other session at first")
        leases.hold(url.pk, claim.attempt)
        wait_for(lambda: FrontierURL.objects.get(pk=url.pk).lease_until > url.lease_until, 6,
                 "the renewer extends the lease")  # fmt: skip
        assert sessions() == 1  # the renewer's
        leases.let_go(url.pk)
        wait_for(lambda: sessions() == 0, 6, "the renewer's connection closed")


def _scheduled(job, site: HostileSite, paths: list[str]) -> list[int]:
    transitions.insert_urls(job.pk, [site.url(p) for p in paths], depth=1)
    ids = [FrontierURL.objects.get(job=job, url=site.url(p)).pk for p in paths]
    transitions.schedule(ids)
    return ids


def test_a_message_of_several_urls_ends_each_on_its_own_and_a_redelivery_does_nothing(redis):
    with HostileSite() as site:
        job = start(site)
        ids = _scheduled(job, site, ["/p/1", "/broken", "/nowhere", "/p/2"])
        message = ids[::-1] + ids[-1:]  # the message's order, not the ids'; one id twice
        assert engine.process_many(message, job.pk) == ["done", "failed", "queued", "done"]
        pace = redis.hgetall(wakeup.PACE.format(job=job.pk))  # the slot's time, for the release
        assert int(pace[b"n"]) == 4 and float(pace[b"s"]) > 0
        assert engine.process_many(message, job.pk) == []  # the same message delivered again
        assert int(redis.hget(wakeup.PACE.format(job=job.pk), "n")) == 4
        assert (site.hits("/p/1"), site.hits("/p/2")) == (1, 1)
    rows = FrontierURL.objects.filter(pk__in=ids).order_by("id")
    assert [(r.state, r.error_reason, r.attempts) for r in rows] == [
        ("done", "", 1), ("queued", "http_5xx", 1), ("failed", "http_4xx", 1), ("done", "", 1)
    ]  # fmt: skip
    assert not leases._held


def test_a_render_workers_slot_time_is_not_the_jobs_fetch_pace(redis, monkeypatch):
    """The slot time a message reports sizes the job's fetch messages: a render worker's
    seconds in its browser are not theirs."""
    monkeypatch.setattr(engine, "_process_one", lambda claimed, rendering, *a, **k: "done")
    with HostileSite() as site:
        job = start(site)
        ids = _scheduled(job, site, ["/p/1", "/p/2"])
        assert engine.process_many(ids, job.pk, rendering=True) == ["done", "done"]
        assert not redis.exists(wakeup.PACE.format(job=job.pk))
        FrontierURL.objects.filter(pk__in=ids).update(state=URLState.SCHEDULED)  # again
        assert engine.process_many(ids, job.pk) == ["done", "done"]
        assert int(redis.hget(wakeup.PACE.format(job=job.pk), "n")) == 2


def test_a_message_past_its_budget_or_on_a_stopping_worker_gives_back_what_it_did_not_start(
    redis, monkeypatch
):
    from tasks.worker import lifecycle

    with HostileSite() as site:
        job = start(site)
        ids = _scheduled(job, site, ["/slow", "/p/1", "/p/2"])
        monkeypatch.setenv("CRAWL_BATCH_BUDGET_S", "0.2")  # /slow takes 0.5 s
        assert engine.process_many(ids, job.pk) == ["done"]
        rows = FrontierURL.objects.filter(pk__in=ids[1:])
        assert {(r.state, r.attempts, r.lease_until) for r in rows} == {("queued", 0, None)}
        monkeypatch.delenv("CRAWL_BATCH_BUDGET_S")
        transitions.schedule(ids[1:])
        lifecycle.stopping.set()  # SIGTERM: the page in hand ends, the others go back
        try:
            assert engine.process_many(ids[1:], job.pk) == ["done"]
        finally:
            lifecycle.stopping.clear()
        assert (site.hits("/p/1"), site.hits("/p/2")) == (1, 0)
    last = FrontierURL.objects.get(pk=ids[2])
    assert (last.state, last.attempts) == ("queued", 0)
    assert not leases._held


def test_a_message_whose_job_is_cancelled_skips_what_it_has_not_started(redis, monkeypatch):
    done_one = engine._process_one

    def then_cancel(claimed, rendering, *args, **kwargs):
        state = done_one(claimed, rendering, *args, **kwargs)
        jobs.cancel(CrawlJob.objects.get(pk=claimed.job.pk))  # from the admin, meanwhile
        return state

    monkeypatch.setattr(engine, "_process_one", then_cancel)
    monkeypatch.setenv("CRAWL_JOB_STATE_CHECK_S", "0")
    with HostileSite() as site:
        job = start(site)
        ids = _scheduled(job, site, ["/p/1", "/p/2", "/p/3"])
        assert engine.process_many(ids, job.pk) == ["done"]
        assert (site.hits("/p/2"), site.hits("/p/3")) == (0, 0)
    rows = FrontierURL.objects.filter(pk__in=ids[1:])
    assert {(r.state, r.error_reason, r.attempts) for r in rows} == {("skipped", "cancelled", 0)}
    assert not leases._held


# The site reads each arrival in this process, on a thread that may wait for the GIL or a core
# on a busy machine: an arrival read late makes the gap after it look that much short.
ARRIVAL_LAG_S = 0.05


def _scheduled_on(job, sites_paths: list[tuple[HostileSite, str]]) -> list[int]:
    for site, path in sites_paths:
        transitions.insert_urls(job.pk, [site.url(path)], depth=1)
    ids = [FrontierURL.objects.get(job=job, url=site.url(path)).pk for site, path in sites_paths]
    transitions.schedule(ids)
    return ids


def test_a_url_whose_host_slot_opens_later_waits_aside_while_the_message_goes_on(redis):
    # Two URLs of a polite host, then one of another host: the second waits out the delay
    # aside, holding its slot, while the other host's URL is fetched (not after it).
    with HostileSite() as polite, HostileSite() as other:
        job = start(polite, delay=0.6)
        ids = _scheduled_on(job, [(polite, "/p/1"), (polite, "/p/2"), (other, "/p/3")])
        assert engine.process_many(ids, job.pk) == ["done", "done", "done"]
        first, second = polite.requests["/p/1"][0], polite.requests["/p/2"][0]
        assert other.requests["/p/3"][0] < second  # it went first
        assert second - first >= 0.6 - ARRIVAL_LAG_S  # the host's delay held all the same
    rows = FrontierURL.objects.filter(pk__in=ids)
    assert {(r.state, r.attempts) for r in rows} == {("done", 1)}
    assert not leases._held


def test_a_url_whose_capped_hosts_place_is_taken_waits_aside_not_in_the_frontier(redis):
    # Another worker's request to a host of one request at a time is out when this message
    # reaches /p/2: it waits aside for the host's next slot while /p/3 of another host goes,
    # then asks again and goes a delay after that request's answer, with no deferral.
    import threading

    with HostileSite() as polite, HostileSite() as other:
        job = start(polite, delay=0.6, host_concurrency=1)
        ids = _scheduled_on(job, [(polite, "/p/2"), (other, "/p/3")])
        host = host_of(polite.url("/"))
        out = politeness.acquire(job.pk, host, 0.6, 1, job)  # the other worker's request
        answered: list[float] = []

        def answer() -> None:
            answered.append(time.monotonic())
            politeness.finish(job.pk, host, out, signal=politeness.OK, pace=0.6, job=job)

        timer = threading.Timer(0.2, answer)
        timer.start()
        assert engine.process_many(ids, job.pk) == ["done", "done"]
        timer.join()
        second, third = polite.requests["/p/2"][0], other.requests["/p/3"][0]
    assert third < second  # it went first
    assert second - answered[0] >= 0.6 - ARRIVAL_LAG_S  # a pace after the answer
    rows = FrontierURL.objects.filter(pk__in=ids)
    assert {(r.state, r.attempts) for r in rows} == {("done", 1)}
    assert not leases._held


def test_a_messages_slot_time_leaves_out_its_sleep_for_a_hosts_slot(redis):
    """A message of one URL whose host's slot opens a delay later sleeps in its worker slot: the
    slot time it reports, which sizes the job's messages, leaves that sleep out, since a larger
    message spends it on its other URLs. (Counted, a broad crawl's robots.txt then page sized
    its messages at one URL each, every page asleep in its slot for the host's delay.)"""
    with HostileSite() as polite:
        job = start(polite, delay=0.6)
        first, second = _scheduled_on(job, [(polite, "/p/1"), (polite, "/p/2")])
        pace = wakeup.PACE.format(job=job.pk)
        assert engine.process_many([first], job.pk) == ["done"]
        before, began = float(redis.hget(pace, "s")), time.monotonic()
        assert engine.process_many([second], job.pk) == ["done"]  # sleeps for its slot
        wall = time.monotonic() - began
        reported = float(redis.hget(pace, "s")) - before
        assert wall >= 0.6 - ARRIVAL_LAG_S
        assert reported < wall - 0.4  # its work, without the sleep
        assert int(redis.hget(pace, "n")) == 2


def test_a_request_that_leaves_late_for_its_slot_keeps_the_delay_to_the_next(redis, monkeypatch):
    # /p/1 leaves 0.3 s after its slot opened (a busy worker): /p/2, on time for the slot a
    # delay after /p/1's, would reach the host 0.3 s early, were the next slot not held. (A
    # job with an in-flight cap holds it from the answer's end already.)
    opened = engine.antibot.open_session

    def slow_to_leave(job, host, who, jar):
        if not polite.requests:
            time.sleep(0.3)
        return opened(job, host, who, jar)

    monkeypatch.setattr(engine.antibot, "open_session", slow_to_leave)
    with HostileSite() as polite:
        job = start(polite, delay=0.6)
        ids = _scheduled_on(job, [(polite, "/p/1"), (polite, "/p/2")])
        assert engine.process_many(ids, job.pk) == ["done", "done"]
        first, second = polite.requests["/p/1"][0], polite.requests["/p/2"][0]
    assert second - first >= 0.6 - ARRIVAL_LAG_S, second - first


SLOWER_S = 1.5


def _slower(n: int) -> tuple[int, dict, bytes]:
    time.sleep(SLOWER_S)
    return 200, HTML, page("Slower")


def _back_late(
    monkeypatch, delay: float, host_concurrency: int
) -> tuple[float, float, politeness.Slot, float]:
    """A message of /p/1 and /p/2 of a polite host, then /slower of another: /p/2 waits aside
    for ``delay`` and is back late, after /slower. While /slower runs, another worker asks
    for the polite host's next slot. The time /p/2 was requested, /slower's end, the slot the
    other worker got and the time it opens."""
    done_one = engine._process_one
    other_worker: list = []

    def another_worker_meanwhile(claimed, rendering, *args, **kwargs):
        if claimed.url.url.endswith("/slower"):
            slot = politeness.acquire(claimed.job.pk, host_of(polite.url("/")), delay,
                                      host_concurrency, claimed.job)  # fmt: skip
            other_worker.extend([slot, time.monotonic() + slot.wait])
        return done_one(claimed, rendering, *args, **kwargs)

    monkeypatch.setattr(engine, "_process_one", another_worker_meanwhile)
    with HostileSite() as polite, HostileSite(overrides={"/slower": _slower}) as other:
        job = start(polite, delay=delay, host_concurrency=host_concurrency)
        ids = _scheduled_on(job, [(polite, "/p/1"), (polite, "/p/2"), (other, "/slower")])
        assert sorted(engine.process_many(ids, job.pk)) == ["done", "done", "done"]
        second, slower_ended = polite.requests["/p/2"][0], other.requests["/slower"][0] + SLOWER_S
    assert second > slower_ended - SLOWER_S  # /slower went first
    return second, slower_ended, *other_worker


def test_a_url_back_late_from_aside_takes_a_new_slot_and_keeps_the_delay_to_the_next(
    redis, monkeypatch
):
    # Meanwhile another worker took the polite host's next slot: /p/2 may not use its old one.
    second, _, _, other_at = _back_late(monkeypatch, delay=0.6, host_concurrency=0)
    assert abs(second - other_at) >= 0.6 - ARRIVAL_LAG_S, (second, other_at)


def test_on_a_host_of_one_request_at_a_time_a_url_back_late_keeps_its_slot(redis, monkeypatch):
    # /p/2 holds the host's one place while it waits aside: no other request is let in
    # meanwhile; back 0.5 s late, it goes at once, in the slot it holds.
    second, slower_ended, other, _ = _back_late(monkeypatch, delay=1.0, host_concurrency=1)
    assert not other.granted
    assert 0 <= second - slower_ended < 0.3, second - slower_ended  # not a new slot, 1 s later


def test_a_message_that_ends_early_gives_back_the_urls_waiting_aside_unfetched(
    redis, monkeypatch
):
    from tasks.worker import lifecycle

    done_one = engine._process_one

    def then_stop(claimed, rendering, *args, **kwargs):
        state = done_one(claimed, rendering, *args, **kwargs)
        if claimed.url.url.endswith("/p/3"):
            lifecycle.stopping.set()  # SIGTERM while /p/2 waits aside
        return state

    monkeypatch.setattr(engine, "_process_one", then_stop)
    with HostileSite() as polite, HostileSite() as other:
        job = start(polite, delay=0.6, host_concurrency=1)
        ids = _scheduled_on(job, [(polite, "/p/1"), (polite, "/p/2"), (other, "/p/3")])
        try:
            assert engine.process_many(ids, job.pk) == ["done", "done"]
        finally:
            lifecycle.stopping.clear()
        assert polite.hits("/p/2") == 0
    aside = FrontierURL.objects.get(pk=ids[1])
    assert (aside.state, aside.attempts, aside.lease_until) == ("queued", 0, None)
    assert not leases._held
    # its in-flight place on the host is free again: the host takes a request at once
    slot = politeness.acquire(job.pk, host_of(polite.url("/")), 0.0, 1, job)
    assert slot.granted


def test_a_stopping_worker_fetches_nothing_more_once_its_first_url_waits_aside(
    redis, monkeypatch
):
    from tasks.worker import lifecycle

    done_one = engine._process_one

    def then_stop(claimed, rendering, *args, **kwargs):
        state = done_one(claimed, rendering, *args, **kwargs)
        lifecycle.stopping.set()  # SIGTERM while the message's first URL waits aside
        return state

    monkeypatch.setattr(engine, "_process_one", then_stop)
    with HostileSite() as polite, HostileSite() as other:
        job = start(polite, delay=0.6, host_concurrency=1)
        ids = _scheduled_on(job, [(polite, "/p/1"), (other, "/p/2"), (other, "/p/3")])
        # another worker took the polite host's slot: /p/1's opens 0.6 s from now
        politeness.acquire(job.pk, host_of(polite.url("/")), 0.6, 0, job)
        try:
            assert engine.process_many(ids, job.pk) == []
        finally:
            lifecycle.stopping.clear()
        assert (polite.hits("/p/1"), other.hits("/p/2"), other.hits("/p/3")) == (0, 0, 0)
    rows = FrontierURL.objects.filter(pk__in=ids)
    assert {(r.state, r.attempts, r.lease_until) for r in rows} == {("queued", 0, None)}
    assert not leases._held


def test_an_error_while_a_url_waits_aside_leaves_its_slot_to_no_one(redis, monkeypatch):
    done_one = engine._process_one

    def then_fail(claimed, rendering, *args, **kwargs):
        if claimed.url.url.endswith("/p/3"):
            raise RuntimeError("the worker's own trouble, while /p/2 waits aside")
        return done_one(claimed, rendering, *args, **kwargs)

    monkeypatch.setattr(engine, "_process_one", then_fail)
    with HostileSite() as polite, HostileSite() as other:
        job = start(polite, delay=0.6, host_concurrency=1)
        ids = _scheduled_on(job, [(polite, "/p/1"), (polite, "/p/2"), (other, "/p/3")])
        with pytest.raises(RuntimeError):
            engine.process_many(ids, job.pk)
        assert polite.hits("/p/2") == 0
        # the host's one in-flight place is free: a request is let in at once
        assert politeness.acquire(job.pk, host_of(polite.url("/")), 0.0, 1, job).granted
    assert not leases._held


def test_a_late_message_of_a_cancelled_job_ends_its_urls_skipped(redis):
    with HostileSite() as site:
        job = start(site)
        ids = _scheduled(job, site, ["/p/1", "/p/2"])
        jobs.cancel(job)
        # a worker held /p/2 when the job was cancelled, and died: its lease ran out
        expired = timezone.now() - timezone.timedelta(seconds=5)
        FrontierURL.objects.filter(pk=ids[1]).update(state=URLState.LEASED, lease_until=expired)
        assert engine.process_many(ids, job.pk) == []  # its message, delivered again
        assert site.hits("/p/2") == 0
    rows = FrontierURL.objects.filter(pk__in=ids)
    assert {(r.state, r.error_reason) for r in rows} == {("skipped", "cancelled")}


def test_a_warm_shutdown_reaches_the_workers_prefork_children_and_no_other_worker():
    from celery import signals

    from tasks.worker import lifecycle

    def sees_it() -> bool:  # in a pool child: does it see its worker's shutdown?
        deadline = time.monotonic() + 10
        while not lifecycle.stopping.is_set():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    assert lifecycle._fresh_stop_flag in [ref() for _, ref in signals.worker_init.receivers]
    fork = multiprocessing.get_context("fork")
    lifecycle._fresh_stop_flag()  # Celery's worker_init: a worker starts, before its pool forks
    mine = lifecycle.stopping
    seen = fork.Queue()
    child = fork.Process(target=lambda: seen.put(sees_it()))
    child.start()
    try:
        lifecycle._fresh_stop_flag()  # another worker, forked from the same parent
        other = lifecycle.stopping
        assert other is not mine
        lifecycle.stopping = mine
        signals.worker_shutting_down.send(sender=None, sig="TERM", how="Warm", exitcode=0)
        assert seen.get(timeout=15) is True
        assert not other.is_set()
    finally:
        child.join(10)
        lifecycle._fresh_stop_flag()
