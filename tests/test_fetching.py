"""The fetcher against a real local HTTP server: every bad case ends as a typed outcome."""

from __future__ import annotations

import gzip
import os
import socket
import ssl
import subprocess
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote

import pytest
import requests

from tasks.fetch import outcomes, transport
from tasks.fetch.fetching import Asked, FetchLimits, Visitor, fetch, parse_retry_after
from tasks.rules import guard

LIMITS = FetchLimits(
    connect_timeout=2, read_timeout=1, deadline=2, max_bytes=1 << 20, max_redirects=5
)
BOMB = gzip.compress(b"\0" * (20 << 20))
# 3 MiB of gzip that decodes to nothing: empty stored deflate blocks, five bytes each
EMPTY_BLOCKS = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + b"\x00\x00\x00\xff\xff" * (600 << 10)
LOOPBACK = guard.networks("127.0.0.0/8")  # the test server's network, allowed past the guard


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def reply(self, status: int, body: bytes = b"<title>t</title>", **headers: str) -> None:
        self.send_response(status)
        headers.setdefault("Content-Type", "text/html")
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path
        if path == "/ok":
            self.reply(200)
        elif path.startswith("/chain/"):
            n = int(path.rsplit("/", 1)[1])
            self.reply(302, Location=f"/chain/{n - 1}") if n else self.reply(200)
        elif path in ("/loop/a", "/loop/b"):
            self.reply(301, Location="/loop/b" if path.endswith("a") else "/loop/a")
        elif path == "/gate":  # a cookie check: sets one and redirects to the page itself
            if "checked=1" in (self.headers.get("Cookie") or ""):
                self.reply(200, b"<title>inside</title>")
            else:
                self.reply(302, Location="/gate", Set_Cookie="checked=1; Path=/")
        elif path == "/gate-forever":  # a new cookie each time: never a loop, never an end
            self.reply(302, Location="/gate-forever", Set_Cookie=f"n={time.monotonic_ns()}; Path=/")
        elif path == "/bad-location":
            self.reply(302, Location="http://[x")
        elif path == "/offsite":
            self.reply(302, Location="http://external.invalid/")
        elif path == "/notfound":
            self.reply(404)
        elif path == "/error":
            self.reply(503, Retry_After="3")
        elif path == "/ratelimited":
            self.reply(429, Retry_After="7")
        elif path == "/timed-out":
            self.reply(408)
        elif path == "/big":
            self.reply(200, b"<p>" + b"x" * (3 << 20))
        elif path == "/bomb":
            self.reply(200, BOMB, Content_Encoding="gzip")
        elif path == "/empty-blocks":
            self.reply(200, EMPTY_BLOCKS, Content_Encoding="gzip")
        elif path == "/gzip":
            self.reply(200, gzip.compress(b"<title>zipped</title>"), Content_Encoding="gzip")
        elif path == "/hang":
            time.sleep(3)
            self.reply(200)
        elif path == "/drip":
            self.send_response(200)
            self.send_header("Content-Length", "3000")
            self.end_headers()
            for _ in range(30):
                self.wfile.write(b"x" * 100)
                self.wfile.flush()
                time.sleep(0.2)
        elif path == "/reset":
            self.connection.shutdown(socket.SHUT_RDWR)  # closed without a response
        elif path == "/login":
            self.reply(200, Set_Cookie="sid=of-the-first-visitor; Path=/")
        elif path == "/whoami":
            self.reply(200, (self.headers.get("Cookie") or "-").encode())
        elif path == "/echo":
            self.reply(200, "\n".join(f"{k}: {v}" for k, v in self.headers.items()).encode())
        elif path.startswith("/as-sent/"):  # the request's target as it came on the wire
            self.reply(200, path.encode())
        elif path.startswith("/to/"):  # a redirect to the URL that follows
            self.reply(302, Location=unquote(path[len("/to/") :]))


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def get(url: str, **kw):
    return fetch(url, user_agent="test", limits=LIMITS, allow=LOOPBACK, **kw)


def test_ok(server):
    resp = get(server + "/ok")
    assert (resp.status, resp.content_type, resp.truncated) == (200, "text/html", False)
    assert resp.http["ip"] == "127.0.0.1"  # the address that answered


