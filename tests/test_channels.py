"""Release channels with real worker processes: a crawl starts on ``blue``, a ``green``
canary takes 10% of the hosts, is promoted mid-crawl, ``blue`` drains and stops; every page is
stored exactly once and carries the channel and version of the worker that fetched it. A
broken canary (every fetch it makes fails) is rolled back by the canary analysis and the crawl
still ends with every page once."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from tasks import broker, dispatch
from tasks.frontier import channels, jobs
from tasks.worker.supervisor import WorkerPool
from tests.conftest import wait_for
from tests.site import Site, send
from web.models import ChannelEvent, CrawlJob, FrontierURL, JobState, Page, URLState

pytestmark = pytest.mark.django_db(transaction=True)


class PickySite(Site):
    """A site that answers 503 to the broken canary's user agent (those requests are counted
    apart: ``hits`` are the pages it served)."""

    def __init__(self, pages: int, delay: float) -> None:
        self.refused = 0
        super().__init__(pages=pages, delay=delay)

    def _handler(self):
        site, base = self, super()._handler()

        class Handler(base):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if "broken" in self.headers.get("User-Agent", ""):
                    with site._lock:
                        site.refused += 1
                    send(self, 503, {"Content-Type": "text/plain"}, b"busy")
                    return
                super().do_GET()

        return Handler


def _sites(stack: ExitStack, green_share: int, each: int) -> tuple[list[Site], list[Site]]:
    """Local sites (one host each) until ``each`` fall in the canary's buckets and ``each``
    outside them ("blue" < "green": green owns the last ``green_share`` buckets)."""
    blue, green = [], []
    while len(blue) < each or len(green) < each:
        site = stack.enter_context(PickySite(pages=30, delay=0.01))
        host = site.base.removeprefix("http://")
        side = green if channels.bucket(host) >= 100 - green_share else blue
        if len(side) < each:
            side.append(site)
    return blue, green


def _pool(worker_env: dict, tmp_path, channel: str, version: str, **extra: str) -> WorkerPool:
    env = {**worker_env, "CRAWL_CHANNEL": channel, "CRAWL_VERSION": version, **extra}
    pool = WorkerPool(1, 4, env=env, log_dir=tmp_path / channel, prefix=channel)
    pool.start()
    return pool


def _online(*names: str) -> None:
    """Wait for every channel's worker to be online: until then its hosts' URLs go to a
    channel that has one (``channels.route``), and a short crawl may end before it starts.
    The last read is the one the scheduler's routing keeps (``CHANNEL_SERVED_CACHE_S``), so
    it must name them all: a read that found only green would send blue's hosts to green."""
    wait_for(lambda: set(names) <= channels.served(cached=False), 60,
             f"the workers of {', '.join(names)} online")  # fmt: skip


def _assert_every_page_once(job: CrawlJob, sites: list[Site]) -> None:
    done = set(
        FrontierURL.objects.filter(job=job, state=URLState.DONE).values_list("url", flat=True)
    )
    expected = set().union(*(s.expected_done() for s in sites))
    assert done == expected
    stored = list(Page.objects.filter(job=job).values_list("url__url", flat=True))
    assert len(stored) == len(set(stored)) == len(expected)
    for site in sites:
        for url in site.expected_done():
            assert site.hits[url] == 1, url  # fetched once, whichever channel did


def test_a_canary_takes_its_share_is_promoted_and_the_old_channel_drains(
    worker_env, scheduler, tmp_path
):
    channels.set_weights({"blue": 100}, "test")
    with ExitStack() as stack:
        blue_sites, green_sites = _sites(stack, green_share=10, each=3)
        sites = blue_sites + green_sites
        blue = _pool(worker_env, tmp_path, "blue", "1.0.0")
        green = _pool(worker_env, tmp_path, "green", "1.1.0")
        stack.callback(blue.stop, grace=15)  # stopped below; here too if the test fails first
        stack.callback(green.stop, grace=15)
        _online("blue", "green")
        job = jobs.create_job([s.url("/p/0") for s in sites], delay=0.05, max_depth=50)
        jobs.start(job)
        wait_for(lambda: Page.objects.filter(job=job).count() >= 20, 60, "blue to crawl")
        assert set(Page.objects.filter(job=job).values_list("channel", flat=True)) == {"blue"}

        channels.set_weights({"blue": 90, "green": 10}, "test")
        wait_for(lambda: Page.objects.filter(job=job, channel="green").exists(), 60,
                 "the canary's first page")  # fmt: skip
        green_hosts = {s.base.removeprefix("http://") for s in green_sites}
        canary_pages = Page.objects.filter(job=job, channel="green")
        assert {p.url.host for p in canary_pages.select_related("url")} <= green_hosts

        channels.promote("green", "test")
        job.refresh_from_db()
        assert job.state == JobState.RUNNING  # promoted mid-crawl
        blue_queue = channels.queue("blue")
        wait_for(lambda: broker.depth(blue_queue)["ready"] == 0, 60, "blue to drain")
        blue.stop(grace=15)  # warm: its in-flight pages finish
        wait_for(lambda: CrawlJob.objects.get(pk=job.pk).state == JobState.FINISHED, 120,
                 "the crawl to finish on green")  # fmt: skip
        _assert_every_page_once(job, sites)
    versions = dict(Page.objects.filter(job=job).values_list("channel", "worker_version"))
    assert versions == {"blue": "1.0.0", "green": "1.1.0"}
    late = Page.objects.filter(job=job).order_by("-fetched_at")[:10]
    assert {p.channel for p in late} == {"green"}  # after the promotion, green took it all


