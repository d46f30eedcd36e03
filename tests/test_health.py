"""Each of the nine health checks of ``/healthz/details`` fails when its cause is there (the
queue backlog and memory growth checks: tests/test_web.py)."""

from __future__ import annotations

import resource
import socket
from collections.abc import Iterator

import psutil
import pytest
from django.conf import settings
from django.db import connection

from tasks import broker
from tests.antibot import CAPTCHA
from tests.budgets import LOCAL
from tests.site import LocalSite, send
from web import health

pytestmark = pytest.mark.django_db(transaction=True)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket closes


def check(name: str) -> health.Check:
    return health.timed(name, health.ALL[name])


PAGES = {"/ok": (200, b"<html><title>fine</title>a page</html>"), "/blocked": (200, CAPTCHA)}


class Canary(LocalSite):
    """``/ok`` a page, ``/blocked`` a challenge, ``/down`` a 503."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                send(self, 200, {}, b"")

            def do_GET(self) -> None:
                status, body = PAGES.get(self.path, (503, b"busy"))
                send(self, status, {}, body)

        super().__init__(Handler)


@pytest.fixture
def canary(monkeypatch) -> Iterator[Canary]:
    for key, value in LOCAL.items():  # the canary lives on loopback
        monkeypatch.setenv(key, value)
    with Canary() as site:
        yield site


def test_process_fails_when_its_open_files_near_their_limit():
    assert check("process").ok
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(psutil.Process().num_fds() / 0.9), hard))
    try:
        failed = check("process")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not failed.ok and " files" in failed.reason


def test_redis_check_fails_while_redis_is_unreachable(redis, monkeypatch):
    assert check("redis_writable").ok
    monkeypatch.setattr(settings, "REDIS_URL", f"redis://127.0.0.1:{closed_port()}/0")
    broker.client.cache_clear()
    try:
        assert not check("redis_writable").ok
    finally:
        monkeypatch.undo()
        broker.client.cache_clear()


def test_database_and_metrics_checks_fail_while_the_database_is_unreachable(redis, tmp_path):
    assert check("database_writable").ok and check("metrics").ok
    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = str(tmp_path / "missing" / "db.sqlite3")
    else:
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(closed_port()))
    try:
        assert not check("database_writable").ok
        assert not check("metrics").ok
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def test_dns_fails_when_a_configured_name_does_not_resolve(monkeypatch):
    monkeypatch.setenv("HEALTH_DNS_NAME", "localhost,gone.invalid")
    failed = check("dns")
    assert not failed.ok and "gone.invalid" in failed.reason and "localhost" not in failed.reason
    monkeypatch.setenv("HEALTH_DNS_NAME", "localhost,fine.test")
    monkeypatch.setenv("CRAWL_RESOLVE", "fine.test=127.0.0.1,blocked.test=")
    assert check("dns").ok  # the crawler's resolver: RESOLVE overrides included
    monkeypatch.setenv("HEALTH_DNS_NAME", "blocked.test")
    assert not check("dns").ok


def test_http_pool_fails_when_it_cannot_connect(canary, monkeypatch):
    monkeypatch.setenv("HEALTH_POOL_URL", f"http://127.0.0.1:{closed_port()}/")
    assert not check("http_pool").ok
    monkeypatch.setenv("HEALTH_POOL_URL", canary.url("/ok"))
    assert check("http_pool").ok


def test_canary_fails_on_a_block_page_or_an_error(canary, monkeypatch):
    monkeypatch.setenv("HEALTH_CANARY_URL", canary.url("/ok"))
    assert check("canary").ok
    monkeypatch.setenv("HEALTH_CANARY_URL", canary.url("/blocked"))
    blocked = check("canary")
    assert not blocked.ok and "blocked: challenge" in blocked.reason
    monkeypatch.setenv("HEALTH_CANARY_URL", canary.url("/down"))
    down = check("canary")
    assert not down.ok and "503" in down.reason


def test_all_nine_pass_on_a_healthy_platform_with_every_check_configured(canary, redis,
                                                                         monkeypatch):  # fmt: skip
    monkeypatch.setenv("HEALTH_CANARY_URL", canary.url("/ok"))  # the pool connects to it too
    ok, results = health.run(health.ALL)
    assert ok, results
    assert not [r for r in results if "not configured" in r["reason"]]