def test_a_kept_alive_connection_serves_whichever_thread_fetches_next():
    """On a broad crawl a host's next URL seldom comes back to the thread that fetched its
    last one: a process's threads share its connection pools, so none opens a connection (a
    TLS handshake, on most sites) to a host that has one idle. A forked child opens its own."""
    opened = []

    class Counting(Handler):
        def setup(self) -> None:
            opened.append(self.client_address)
            super().setup()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/ok"
    statuses = []
    try:
        for _ in range(4):
            thread = threading.Thread(target=lambda: statuses.append(get(url).status))
            thread.start()
            thread.join()
        assert statuses == [200] * 4 and len(opened) == 1
        transport.session(LOOPBACK).close()  # as a webhook's caller does: the pools stay
        assert get(url).status == 200 and len(opened) == 1
        child = os.fork()
        if child == 0:
            os._exit(0 if get(url).status == 200 else 1)
        assert os.waitpid(child, 0)[1] == 0
        assert get(url).status == 200 and len(opened) == 2  # the parent's is still its own
    finally:
        srv.shutdown()
        srv.server_close()


def test_cookies_go_only_with_the_visitor_that_holds_them(server):
    first = Visitor()
    get(server + "/login", visitor=first)
    assert {c.name: c.value for c in first.set_cookies} == {"sid": "of-the-first-visitor"}
    assert get(server + "/whoami", visitor=first).body == b"sid=of-the-first-visitor"
    # another identity, another job, or no visitor at all: none of the first one's cookies,
    # though the same thread's pooled session carried them all
    assert get(server + "/whoami", visitor=Visitor()).body == b"-"
    assert get(server + "/whoami").body == b"-"


def test_a_request_carries_its_user_agent_and_visitor_headers_in_a_fixed_order(server):
    visitor = Visitor(headers={"accept": "text/html", "X-Team": "crawl", "user-agent": "other"})
    resp = get(server + "/echo", visitor=visitor, conditional={"If-None-Match": '"v1"'})
    sent = [line.split(": ", 1) for line in resp.body.decode().splitlines()]
    names = [name.lower() for name, _ in sent]
    # requests' session defaults first (the job's user agent wins over a visitor's), then the
    # visitor's own, then a recrawl's validators; nothing twice
    assert names[:5] == ["host", "user-agent", "accept-encoding", "accept", "connection"]
    assert dict((k.lower(), v) for k, v in sent) | {"host": ""} == {
        "host": "", "user-agent": "test", "accept-encoding": "gzip, deflate",
        "accept": "text/html", "connection": "keep-alive", "x-team": "crawl",
        "if-none-match": '"v1"',
    }  # fmt: skip
    assert len(names) == len(set(names)) and names.index("x-team") < names.index("if-none-match")
    assert ["User-Agent", "test"] in resp.http["request"]


def test_a_header_a_spider_gives_twice_goes_with_both_values(server):
    asked = Asked(headers=(("X-List", "a"), ("x-list", "b"), ("Accept", "text/html")))
    echoed = get(server + "/echo", request=asked).body.decode().splitlines()
    assert {"X-List: a, b", "Accept: text/html"} <= set(echoed)


@pytest.mark.parametrize(("given", "sent"), [  # as Scrapy and browsers send them
    ("/as-sent/%7Eb%41.html?x=%7E%41", "/as-sent/%7Eb%41.html?x=%7E%41"),
    ("/as-sent/a/./b/../c", "/as-sent/a/./b/../c"),
    ("/as-sent/%2e%2e", "/as-sent/%2E%2E"),  # urllib3 writes an escape's digits in capitals
    ("/as-sent/a b?q=é", "/as-sent/a%20b?q=%C3%A9"),  # what needs escaping is escaped
])  # fmt: skip
def test_a_urls_path_and_query_go_out_as_given(server, given, sent):
    assert get(server + given).body == sent.encode()


def test_redirect_chain_is_followed_and_recorded(server):
    resp = get(server + "/chain/3")
    assert resp.final_url == server + "/chain/0"
    assert len(resp.redirects) == 3


def test_too_many_redirects(server):
    with pytest.raises(outcomes.TooManyRedirects):
        get(server + "/chain/9")


def test_redirect_loop_is_told_apart(server):
    with pytest.raises(outcomes.RedirectLoop):
        get(server + "/loop/a")


