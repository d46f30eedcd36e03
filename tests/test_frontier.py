"""Frontier moves against the real database: exact dedup, compare-and-set claims, lease tokens."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from tasks.fetch import outcomes
from tasks.frontier import jobs, requeue, transitions
from tasks.frontier.claims import Claim, LeaseLost
from tasks.worker import metrics
from tests.conftest import database_url, wait_for
from web.models import CrawlJob, FrontierURL, Item, JobState, Page, URLState

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def job():
    j = jobs.create_job(["http://127.0.0.1:9/"], max_depth=3)
    jobs.start(j)
    return j


def schedule(url: FrontierURL) -> None:
    FrontierURL.objects.filter(pk=url.pk).update(state=URLState.SCHEDULED)


def page_for(claim: Claim) -> Page:
    return Page(
        job_id=claim.job.pk,
        url_id=claim.url.pk,
        final_url=claim.url.url,
        status=200,
        size=0,
        elapsed_ms=1,
        fetched_at=timezone.now(),
        content_hash="0" * 64,
    )


def test_inserting_a_url_twice_keeps_one_row(job):
    transitions.insert_urls(job.pk, ["http://127.0.0.1:9/a", "http://127.0.0.1:9/a"], depth=1)
    transitions.insert_urls(job.pk, ["http://127.0.0.1:9/a"], depth=2)
    rows = FrontierURL.objects.filter(job=job, url="http://127.0.0.1:9/a")
    assert [(r.depth, r.host) for r in rows] == [(1, "127.0.0.1:9")]


def test_only_one_claim_wins_and_a_done_url_is_not_claimed_again(job):
    url = FrontierURL.objects.get(job=job)
    schedule(url)
    first = transitions.claim(url.pk, job.pk)
    assert first is not None and first.attempt == 1
    assert transitions.claim(url.pk, job.pk) is None  # a duplicate message while leased
    transitions.record_page(first, page_for(first), ["http://127.0.0.1:9/next"])
    assert transitions.claim(url.pk, job.pk) is None  # a redelivery after done
    assert FrontierURL.objects.get(pk=url.pk).state == URLState.DONE
    assert FrontierURL.objects.filter(job=job, depth=1, discovered_from=url).count() == 1


def test_a_pages_links_are_inserted_each_as_it_is_with_its_host(job):
    url = FrontierURL.objects.get(job=job)
    schedule(url)
    claim = transitions.claim(url.pk, job.pk)
    links = [
        "http://127.0.0.1:9/a%0Ab",  # an encoded line break stays one URL
        "http://127.0.0.1:9/%C3%A9t%C3%A9?q=1,2&r='x'",
        "http://localhost:8080/{}",
        *(f"http://127.0.0.{i % 3 + 2}/p/{i}" for i in range(300)),
    ]
    transitions.record_page(claim, page_for(claim), sorted(links))
    rows = FrontierURL.objects.filter(job=job, discovered_from=url).values_list("url", "host")
    assert sorted(rows) == sorted((u, u.split("/")[2]) for u in links)
    other = transitions.claim(FrontierURL.objects.get(job=job, url=links[0]).pk, job.pk)
    assert other is None  # queued, not scheduled: claims take scheduled URLs only
    schedule(FrontierURL.objects.get(job=job, url=links[0]))
    done = transitions.claim(FrontierURL.objects.get(job=job, url=links[0]).pk, job.pk)
    transitions.record_page(done, page_for(done), [])  # no links at all
    assert FrontierURL.objects.filter(job=job).count() == len(links) + 1


def test_links_robots_forbids_enter_skipped_and_counted_and_known_ones_stay(job):
    url = FrontierURL.objects.get(job=job)
    schedule(url)
    claim = transitions.claim(url.pk, job.pk)
    queued = [f"http://127.0.0.1:9/open/{i}" for i in range(3)]
    forbidden = ["http://127.0.0.1:9/private/a", "http://127.0.0.1:9/private/b", url.url]
    counted = metrics.PAGES.labels(str(job.pk), "robots")
    before = counted._value.get()
    transitions.record_page(claim, page_for(claim), queued, forbidden=sorted(forbidden))
    rows = {r["url"]: r for r in FrontierURL.objects.filter(job=job).values()}
    assert {rows[u]["state"] for u in queued} == {URLState.QUEUED}
    for u in forbidden[:2]:  # as a fetch would have ended them, without an attempt
        assert (rows[u]["state"], rows[u]["error_reason"], rows[u]["attempts"]) == (
            URLState.SKIPPED, "robots", 0)  # fmt: skip
        assert rows[u]["error_message"] == "disallowed by robots.txt"
        assert rows[u]["depth"] == 1 and rows[u]["discovered_from_id"] == url.pk
    assert rows[url.url]["state"] == URLState.DONE  # a known URL is left as it is
    assert counted._value.get() - before == 2


def test_a_page_reads_back_as_written_and_a_recrawl_replaces_it_keeping_its_first_run(job):
    """Each database writes the page, its links and the URL's move with statements of its own
    (no model instance): times and JSON read back as written and compare as times."""
    url = FrontierURL.objects.get(job=job)
    schedule(url)
    claim = transitions.claim(url.pk, job.pk)
    page = page_for(claim)
    page.data, page.http, page.checked_at = {"t": ["é\n", 1]}, {"p": "HTTP/1.1"}, page.fetched_at
    transitions.record_page(claim, page, ["http://127.0.0.1:9/next"])
    stored = Page.objects.get(url=url)
    assert (stored.fetched_at, stored.checked_at, stored.data, stored.http) == (
        page.fetched_at, page.fetched_at, page.data, page.http)  # fmt: skip
    assert Page.objects.filter(fetched_at__lte=page.fetched_at).count() == 1
    row = FrontierURL.objects.get(pk=url.pk)
    assert (row.state, row.http_status, row.lease_until) == (URLState.DONE, 200, None)
    assert row.updated_at >= page.fetched_at
    due = FrontierURL.objects.filter(job=job, state=URLState.QUEUED, not_before__lte=row.updated_at)
    assert [(u.url, u.depth, u.attempts) for u in due] == [("http://127.0.0.1:9/next", 1, 0)]

    for run, content_hash, modified in ((2, "0" * 64, 1), (3, "1" * 64, 3)):
        schedule(url)  # the next run fetches it again
        again = transitions.claim(url.pk, job.pk)
        again.run = run
        page = page_for(again)
        page.run, page.first_run, page.modified_run, page.content_hash = run, run, run, content_hash
        transitions.record_page(again, page, [])
        stored = Page.objects.get(url=url)
        assert (stored.run, stored.first_run, stored.modified_run) == (run, 1, modified)


def test_rows_the_database_refuses_raise_and_leave_the_connection_usable(job):
    """``db.insert_rows`` runs plain statements: a refused row raises the ORM's error, and the
    connection takes the next statement (psycopg's pipelined ``executemany`` left it unusable)."""
    from django.db import IntegrityError

    from tasks.frontier.db import insert_rows
    from web.models import Stat

    names = ("job", "url", "name", "kind", "value")
    gone = job.pk + 1000  # a job deleted meanwhile
    with pytest.raises(IntegrityError):
        insert_rows(Stat, names, [(job.pk, None, "ok", "inc", 1), (gone, None, "s", "inc", 1)])
    assert not Stat.objects.exists()  # the statement wrote none of its rows
    assert insert_rows(Stat, names, [(job.pk, None, f"s{i}", "inc", i) for i in range(300)]) == 300
    assert Stat.objects.filter(job=job).count() == 300


def test_a_claim_counts_the_wait_since_its_release(job):
    url = FrontierURL.objects.get(job=job)
    released = timezone.now() - timedelta(seconds=0.3)
    FrontierURL.objects.filter(pk=url.pk).update(state=URLState.SCHEDULED, scheduled_at=released)

    def observed() -> tuple[float, float]:
        samples = {s.name: s.value for s in metrics.DISPATCH_SECONDS.collect()[0].samples}
        name = "crawlplatform_dispatch_seconds"
        return samples[f"{name}_count"], samples[f"{name}_sum"]

    count, total = observed()
    assert transitions.claim(url.pk, job.pk) is not None
    count_after, total_after = observed()
    assert count_after == count + 1
    waited = total_after - total
    assert 0.3 <= waited < 5


def test_claim_on_a_paused_job_puts_the_url_back(job):
    url = FrontierURL.objects.get(job=job)
    schedule(url)
    jobs.pause(job)
    assert transitions.claim(url.pk, job.pk) is None
    assert FrontierURL.objects.get(pk=url.pk).state == URLState.QUEUED


def test_a_swept_lease_cannot_be_committed_by_its_old_worker(job):
    url = FrontierURL.objects.get(job=job)
    schedule(url)
    old = transitions.claim(url.pk, job.pk)
    FrontierURL.objects.filter(pk=url.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert requeue.reclaim_expired() == 1
    schedule(url)
    new = transitions.claim(url.pk, job.pk)
    assert new.attempt == 2
    with pytest.raises(LeaseLost):
        transitions.record_page(old, page_for(old), ["http://127.0.0.1:9/from-old"])
    assert not Page.objects.exists()
    assert not FrontierURL.objects.filter(url__endswith="from-old").exists()  # rolled back
    transitions.record_page(new, page_for(new), [])
    assert Page.objects.count() == 1


def test_an_expired_lease_is_claimed_by_the_redelivered_message(job):
    url = FrontierURL.objects.get(job=job)
    schedule(url)
    transitions.claim(url.pk, job.pk)
    assert transitions.claim(url.pk, job.pk) is None  # lease still valid
    FrontierURL.objects.filter(pk=url.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert transitions.claim(url.pk, job.pk).attempt == 2


def test_transient_failures_retry_with_backoff_then_fail(job, monkeypatch):
    monkeypatch.setenv("CRAWL_RETRY_MAX_ATTEMPTS", "2")
    url = FrontierURL.objects.get(job=job)
    schedule(url)
    claim = transitions.claim(url.pk, job.pk)
    before = timezone.now()
    assert (
        transitions.record_failure(claim, outcomes.ServerError("HTTP 503", status=503)) == "queued"
    )
    row = FrontierURL.objects.get(pk=url.pk)
    assert row.not_before > before and row.error_reason == "http_5xx"
    schedule(url)
    claim = transitions.claim(url.pk, job.pk)
    assert (
        transitions.record_failure(claim, outcomes.ServerError("HTTP 503", status=503)) == "failed"
    )
    row = FrontierURL.objects.get(pk=url.pk)
    assert (row.state, row.attempts, row.http_status) == ("failed", 2, 503)


def test_retry_after_is_honoured(job):
    url = FrontierURL.objects.get(job=job)
    schedule(url)
    claim = transitions.claim(url.pk, job.pk)
    transitions.record_failure(
        claim, outcomes.TooManyRequests("HTTP 429", status=429, retry_after=120)
    )
    row = FrontierURL.objects.get(pk=url.pk)
    assert row.not_before >= timezone.now() + timedelta(seconds=115)


def test_permanent_failures_are_not_retried(job):
    url = FrontierURL.objects.get(job=job)
    schedule(url)
    claim = transitions.claim(url.pk, job.pk)
    assert (
        transitions.record_failure(claim, outcomes.ClientError("HTTP 404", status=404)) == "failed"
    )


def test_backoff_grows_exponentially_with_jitter():
    waits = [transitions.backoff_seconds(n) for n in (1, 2, 3, 4)]
    for n, wait in enumerate(waits, start=1):
        step = 2.0 * 2 ** (n - 1)
        assert step / 2 <= wait <= step


def test_job_transitions_are_compare_and_set(job):
    assert job.state == JobState.RUNNING
    assert jobs.pause(job) and not jobs.pause(job)
    assert jobs.resume(job) and not jobs.resume(job)
    assert jobs.cancel(job) and not jobs.cancel(job)
    assert not jobs.resume(job)
    assert FrontierURL.objects.get(job=job).state == URLState.SKIPPED
    versions = list(job.checkpoints.order_by("version").values_list("version", "reason"))
    assert versions == [(1, "pause"), (2, "cancel")]


def test_bad_seeds_and_unknown_settings_are_refused():
    with pytest.raises(jobs.JobError, match="seeds: 'ftp://example.com/' is not an absolute http"):
        jobs.create_job(["ftp://example.com/"])
    with pytest.raises(jobs.JobError, match="settings: NOPE: no such setting"):
        jobs.create_job(["http://example.com/"], settings={"NOPE": 1})


def redirected_claim(job, target_state: str | None):
    """A claim on /x whose fetch ended at /x/ (in ``target_state``, or not in the frontier)."""
    transitions.insert_urls(job.pk, ["http://127.0.0.1:9/x"], depth=1)
    if target_state is not None:
        transitions.insert_urls(job.pk, ["http://127.0.0.1:9/x/"], depth=1)
        FrontierURL.objects.filter(url="http://127.0.0.1:9/x/").update(state=target_state)
    url = FrontierURL.objects.get(job=job, url="http://127.0.0.1:9/x")
    schedule(url)
    claim = transitions.claim(url.pk, job.pk)
    page = page_for(claim)
    page.final_url = "http://127.0.0.1:9/x/"
    return claim, page


@pytest.mark.parametrize("target_state", [None, URLState.QUEUED])
def test_a_redirect_stores_its_page_once_and_marks_its_target(job, target_state):
    claim, page = redirected_claim(job, target_state)
    assert transitions.record_page(claim, page, [], redirect_target="http://127.0.0.1:9/x/") == (
        "done"
    )
    target = FrontierURL.objects.get(job=job, url="http://127.0.0.1:9/x/")
    assert (target.state, target.error_reason) == ("skipped", "fetched_via_redirect")
    assert Page.objects.filter(job=job).count() == 1


@pytest.mark.parametrize("target_state", [URLState.SCHEDULED, URLState.LEASED, URLState.DONE])
def test_a_redirect_to_a_url_fetched_as_itself_stores_nothing(job, target_state):
    claim, page = redirected_claim(job, target_state)
    state = transitions.record_page(claim, page, [], redirect_target="http://127.0.0.1:9/x/")
    row = FrontierURL.objects.get(pk=claim.url.pk)
    assert (state, row.state, row.error_reason) == ("skipped", "skipped", "duplicate_redirect")
    assert not Page.objects.filter(job=job).exists()
    assert FrontierURL.objects.get(url="http://127.0.0.1:9/x/").state == target_state


@pytest.mark.parametrize("request_of_its_own", [False, True])
def test_a_redirect_target_queued_while_the_redirect_looks_is_taken_or_left_once(
    job, monkeypatch, request_of_its_own
):
    """Another worker's page inserts the target (queued) between this commit's update and
    its read: a plain target is taken (not left to be fetched again), one with a request of
    its own (another callback) is left, and this URL stores nothing."""
    claim, page = redirected_claim(job, None)
    looks = transitions._target_row

    def inserted_meanwhile(rows):
        if not FrontierURL.objects.filter(url="http://127.0.0.1:9/x/").exists():
            transitions.insert_urls(job.pk, ["http://127.0.0.1:9/x/"], depth=1)
            if request_of_its_own:
                FrontierURL.objects.filter(url="http://127.0.0.1:9/x/").update(
                    request={"callback": "parse_item"})
        return looks(rows)

    monkeypatch.setattr(transitions, "_target_row", inserted_meanwhile)
    state = transitions.record_page(claim, page, [], redirect_target="http://127.0.0.1:9/x/")
    target = FrontierURL.objects.get(job=job, url="http://127.0.0.1:9/x/")
    if request_of_its_own:
        assert (state, target.state, Page.objects.filter(job=job).count()) == (
            "skipped", "queued", 0)  # fmt: skip
    else:
        assert (state, target.state, target.error_reason) == (
            "done", "skipped", "fetched_via_redirect")  # fmt: skip


def test_a_swept_lease_on_the_last_attempt_fails_the_url(job, monkeypatch):
    monkeypatch.setenv("CRAWL_RETRY_MAX_ATTEMPTS", "2")
    url = FrontierURL.objects.get(job=job)
    expired = timezone.now() - timedelta(seconds=1)
    FrontierURL.objects.filter(pk=url.pk).update(
        state=URLState.LEASED, attempts=1, lease_until=expired
    )
    assert requeue.reclaim_expired() == 1
    assert FrontierURL.objects.get(pk=url.pk).state == URLState.QUEUED  # one attempt left
    FrontierURL.objects.filter(pk=url.pk).update(
        state=URLState.LEASED, attempts=2, lease_until=expired
    )
    assert requeue.reclaim_expired() == 1
    row = FrontierURL.objects.get(pk=url.pk)
    assert (row.state, row.error_reason) == ("failed", "attempts_exhausted")


def test_a_swept_lease_of_a_cancelled_job_ends_skipped(job):
    url = FrontierURL.objects.get(job=job)
    schedule(url)
    transitions.claim(url.pk, job.pk)  # its worker then dies mid-page, during the cancel
    assert jobs.cancel(job)
    assert FrontierURL.objects.get(pk=url.pk).state == URLState.LEASED  # in flight: kept
    FrontierURL.objects.filter(pk=url.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert requeue.reclaim_expired() == 1
    row = FrontierURL.objects.get(pk=url.pk)
    assert (row.state, row.error_reason) == (URLState.SKIPPED, "cancelled")  # not queued forever


def test_urls_given_back_while_a_cancel_commits_end_skipped(job, monkeypatch):
    url = FrontierURL.objects.get(job=job)
    schedule(url)
    claim = transitions.claim(url.pk, job.pk)
    skipped_the_rest, commit = threading.Event(), threading.Event()

    def announce(job) -> None:  # inside the cancel's transaction, after it skipped its URLs
        skipped_the_rest.set()
        commit.wait(10)

    def cancel() -> None:
        try:
            jobs.cancel(CrawlJob.objects.get(pk=job.pk))
        finally:
            connection.close()

    monkeypatch.setattr(jobs.webhooks, "announce", announce)
    cancelling = threading.Thread(target=cancel)
    cancelling.start()
    assert skipped_the_rest.wait(10)  # the cancel saw this URL leased and left it alone
    threading.Timer(0.3, commit.set).start()  # and commits while the give-back reads the job
    requeue.give_back([claim])
    cancelling.join(10)
    row = FrontierURL.objects.get(pk=url.pk)
    assert (row.state, row.error_reason) == (URLState.SKIPPED, "cancelled")  # not left queued


def _waits_on_a_row() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database() AND query LIKE '%web_frontierurl%'"
        )
        return cursor.fetchone()[0] > 0


def test_an_open_circuit_fails_a_hosts_queued_urls_but_leaves_those_with_an_errback(job):
    """The release fails the queued URLs of a host whose circuit is open, at once; a spider's
    request with an errback is released instead: its worker's gate fails it and calls the
    errback, as Scrapy calls one for every request."""
    from tasks.frontier import release

    asked = {"plain": None, "no errback": {"url": "http://dead.test/b", "errback": None},
             "errback": {"url": "http://dead.test/c", "errback": "failed"}}  # fmt: skip
    rows = {name: FrontierURL.objects.create(job=job, url=f"http://dead.test/{name}",
                                             host="dead.test", depth=1, request=request)
            for name, request in asked.items()}  # fmt: skip
    by_host = {"dead.test": [release.Candidate(row.pk, 1, "dead.test", False, row.url, "")
                             for row in rows.values()]}  # fmt: skip
    job.spider = "counting"
    release._fail_open_hosts(job, by_host, {"dead.test": "connection refused"})
    states = {name: FrontierURL.objects.get(pk=row.pk).state for name, row in rows.items()}
    assert states == {"plain": URLState.FAILED, "no errback": URLState.FAILED,
                      "errback": URLState.QUEUED}  # fmt: skip
    assert [row.id for row in by_host["dead.test"]] == [rows["errback"].pk]  # released


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's row locks")
def test_a_cancel_that_deadlocks_with_a_claim_is_run_again(job):
    """A claim locks its message's rows in an order of its own (the plan's), the cancel's skip
    in another: each can hold a row the other waits for, and the database aborts one. An
    aborted cancel is run again and ends the job; the claim's URLs stay in flight."""
    transitions.insert_urls(job.pk, ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"], depth=1)
    seed, middle, last = FrontierURL.objects.filter(job=job).order_by("depth", "id")
    ended: list[bool] = []

    def cancel() -> None:
        try:
            ended.append(jobs.cancel(CrawlJob.objects.get(pk=job.pk)))
        finally:
            connection.close()

    cancelling = threading.Thread(target=cancel)
    with psycopg.connect(database_url()) as claim:  # a claim's transaction, taking two rows
        leased = "UPDATE web_frontierurl SET state = 'leased' WHERE id = %s"
        claim.execute(leased, [last.pk])
        cancelling.start()  # skips the seed and the middle row, then waits for the last one
        wait_for(_waits_on_a_row, 10, "the cancel to wait on the claim's row")
        claim.execute(leased, [seed.pk])  # waits on the cancel: a deadlock, the cancel aborted
    cancelling.join(30)
    assert ended == [True]
    states = dict(FrontierURL.objects.filter(job=job).values_list("id", "state"))
    assert states == {seed.pk: URLState.LEASED, middle.pk: URLState.SKIPPED,
                      last.pk: URLState.LEASED}  # fmt: skip
    assert CrawlJob.objects.get(pk=job.pk).state == JobState.CANCELLED


def test_a_timeout_ends_the_url_from_the_timeout_attempt_on(job):
    url = FrontierURL.objects.get(job=job)
    for expected in ("queued", "failed"):  # RETRY_TIMEOUT_ATTEMPTS = 2 of 4 attempts
        schedule(url)
        claim = transitions.claim(url.pk, job.pk)
        timeout = outcomes.ReadTimeout("read timed out")
        assert transitions.record_failure(claim, timeout) == expected


def test_a_deferral_gives_the_attempt_back(job):
    url = FrontierURL.objects.get(job=job)
    schedule(url)
    claim = transitions.claim(url.pk, job.pk)
    transitions.defer(claim, 5, "throttled")
    row = FrontierURL.objects.get(pk=url.pk)
    assert (row.state, row.attempts, row.error_reason) == ("queued", 0, "throttled")
    assert row.not_before > timezone.now() + timedelta(seconds=4)


@contextmanager
def explained(plans: list[dict]):
    """Each UPDATE or WITH statement run inside is first run under EXPLAIN ANALYZE and rolled
    back; its plan goes to ``plans``."""

    def explain(execute, sql, params, many, context):
        if sql.lstrip().startswith(("UPDATE", "WITH")):
            raw = context["cursor"].cursor
            inside = context["connection"].in_atomic_block
            raw.execute("SAVEPOINT explained" if inside else "BEGIN")
            raw.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            plans.append(raw.fetchone()[0][0]["Plan"])
            raw.execute("ROLLBACK TO SAVEPOINT explained" if inside else "ROLLBACK")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(explain):
        yield


def frontier_rows_read(plan: dict) -> int:
    """Rows the plan's scans of the frontier table read, kept or filtered out, all loops."""
    table = FrontierURL._meta.db_table
    indexes = {table + "_pkey", *(i.name for i in FrontierURL._meta.indexes)}
    indexes |= {c.name for c in FrontierURL._meta.constraints}
    read = 0
    if plan["Node Type"] in ("Seq Scan", "Index Scan", "Index Only Scan"):
        if plan["Relation Name"] == table:
            read = plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)
    elif plan["Node Type"] == "Bitmap Index Scan" and plan["Index Name"] in indexes:
        read = plan["Actual Rows"]  # what its Bitmap Heap Scan then reads
    read *= plan["Actual Loops"]
    return read + sum(frontier_rows_read(p) for p in plan.get("Plans", []))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner")
def test_the_moves_of_a_page_read_their_own_rows_however_big_the_job(job):
    """With statistics from when the job was one URL (a new or growing job), the release, the
    claim, the page's statement and a deferral find their rows by key: none reads the job's
    other URLs, or all its queued or leased ones, a cost that would grow with the crawl."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE " + FrontierURL._meta.db_table)
    known = [f"http://127.0.0.1:9/known/{i}" for i in range(3000)]
    transitions.insert_urls(job.pk, known, depth=1)
    ids = list(FrontierURL.objects.filter(job=job).values_list("pk", flat=True)[:5])
    links = [*known[:20], *(f"http://127.0.0.1:9/new/{i}" for i in range(20))]
    plans = []
    with explained(plans):
        transitions.schedule(ids)
        claims = transitions.claim_many(ids, job.pk)
        transitions.record_page(claims[0], page_for(claims[0]), sorted(links))
        transitions.defer(claims[1], 5, "throttled")
    assert len(claims) == 5 and len(plans) == 4
    read = [frontier_rows_read(p) for p in plans]
    # an updated row's old and new index entries may both be read: at most twice the rows
    assert all(r <= most for r, most in zip(read, [10, 10, 2 * (1 + len(links)), 2], strict=True))
    assert FrontierURL.objects.filter(job=job).count() == 3021


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's planner")
def test_on_sqlite_the_schedulers_reads_take_the_partial_indexes(job):
    """SQLite uses a partial index only for a query that repeats its predicate, literally:
    without it, a release sorted every queued row of the job on each pass (0.15 s a query at
    100,000 hosts), and the counts of its scheduled and leased URLs and its next due time read
    every URL of the job (0.1 s). The plans are of the statements as run, their parameters
    bound (the text Django logs has them written in, which the planner reads otherwise)."""
    from tasks.frontier.pacing import Pacing
    from tasks.frontier.release import _candidates

    ran: list[tuple[str, tuple]] = []

    def record(execute, sql, params, many, context):
        ran.append((sql, tuple(params or ())))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        assert [c.url for c in _candidates(job, 10, ["127.0.0.2:9"])] == ["http://127.0.0.1:9/"]
        assert transitions.count_outstanding(job.pk) == (0, 0)
        assert Pacing().next_due(job) is None
    plans = []
    with connection.cursor() as cursor:
        for sql, params in ran:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            plans.append(" ".join(row[-1] for row in cursor.fetchall()))
    assert len(plans) == 3, plans
    assert "USING INDEX frontier_pending_rank" in plans[0] and "TEMP B-TREE" not in plans[0]
    for plan in plans[1:]:
        assert "frontier_pending_rank" in plan or "frontier_scheduled" in plan, plan
        assert "SCAN web_frontierurl" not in plan, plan  # each count by an index


def frontier_entries_read() -> int:
    """Rows and index entries of the frontier table this database has read so far (the
    session's own counts flushed first)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute(
            "SELECT coalesce(sum(idx_tup_read), 0) + (SELECT seq_tup_read FROM"
            " pg_stat_user_tables WHERE relid = %s::regclass)"
            " FROM pg_stat_user_indexes WHERE relid = %s::regclass",
            [FrontierURL._meta.db_table] * 2,
        )
        return cursor.fetchone()[0]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's prepared statements")
@pytest.mark.parametrize("prepare", [True, False])
def test_claims_and_pages_are_prepared_and_read_their_own_rows_on_a_generic_plan(
    job, prepare, monkeypatch
):
    """The release's move, the scheduler's count, the claim and the page's statement are
    prepared once per connection (``DB_PREPARE``), and PostgreSQL may then run them on a
    generic plan, made without the parameters' values: that plan must find its rows by key
    too (the counts: through the job's index of pending URLs)."""
    monkeypatch.setenv("CRAWL_DB_PREPARE", str(prepare))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE " + FrontierURL._meta.db_table)
        cursor.execute("DEALLOCATE ALL")
        cursor.execute("SET plan_cache_mode = force_generic_plan")
    known = [f"http://127.0.0.1:9/known/{i}" for i in range(3000)]
    transitions.insert_urls(job.pk, known, depth=1)
    ids = list(FrontierURL.objects.filter(job=job).values_list("pk", flat=True)[:5])
    links = [*known[:20], *(f"http://127.0.0.1:9/new/{i}" for i in range(20))]
    transitions.schedule(ids)
    before = frontier_entries_read()
    try:
        assert transitions.count_outstanding(job.pk) == (5, 0)
        claims = transitions.claim_many(ids, job.pk)
        transitions.record_page(claims[0], page_for(claims[0]), sorted(links))
        read = frontier_entries_read() - before
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_prepared_statements")
            prepared = cursor.fetchone()[0]
    finally:
        connection.close()  # its plan mode and statements are this test's
    assert len(claims) == 5 and prepared == (4 if prepare else 0)
    assert transitions.count_outstanding(job.pk) == (0, 4)  # claimed, one of them done since
    # the counted and claimed rows and each link's probe, old and new index entries, and the
    # query of the counts (about a hundred), with room for what another backend of the test
    # database reads meanwhile; a plan that scans the job's rows reads thousands
    assert read <= 5 + 2 * 5 + 2 * (1 + len(links)) + 100 < len(known) // 10, read


@pytest.mark.skipif(
    connection.vendor != "postgresql" or bool(connection.settings_dict["OPTIONS"].get("pool")),
    reason="PostgreSQL's prepared statements, a connection of the test's own",
)
def test_messages_of_every_length_share_a_few_prepared_claims(job, monkeypatch):
    """A claim's ids are padded to a power of two: messages of 1 to 16 URLs prepare five
    statements, not sixteen, and a padded claim takes each URL once, in the message's order."""
    monkeypatch.setenv("CRAWL_DB_PREPARE", "True")
    connection.close()
    transitions.insert_urls(job.pk, [f"http://127.0.0.1:9/p/{i}" for i in range(136)], depth=1)
    ours = FrontierURL.objects.filter(job=job, url__contains="/p/")
    ids = list(ours.order_by("-pk").values_list("pk", flat=True))
    transitions.schedule(ids)
    try:
        for n in range(1, 17):
            taken, ids = ids[:n], ids[n:]
            claims = transitions.claim_many(taken, job.pk)
            assert [c.url.pk for c in claims] == taken
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement"
                           " LIKE '%%attempts = attempts + 1%%'")  # fmt: skip
            assert cursor.fetchone()[0] == 5
    finally:
        connection.close()  # its prepared statements are this test's
    assert set(ours.values_list("state", "attempts")) == {(URLState.LEASED, 1)}


@pytest.mark.skipif(
    connection.vendor != "postgresql" or bool(connection.settings_dict["OPTIONS"].get("pool")),
    reason="PostgreSQL's plan cache, a connection of the test's own",
)
@pytest.mark.parametrize("prepare", [True, False])
def test_prepared_statements_take_the_generic_plan_and_the_orm_is_left_alone(
    job, prepare, monkeypatch
):
    """With ``DB_PREPARE``, the connection plans the statements it prepares once (the generic
    plan), not at each of their first runs; without it (behind a pooler that shares sessions)
    it sets nothing; a connection opened in a transaction sets it at its next statement out
    of one."""
    monkeypatch.setenv("CRAWL_DB_PREPARE", str(prepare))
    connection.close()

    def mode() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW plan_cache_mode")
            return cursor.fetchone()[0]

    from django.db import transaction

    with transaction.atomic():
        transitions.count_outstanding(job.pk)
        assert mode() == "auto"  # not inside a transaction: it would end with it
    transitions.count_outstanding(job.pk)
    assert mode() == ("force_generic_plan" if prepare else "auto")
    connection.close()  # a new connection sets it again
    transitions.count_outstanding(job.pk)
    assert mode() == ("force_generic_plan" if prepare else "auto")


def test_a_spider_page_commits_its_items_and_requests_and_a_recrawl_replaces_its_items(job):
    """The spider's commit (one statement on PostgreSQL, the ORM elsewhere): items in order
    with their drops, requests with their stored form (none for a plain GET) and priority,
    forbidden ones skipped; a later run's page replaces the items, and a lost lease writes
    nothing."""
    from tasks.frontier.yields import NewItem, NewRequest, record_spider_page

    url = FrontierURL.objects.get(job=job)
    schedule(url)
    first = transitions.claim(url.pk, job.pk)
    post = {"method": "POST", "body": "eA==", "callback": "parse_post", "meta": {"k": [1, "\n"]}}
    forbidden = transitions.ROBOTS_FORBIDDEN
    requests = [NewRequest("http://127.0.0.1:9/p#POST:11", post, None, 7),
                NewRequest("http://127.0.0.1:9/a", None, None, -2),
                NewRequest("http://127.0.0.1:9/private", None, forbidden)]  # fmt: skip
    items = [NewItem({"n": 1, "s": "é\n"}, ""), NewItem({"n": 2}, "schema: 'n' is too small")]
    assert record_spider_page(first, page_for(first), requests, items, "shop") == URLState.DONE
    assert first.new_links
    kept = Item.objects.filter(url=url).order_by("pk")
    assert [(i.data, i.dropped, i.run, i.spider) for i in kept] == [
        ({"n": 1, "s": "é\n"}, "", 1, "shop"),
        ({"n": 2}, "schema: 'n' is too small", 1, "shop"),
    ]
    rows = {r.url: r for r in FrontierURL.objects.filter(job=job, depth=1)}
    assert rows["http://127.0.0.1:9/p#POST:11"].request == post
    assert rows["http://127.0.0.1:9/a"].request is None
    assert rows["http://127.0.0.1:9/a"].state == URLState.QUEUED
    assert rows["http://127.0.0.1:9/private"].state == URLState.SKIPPED
    assert rows["http://127.0.0.1:9/private"].error_reason == "robots"
    assert [rows[k].priority for k in sorted(rows)] == [-2, 7, 0]  # a plain GET's kept too

    schedule(url)  # the next run fetches it again
    again = transitions.claim(url.pk, job.pk)
    again.run = 2
    assert record_spider_page(again, page_for(again), requests[1:2], [NewItem({"n": 3}, "")],
                              "shop") == URLState.DONE  # fmt: skip
    assert [(i.data, i.run) for i in Item.objects.filter(url=url)] == [({"n": 3}, 2)]
    assert Page.objects.filter(url=url).count() == 1
    with pytest.raises(LeaseLost):
        record_spider_page(first, page_for(first), [], [NewItem({"n": 4}, "")], "shop")
    assert [i.data for i in Item.objects.filter(url=url)] == [{"n": 3}]
