"""Crawls finish on messy sites, with the platform's default retry schedule and real workers.

* One host serving ordinary pages mixed with flaky 503s, 429s with Retry-After, 500s, a
  hanging page, a slow page, bad links and a bad redirect, plus links to a refused port and to
  a name that does not resolve (through ``RESOLVE``: no test asks a real resolver). The crawl
  must end in about the time its politeness and retry schedule need: the bound is computed
  from the settings below and asserted with a wide margin.
* A site whose only unfinished URLs are on dead hosts (refused, unresolvable, silent) must
  finish within 60 s: the circuit breaker and the timeout cap end them.

Budgets are the defaults of ``tasks/defaults.py`` (not the test suite's fast ones), except a
shorter read timeout so that the hanging page costs seconds, not minutes.
"""

from __future__ import annotations

import socket

import pytest

from tasks.defaults import setting
from tests.conftest import crawl_to_end
from tests.messy import MessySite
from web.models import CrawlJob, FrontierURL

pytestmark = pytest.mark.django_db(transaction=True)

READ_TIMEOUT_S = 4.0
DEAD_NAME = "nowhere.example.test"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def crawl(seed: str, tmp_path, env: dict[str, str], timeout: float, **fields):
    """Two worker processes x 4; the clock starts once they are up (start-up is not crawling)."""
    return crawl_to_end(seed, tmp_path, env, timeout=timeout, warm_up=3, **fields)


def rows(job: CrawlJob) -> dict[str, FrontierURL]:
    return {u.url: u for u in FrontierURL.objects.filter(job=job)}


def test_a_messy_site_finishes_in_the_time_its_retry_schedule_needs(redis, tmp_path):
    refused = closed_port()
    delay = 0.02
    with MessySite(pages=120) as site:
        site.extra_links = [f"http://127.0.0.1:{refused}/a", f"http://127.0.0.1:{refused}/b",
                            f"http://{DEAD_NAME}/c"]  # fmt: skip
        job, elapsed = crawl(
            site.url("/"), tmp_path, {"CRAWL_RESOLVE": f"{DEAD_NAME}="}, timeout=180,
            delay=delay, max_depth=20, allowed_domains=["127.0.0.1", DEAD_NAME],
            settings={"FETCH_READ_TIMEOUT_S": READ_TIMEOUT_S},
        )  # fmt: skip
        by_url = rows(job)
    # The longest chain: the hanging page, two read timeouts (RETRY_TIMEOUT_ATTEMPTS) and one
    # backoff; a dead host's four attempts wait 2 + 4 + 8 s at most; every page is spaced by
    # the delay; three Retry-After holds of 2 s; the slow page's 3 s.
    base = setting("RETRY_BACKOFF_BASE_S")
    chains = [2 * READ_TIMEOUT_S + base, base * (1 + 2 + 4), 3 * 2.0 + base]
    bound = max(chains) + len(by_url) * delay + 3.0
    print(f"\nmessy site: {len(by_url)} URLs finished in {elapsed:.1f} s (bound {bound:.1f} s)")
    assert elapsed <= 2 * bound, (elapsed, bound)
    done = {u for u, r in by_url.items() if r.state == "done"}
    assert done == site.expected_done()
    assert len(site.requests["/p/5"]) == 1  # ordinary pages fetched once
    failed = {
        u: (r.error_reason, r.error_message) for u, r in by_url.items() if r.state == "failed"
    }
    assert failed[site.url("/hang")][0] == "read_timeout"
    assert len(site.requests["/hang"]) == 2
    assert failed[site.url("/broken/0")][0] == "http_5xx"
    assert failed[site.url("/bad-redirect")][0] == "invalid_url"
    for url in (f"http://127.0.0.1:{refused}/a", f"http://127.0.0.1:{refused}/b"):
        reason, message = failed[url]
        assert reason in ("connect_error", "host_unreachable") and "refused" in message
    reason, message = failed[f"http://{DEAD_NAME}/c"]
    assert reason in ("dns", "host_unreachable") and "resolve" in message
    assert not [u for u in by_url if "[x" in u or "aaaa" in u]  # dropped, never queued


def test_a_site_whose_last_urls_are_on_dead_hosts_finishes_within_a_minute(redis, tmp_path):
    silent = socket.socket()  # accepts nothing: connections time out
    silent.bind(("127.0.0.1", 0))
    silent.listen(0)
    silent_port = silent.getsockname()[1]
    held = [socket.socket() for _ in range(3)]
    for s in held:
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", silent_port))
    refused_a, refused_b = closed_port(), closed_port()
    dead = [f"http://127.0.0.1:{refused_a}/{i}" for i in range(3)]
    dead += [f"http://127.0.0.1:{refused_b}/{i}" for i in range(3)]
    dead += [f"http://{DEAD_NAME}/{i}" for i in range(3)]
    dead += [f"http://127.0.0.1:{silent_port}/{i}" for i in range(2)]
    try:
        with MessySite(pages=20) as site:
            site.with_trouble = False
            site.extra_links = dead
            job, elapsed = crawl(
                site.url("/"), tmp_path, {"CRAWL_RESOLVE": f"{DEAD_NAME}="}, timeout=120,
                max_depth=20, allowed_domains=["127.0.0.1", DEAD_NAME],
            )  # fmt: skip
    finally:
        for s in [*held, silent]:
            s.close()
    by_url = rows(job)
    print(f"\ndead hosts: finished in {elapsed:.1f} s")
    assert elapsed <= 60
    for url in dead:
        row = by_url[url]
        assert row.state == "failed" and row.error_message, (url, row.error_reason)
        assert row.error_reason in ("host_unreachable", "connect_error", "dns", "connect_timeout")