def test_a_redirect_to_itself_with_a_new_cookie_is_no_loop(server):
    """A site's cookie check sets a cookie and redirects to the page itself: followed with the
    cookie, the page is reached; only a cookie that changes every time runs into the cap."""
    resp = get(server + "/gate")
    gate = server + "/gate"
    assert (resp.status, resp.final_url, resp.redirects) == (200, gate, [gate])
    assert b"inside" in resp.body
    with pytest.raises(outcomes.TooManyRedirects):
        get(server + "/gate-forever")


def test_credentials_given_as_headers_go_through_a_redirect_only_where_they_were_meant_for(
    server,
):
    """As browsers and Scrapy's RedirectMiddleware: a request's ``Authorization`` and
    ``Cookie`` headers follow a redirect on the same host, not one to another host."""
    asked = Asked(headers=(("Authorization", "Bearer t0ken"), ("Cookie", "sid=1")))
    same = get(server + "/to/" + quote(server + "/echo"), request=asked).body.decode()
    assert "Authorization: Bearer t0ken" in same and "Cookie: sid=1" in same
    elsewhere = server.replace("127.0.0.1", "localhost") + "/echo"
    moved = get(server + "/to/" + quote(elsewhere), request=asked)
    assert moved.final_url == elsewhere
    assert "t0ken" not in moved.body.decode() and "sid=1" not in moved.body.decode()


def test_redirect_out_of_scope_is_not_followed(server):
    with pytest.raises(outcomes.OutOfScope):
        get(server + "/offsite", in_scope=lambda u: u.startswith(server))


@pytest.mark.parametrize(
    ("path", "kind", "retryable", "status", "retry_after"),
    [
        ("/notfound", outcomes.ClientError, False, 404, None),
        ("/error", outcomes.ServerError, True, 503, 3.0),
        ("/ratelimited", outcomes.TooManyRequests, True, 429, 7.0),
        ("/timed-out", outcomes.RequestTimeout, True, 408, None),  # retried, as Scrapy does
    ],
)
def test_http_errors(server, path, kind, retryable, status, retry_after):
    with pytest.raises(kind) as info:
        get(server + path)
    assert info.value.retryable is retryable
    assert (info.value.status, info.value.retry_after) == (status, retry_after)


def test_body_is_cut_at_the_cap_and_marked_truncated(server):
    resp = get(server + "/big")
    assert resp.truncated and len(resp.body) == LIMITS.max_bytes


def test_gzip_is_decoded_and_a_gzip_bomb_is_capped(server):
    assert get(server + "/gzip").body == b"<title>zipped</title>"
    bomb = get(server + "/bomb")
    assert bomb.truncated and len(bomb.body) == LIMITS.max_bytes


def test_received_bytes_are_capped_even_when_they_decode_to_nothing(server):
    resp = get(server + "/empty-blocks")
    assert resp.truncated and resp.body == b""
    assert len(resp.raw_body) <= LIMITS.max_bytes


def test_read_timeout(server):
    with pytest.raises(outcomes.ReadTimeout):
        get(server + "/hang")


def test_total_deadline_bounds_a_slow_drip(server):
    started = time.monotonic()
    with pytest.raises(outcomes.DeadlineExceeded):
        get(server + "/drip")
    assert time.monotonic() - started < LIMITS.deadline + 1


def test_connection_refused_and_reset(server):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free_port = s.getsockname()[1]
    with pytest.raises(outcomes.ConnectFailed) as refused:
        get(f"http://127.0.0.1:{free_port}/")
    assert refused.value.host_level and refused.value.summary == "connection refused"
    assert refused.value.definitive
    with pytest.raises(outcomes.ConnectionReset) as reset:
        get(server + "/reset")
    assert reset.value.overload and not reset.value.host_level


def test_names_resolve_through_the_resolve_setting_and_never_query_for_invalid(server, monkeypatch):
    port = server.rsplit(":", 1)[1]
    monkeypatch.setenv("CRAWL_RESOLVE", "docs.example.test=127.0.0.1, gone.example.test=")
    assert get(f"http://docs.example.test:{port}/ok").status == 200
    for name in ("gone.example.test", "anything.invalid"):
        with pytest.raises(outcomes.DNSFailure) as failure:
            get(f"http://{name}:{port}/ok")
        assert failure.value.host_level and "does not resolve" in str(failure.value)


def test_a_redirect_to_something_that_is_not_a_url_fails_as_invalid(server):
    with pytest.raises(outcomes.InvalidURL) as bad:
        get(server + "/bad-location")
    assert "redirect to 'http://[x' is not a valid URL" in str(bad.value)


