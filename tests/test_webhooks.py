"""Completion webhooks: a local receiver gets a signed JSON summary when a job finishes (again
after it answered 500), is cancelled or fails; the address guard applies to the call."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler

import pytest
from django.utils import timezone

from tasks import broker, defaults
from tasks.frontier import jobs, webhooks
from tests.conftest import wait_for
from tests.site import LocalSite, Site, send
from web.models import CrawlJob


class Receiver(LocalSite):
    """Records every call; answers with ``statuses`` in turn (then 200)."""

    def __init__(self, *statuses: int) -> None:
        self.calls: list[tuple[dict[str, str], bytes]] = []
        self.statuses = list(statuses)
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    receiver.calls.append((dict(self.headers), body))
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                send(self, status, {"Content-Type": "text/plain"}, b"ok")

            def log_message(self, *args) -> None:
                pass

        super().__init__(Handler)


def _cancelled_job(webhook_url: str) -> CrawlJob:
    """A job that was started and cancelled: its webhook is due."""
    job = jobs.create_job(["http://127.0.0.1:9/"], webhook_url=webhook_url)
    jobs.start(job)
    jobs.cancel(job)
    return job


def _verified(headers: dict[str, str], body: bytes, secret: str) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["X-Crawl-Signature"], expected)


def test_a_finished_crawl_calls_its_webhook_signed_and_again_after_a_500(
    worker_env, workers, scheduler
):
    worker_env["CRAWL_WEBHOOK_RETRY_S"] = "0.5"
    workers(processes=1, concurrency=4)
    with Receiver(500) as receiver, Site(pages=20) as site:
        job = jobs.create_job([site.url("/p/0")], webhook_url=receiver.url("/hook"))
        assert len(job.webhook_secret) == 64  # made when the URL was set
        jobs.start(job)
        wait_for(lambda: len(receiver.calls) >= 2, 90, "the webhook's second call")
    job.refresh_from_db()
    (first_headers, first), (headers, body) = receiver.calls
    assert first == body and first_headers["X-Crawl-Delivery"] == headers["X-Crawl-Delivery"]
    assert _verified(headers, body, job.webhook_secret)
    assert not _verified(headers, body, "another secret")
    summary = json.loads(body)
    assert summary["event"] == "finished" and headers["X-Crawl-Event"] == "finished"
    assert summary["job"]["id"] == job.pk and summary["stats"]["pages"] == job.pages.count() > 0
    wait_for(
        lambda: CrawlJob.objects.get(pk=job.pk).webhook_status.startswith("delivered: HTTP 200"),
        10, "the delivery to be recorded",
    )  # fmt: skip
    assert "attempt 2" in CrawlJob.objects.get(pk=job.pk).webhook_status


@pytest.mark.django_db(transaction=True)
def test_cancel_calls_the_webhook_and_the_address_guard_applies(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_ALLOWED_NETWORKS", "127.0.0.0/8")
    with Receiver() as receiver:
        job = _cancelled_job(receiver.url("/h"))
        assert CrawlJob.objects.get(pk=job.pk).webhook_status == webhooks.PENDING
        webhooks.deliver(job.pk, job.state, job.run, attempt=1)
        headers, body = receiver.calls[0]
        assert json.loads(body)["event"] == "cancelled"
        assert _verified(headers, body, job.webhook_secret)

        monkeypatch.setenv("CRAWL_ALLOWED_NETWORKS", "")
        receiver.calls.clear()
        webhooks.deliver(job.pk, job.state, job.run, attempt=1)
        assert receiver.calls == []
        status = CrawlJob.objects.get(pk=job.pk).webhook_status
        assert status.startswith("refused:") and "loopback" in status


@pytest.mark.django_db(transaction=True)
def test_a_webhook_that_keeps_failing_is_given_up_and_a_lost_one_sent_again(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_ALLOWED_NETWORKS", "127.0.0.0/8")
    with Receiver(503, 503) as receiver:
        job = _cancelled_job(receiver.url("/h"))
        for attempt in (1, 2):
            with pytest.raises(webhooks.Retry):
                webhooks.deliver(job.pk, job.state, job.run, attempt)
        assert "attempt 2: HTTP 503" in CrawlJob.objects.get(pk=job.pk).webhook_status
        webhooks.gave_up(job.pk, 2, "HTTP 503")
        assert CrawlJob.objects.get(pk=job.pk).webhook_status.startswith("failed after 2")

        # A notification whose message was lost stays pending; the sweep queues it again,
        # once per WEBHOOK_RESEND_S however often it runs.
        redis.flushdb()
        long_ago = timezone.now() - timedelta(seconds=defaults.WEBHOOK_RESEND_S + 1)
        CrawlJob.objects.filter(pk=job.pk).update(webhook_status=webhooks.PENDING,
                                                  finished_at=long_ago)  # fmt: skip
        assert webhooks.resend_pending() == 1
        assert broker.depth()["ready"] == 1
        assert webhooks.resend_pending() == 0 and broker.depth()["ready"] == 1
    assert CrawlJob(webhook_url="ftp://x/").problems(seeds=False)["webhook_url"]


class Trickler(LocalSite):
    """Answers a POST with a status line, then ``forever``: a header line, or body bytes,
    every 0.1 s, each within any read timeout, until the caller hangs up."""

    def __init__(self, forever: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                if forever == "body":
                    self.wfile.write(b"Content-Type: text/plain\r\n\r\n")
                try:
                    for n in range(600):
                        line = b"X-Slow-%d: 1\r\n" % n if forever == "headers" else b"x" * 1024
                        self.wfile.write(line)
                        self.wfile.flush()
                        time.sleep(0.1)
                except OSError:
                    pass  # the caller hung up

            def log_message(self, *args) -> None:
                pass

        super().__init__(Handler)


def _in_a_thread(call, within: float):
    """Run ``call``; what it raised or returned, or a failure if it is still running."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:  # noqa: BLE001 (handed to the test)
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    assert not thread.is_alive(), f"the call still runs after {within} s"
    return outcome[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("forever", ["headers", "body"])
def test_a_receiver_that_never_finishes_answering_holds_no_thread(redis, monkeypatch, forever):
    monkeypatch.setenv("CRAWL_ALLOWED_NETWORKS", "127.0.0.0/8")
    monkeypatch.setenv("CRAWL_WEBHOOK_DEADLINE_S", "1")
    with Trickler(forever) as receiver:
        job = _cancelled_job(receiver.url("/h"))
        started = time.monotonic()
        outcome = _in_a_thread(lambda: webhooks.deliver(job.pk, job.state, job.run, 1), 10)
        took = time.monotonic() - started
    status = CrawlJob.objects.get(pk=job.pk).webhook_status
    if forever == "headers":  # no answer: another attempt may get one
        assert isinstance(outcome, webhooks.Retry) and status == "attempt 1: no answer within 1 s"
        assert 1 <= took < 5
    else:  # the status line is the answer; its body is not read
        assert outcome is None and status.startswith("delivered: HTTP 200")
        assert took < 1


@pytest.mark.django_db(transaction=True)
def test_an_error_of_our_own_ends_the_delivery_instead_of_leaving_it_pending(redis, monkeypatch):
    monkeypatch.setenv("CRAWL_ALLOWED_NETWORKS", "127.0.0.0/8")
    with Receiver() as receiver:
        job = _cancelled_job(receiver.url("/h"))

        def broken(job):
            raise RuntimeError("summary cannot be built")

        monkeypatch.setattr(webhooks, "payload", broken)
        webhooks.deliver(job.pk, job.state, job.run, 1)
    status = CrawlJob.objects.get(pk=job.pk).webhook_status
    assert status == "failed: RuntimeError: summary cannot be built"
    assert receiver.calls == []


@pytest.mark.django_db(transaction=True)
def test_a_notification_lost_again_and_again_is_resent_a_bounded_number_of_times(redis):
    job = _cancelled_job("http://127.0.0.1:9/h")
    every, resends = defaults.WEBHOOK_RESEND_S, defaults.WEBHOOK_RESENDS
    long_ago = timezone.now() - timedelta(seconds=every * (resends + 1) + 1)
    CrawlJob.objects.filter(pk=job.pk).update(webhook_status=webhooks.PENDING,
                                              finished_at=long_ago)  # fmt: skip
    assert webhooks.resend_pending() == 0
    assert CrawlJob.objects.get(pk=job.pk).webhook_status == (
        f"failed: not delivered after {resends} resends"
    )