def test_a_broken_canary_is_rolled_back_and_the_crawl_still_gets_every_page_once(
    worker_env, scheduler, tmp_path, monkeypatch
):
    slow_retries = {"CRAWL_RETRY_BACKOFF_BASE_S": "1", "CRAWL_RETRY_MAX_ATTEMPTS": "6"}
    for name, value in {**slow_retries, "CRAWL_CANARY_MIN_SAMPLES": "5"}.items():
        monkeypatch.setenv(name, value)  # the scheduler thread judges and sweeps here
    worker_env.update(slow_retries)
    channels.set_weights({"blue": 90, "green": 10}, "test")
    with ExitStack() as stack:
        blue_sites, green_sites = _sites(stack, green_share=10, each=3)
        sites = blue_sites + green_sites
        blue = _pool(worker_env, tmp_path, "blue", "1.0.0")
        green = _pool(worker_env, tmp_path, "green", "1.1.0", CRAWL_USER_AGENT="broken/1.1")
        stack.callback(blue.stop, grace=15)
        stack.callback(green.stop, grace=15)
        _online("blue", "green")
        job = jobs.create_job([s.url("/p/0") for s in sites], delay=0.05, max_depth=50)
        jobs.start(job)
        wait_for(lambda: ChannelEvent.objects.filter(channel="green", kind="rolled_back").exists(),
                 60, "the canary analysis to roll green back")  # fmt: skip
        assert channels.weights(cached=False) == {"blue": 100}
        assert sum(s.refused for s in green_sites) > 0  # green did try, and failed
        wait_for(lambda: CrawlJob.objects.get(pk=job.pk).state == JobState.FINISHED, 120,
                 "the crawl to finish on blue")  # fmt: skip
        _assert_every_page_once(job, sites)
    event = ChannelEvent.objects.get(channel="green", kind="rolled_back")
    assert "failed share" in event.detail
    assert set(Page.objects.filter(job=job).values_list("channel", flat=True)) == {"blue"}


def test_routing_weights_rollback_moves_queued_urls_and_the_command(redis, capsys):
    from django.core.management import CommandError, call_command

    from tasks.frontier import transitions

    channels.set_weights({"blue": 70, "green": 30}, "test")
    hosts = [f"h{i}.example:80" for i in range(400)]
    routed = [channels.route("", h, channels.weights()) for h in hosts]
    assert 0.2 < routed.count("crawl.green") / len(hosts) < 0.4
    assert routed == [channels.route("", h, channels.weights()) for h in hosts]  # sticky
    assert channels.route("canary", hosts[0], channels.weights()) == "crawl.canary"  # pinned
    channels.set_weights({"blue": 60, "green": 40}, "test")  # green only gains hosts
    assert all(channels.route("", h, channels.weights()) == "crawl.green"
               for h, q in zip(hosts, routed, strict=True) if q == "crawl.green")  # fmt: skip

    job = jobs.create_job(["http://127.0.0.1:9/"], name="routed")
    jobs.start(job)
    transitions.insert_urls(job.pk, [f"http://127.0.0.1:9/{i}" for i in range(5)], depth=1)
    ids = list(FrontierURL.objects.filter(job=job).values_list("id", flat=True))
    transitions.schedule(ids)
    dispatch.publish([dispatch.Message(ids[:1], job.pk, 0, "crawl.green"),
                      dispatch.Message(ids[1:], job.pk, 0, "crawl.green")])
    assert broker.depth("crawl.green")["ready"] == 2  # one message of one URL, one of four
    split, moved = channels.rollback("green", "test")
    assert (split, moved) == ({"blue": 100}, len(ids))
    assert broker.depth("crawl.green")["ready"] == 0
    assert set(FrontierURL.objects.filter(job=job).values_list("state", flat=True)) == {"queued"}

    with pytest.raises(CommandError, match="not a channel name"):
        call_command("channel", "weights", "grün=100")  # it would name a queue
    assert "not a channel name" in CrawlJob(channel="grün").problems(seeds=False)["channel"][0]
    with pytest.raises(CommandError, match="add up to 90"):
        call_command("channel", "weights", "blue=60", "green=30")
    call_command("channel", "weights", "blue=95", "green=5")
    out = capsys.readouterr().out
    assert "blue" in out and "95%" in out and "green" in out and "5%" in out
    call_command("channel", "canary", "canary")
    assert channels.weights(cached=False)["canary"] == 5
    call_command("channel", "events")
    assert "canary started" in capsys.readouterr().out