def test_retry_after_in_seconds_and_as_http_date():
    assert parse_retry_after("120") == 120.0
    now = time.time()
    assert parse_retry_after(formatdate(now + 60, usegmt=True), now=now) == pytest.approx(60, abs=1)
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_connect_timeout_when_the_server_accepts_nothing():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    held = []
    for _ in range(3):  # fill the accept backlog: further SYNs go unanswered
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        held.append(c)
    limits = FetchLimits(
        connect_timeout=0.5, read_timeout=1, deadline=2, max_bytes=1024, max_redirects=1
    )
    try:
        with pytest.raises(outcomes.ConnectTimeout) as info:
            fetch(f"http://127.0.0.1:{port}/", user_agent="test", limits=limits, allow=LOOPBACK)
        assert info.value.retryable and info.value.host_level and not info.value.definitive
    finally:
        for c in held:
            c.close()
        srv.close()


def test_tls_failure_is_a_permanent_tls_outcome(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    srv.socket = context.wrap_socket(srv.socket, server_side=True)
    srv.handle_error = lambda *args: None  # the client refusing our certificate is the point
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(outcomes.TLSError) as info:
            get(f"https://127.0.0.1:{srv.server_address[1]}/ok")  # self-signed: not trusted
        assert not info.value.retryable
    finally:
        srv.shutdown()


def test_name_resolution_failure_maps_to_dns():
    cause = socket.gaierror(-2, "Name or service not known")
    exc = requests.exceptions.ConnectionError("Failed to resolve 'nowhere.invalid'")
    exc.__cause__ = cause
    outcome = outcomes.from_requests(exc)
    assert isinstance(outcome, outcomes.DNSFailure) and outcome.retryable
    assert outcome.definitive  # the name does not exist: an answer, for a never-answered host


def test_a_resolver_that_says_try_again_is_not_a_definitive_answer():
    exc = requests.exceptions.ConnectionError("Failed to resolve 'docs.example.test'")
    exc.__cause__ = socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    outcome = outcomes.from_requests(exc)
    assert isinstance(outcome, outcomes.DNSFailure) and not outcome.definitive


def test_through_a_proxy_the_guard_checks_the_target_before_the_proxy_is_asked():
    from tests.antibot import AntiBotSite, ForwardProxy

    with AntiBotSite() as site, ForwardProxy("127.0.0.2") as proxy:
        visitor = Visitor(proxy=proxy.url())
        with pytest.raises(outcomes.BlockedAddress, match="127.0.0.1"):
            fetch(site.url("/"), user_agent="t", limits=LIMITS, allow=(), visitor=visitor)
        assert proxy.requests == 0  # refused before the proxy heard of it
        allowed = guard.networks("127.0.0.0/8")
        resp = fetch(site.url("/"), user_agent="t", limits=LIMITS, allow=allowed, visitor=visitor)
        assert resp.status == 200 and proxy.requests == 1
        assert site.served["/"][0][0] == "127.0.0.2"  # it came from the proxy's address


def _outcome_classes(cls: type) -> list[type]:
    return [found for sub in cls.__subclasses__() for found in (sub, *_outcome_classes(sub))]


def test_every_outcome_is_in_the_docs_table_as_retried_or_not():
    """The outcomes table of docs/crawling.md names every reason a URL can end with, and
    says of each whether it is retried as its class is (a table row may name several)."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "crawling.md").read_text()
    table = doc.split("## Outcomes", 1)[1].split("\n## ", 1)[0]
    retried: dict[str, str] = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            for name in cells[0].replace("`", "").split(","):
                retried[name.strip()] = cells[2]
    for cls in _outcome_classes(outcomes.CrawlOutcome):
        if "reason" not in vars(cls) or cls in (outcomes.Retryable, outcomes.Permanent,
                                                outcomes.Skip):  # fmt: skip
            continue  # a kind of outcome, which its subclasses name
        assert cls.reason in retried, cls.__name__
        if issubclass(cls, outcomes.Permanent):
            assert retried[cls.reason] == "no", cls.reason
        elif issubclass(cls, outcomes.Retryable) and cls is not outcomes.Banned:  # its own policy
            assert retried[cls.reason].startswith(("yes", "up to")), cls.reason
