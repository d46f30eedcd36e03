"""The render step's browser trusts exactly what the fetcher trusts (``tasks/fetch/render_tls.py``):
real Chromium against a local HTTPS site signed by a CA made in the test (``tests/tlssite.py``),
as ``tests/test_trust.py`` checks the fetcher. The door ends the browser's TLS with certificates
of its own key, which the browser accepts and no other it does not trust, and checks the site
with the fetcher's settings; failures are the fetcher's outcomes with the fetcher's messages.

Every name the door resolves is recorded: none may be one a real resolver would be asked for."""

from __future__ import annotations

import socket
import ssl
from concurrent.futures import ThreadPoolExecutor

import pytest

from tasks.fetch import fetching, outcomes, render, render_proxy, render_tls, transport
from tasks.rules import guard
from tests.antibot import ForwardProxy
from tests.test_trust import TRUST_SETTINGS
from tests.tlssite import WEBSOCKET_MESSAGE, Authority, TLSSite

pytestmark = pytest.mark.skipif(
    bool(render.unavailable()), reason=f"no browser: {render.unavailable()}"
)
ALLOW = guard.networks("127.0.0.1/32")  # the site's address (and the test proxies')
LIMITS = fetching.FetchLimits(
    connect_timeout=5, read_timeout=5, deadline=30, max_bytes=1 << 20, max_redirects=5
)
PAGE = b"""<html><body><p>private</p><img src="/pixel.png"><script>
fetch('/data').then(r => r.text()).then(t => { document.body.dataset.fetched = t; });
const ws = new WebSocket(`wss://${location.host}/socket`);
ws.onmessage = e => { document.body.dataset.ws = e.data; };
</script></body></html>"""
PAGES = {"/": ("text/html", PAGE), "/data": ("text/plain", b"from fetch"),
         "/pixel.png": ("image/png", b"\x89PNG\r\n\x1a\n")}  # fmt: skip
UNTRUSTED = (
    "certificate verify failed: unable to get local issuer certificate "
    "(set CA_BUNDLE to trust a private CA)"
)


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    """No trust setting but those a test makes (a machine may set REQUESTS_CA_BUNDLE)."""
    for name in TRUST_SETTINGS:
        monkeypatch.delenv(name, raising=False)


OWN_NAMES = {"127.0.0.1", "wrong.test"}  # the names the tests give the door to resolve


@pytest.fixture(autouse=True)
def names(monkeypatch):
    """The names the door resolves: the test's own. Any other (after a certificate error
    Chromium asks connectivitycheck.gstatic.com whether a captive portal is in the way) is
    recorded and does not resolve, so that no real resolver is ever asked."""
    asked: list[str] = []
    resolve = transport.resolve

    def recorded(host: str, port: int) -> list[tuple]:
        asked.append(host)
        if host not in OWN_NAMES:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} is not resolved in a test")
        return resolve(host, port)

    monkeypatch.setattr(transport, "resolve", recorded)
    yield asked
    assert set(asked) <= OWN_NAMES


@pytest.fixture(scope="module")
def authority(tmp_path_factory) -> Authority:
    return Authority(tmp_path_factory.mktemp("pki") / "internal")


@pytest.fixture
def intranet(authority):
    with TLSSite(authority, pages=PAGES) as site:
        yield site


def render_page(url: str, limits: fetching.FetchLimits = LIMITS, **kwargs) -> fetching.Response:
    return render.fetch(url, user_agent="render-test", limits=limits, allow=ALLOW, **kwargs)


def test_a_site_signed_by_a_private_ca_fails_the_render_naming_the_setting(intranet):
    with pytest.raises(outcomes.TLSError) as failed:
        render_page(intranet.url())
    assert str(failed.value) == UNTRUSTED
    assert intranet.requests == []


@pytest.mark.parametrize("variable", ["CRAWL_CA_BUNDLE", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"])
def test_the_fetchers_trust_renders_the_page_and_its_subresources(
    monkeypatch, authority, intranet, variable
):
    """The page, an image, a ``fetch()`` and a wss WebSocket on the private-CA host."""
    monkeypatch.setenv(variable, str(authority.ca))
    resp = render_page(intranet.url())
    assert resp.status == 200 and b"private" in resp.body
    assert b'data-fetched="from fetch"' in resp.body
    assert b'data-ws="' + WEBSOCKET_MESSAGE + b'"' in resp.body
    assert {"/", "/pixel.png", "/data", "/socket"} <= set(intranet.requests)


def test_a_socket_that_answers_after_the_network_went_idle_is_waited_for(monkeypatch, authority):
    """Network idle (half a second without a request) does not count WebSockets: the render
    waits for each socket's first message, up to ``RENDER_SOCKET_WAIT_S``."""
    monkeypatch.setenv("CRAWL_CA_BUNDLE", str(authority.ca))
    with TLSSite(authority, pages=PAGES, socket_delay=1.5) as slow:
        resp = render_page(slow.url())
    assert b'data-ws="' + WEBSOCKET_MESSAGE + b'"' in resp.body
    monkeypatch.setenv("CRAWL_RENDER_SOCKET_WAIT_S", "0.2")  # the same socket is not waited for
    with TLSSite(authority, pages=PAGES, socket_delay=1.5) as slow:
        resp = render_page(slow.url())
    assert b'data-fetched="from fetch"' in resp.body and b"data-ws" not in resp.body


def test_the_site_s_host_name_is_matched(monkeypatch, authority, intranet):
    """A name the site's certificate does not carry (RESOLVE points it at the site)."""
    monkeypatch.setenv("CRAWL_CA_BUNDLE", str(authority.ca))
    monkeypatch.setenv("CRAWL_RESOLVE", "wrong.test=127.0.0.1")
    wrong = intranet.url().replace("127.0.0.1", "wrong.test")
    with pytest.raises(outcomes.TLSError) as failed:
        render_page(wrong)
    assert str(failed.value) == (
        "certificate verify failed: Hostname mismatch, certificate is not valid for 'wrong.test'."
    )
    with pytest.raises(outcomes.TLSError) as fetched:
        fetching.fetch(wrong, user_agent="t", limits=LIMITS, allow=ALLOW)
    assert str(failed.value) == str(fetched.value)  # the fetcher's own words


def test_a_server_asking_for_a_client_certificate_gets_client_cert(monkeypatch, authority):
    monkeypatch.setenv("CRAWL_CA_BUNDLE", str(authority.ca))
    with TLSSite(authority, ask_client=True, pages=PAGES) as mutual:
        with pytest.raises(outcomes.TLSError) as failed:
            render_page(mutual.url())
        assert str(failed.value).endswith(
            ": the server asks for a client certificate it trusts (set CLIENT_CERT and CLIENT_KEY)"
        )
        assert mutual.requests == []
        monkeypatch.setenv("CRAWL_CLIENT_CERT", str(authority.client))
        monkeypatch.setenv("CRAWL_CLIENT_KEY", str(authority.client.with_suffix(".key")))
        resp = render_page(mutual.url())
    assert resp.status == 200 and b'data-fetched="from fetch"' in resp.body
    assert b'data-ws="' + WEBSOCKET_MESSAGE + b'"' in resp.body


def test_a_job_that_checks_no_certificate_renders_without_the_ca(intranet):
    unchecked = fetching.FetchLimits(**{**LIMITS.__dict__, "verify": False})
    resp = render_page(intranet.url(), limits=unchecked)
    assert resp.status == 200 and b"private" in resp.body


def test_unusable_tls_settings_end_the_render_naming_them(monkeypatch, intranet):
    monkeypatch.setenv("CRAWL_CA_BUNDLE", "/nowhere/ca.pem")
    with pytest.raises(outcomes.InternalError) as failed:
        render_page(intranet.url())
    assert str(failed.value) == "TLS settings: CA_BUNDLE=/nowhere/ca.pem: no such file or directory"


@pytest.mark.parametrize("kind", ["http", "socks5"])
def test_the_trust_holds_through_a_jobs_proxy(monkeypatch, authority, intranet, kind):
    monkeypatch.setenv("CRAWL_CA_BUNDLE", str(authority.ca))
    with ForwardProxy("127.0.0.1", kind=kind) as proxy:
        resp = render_page(intranet.url(), visitor=fetching.Visitor(proxy=proxy.url()))
    assert resp.status == 200 and b'data-fetched="from fetch"' in resp.body
    assert set(proxy.targets) == {"127.0.0.1"}
    with ForwardProxy("127.0.0.1", kind=kind) as proxy, pytest.raises(outcomes.TLSError):
        monkeypatch.delenv("CRAWL_CA_BUNDLE")
        render_page(intranet.url(), visitor=fetching.Visitor(proxy=proxy.url()))


def test_an_https_proxys_own_certificate_is_checked_with_the_same_trust(
    monkeypatch, authority, intranet
):
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(authority.server, authority.server.with_suffix(".key"))
    with ForwardProxy("127.0.0.1", tls=tls) as proxy:
        visitor = fetching.Visitor(proxy=proxy.url())
        with pytest.raises(outcomes.ProxyFailed, match=r"\(set CA_BUNDLE to trust a private CA\)"):
            render_page(intranet.url(), visitor=visitor)
        monkeypatch.setenv("CRAWL_CA_BUNDLE", str(authority.ca))
        resp = render_page(intranet.url(), visitor=visitor)  # TLS inside TLS
    assert resp.status == 200 and b'data-fetched="from fetch"' in resp.body


class LoopbackTunnel(ForwardProxy):
    """A plain proxy that reaches 127.0.0.1 only (any other name it records and refuses,
    unresolved: after a certificate error Chromium asks connectivitycheck.gstatic.com whether a
    captive portal is in the way): a tunnel that does not end at the render door."""

    def _connect(self, host: str, port: int):
        if host != "127.0.0.1":
            raise ConnectionRefusedError(f"{host} is not reached from a test")
        return super()._connect(host, port)


def test_the_browser_accepts_the_door_s_key_and_no_other_certificate_it_does_not_trust(
    authority, intranet
):
    """Through a tunnel that does not end at the door, the browser checks the site itself: a
    certificate of the door's key is accepted (the flag holds with Playwright's launch and its
    ``--user-data-dir``), one of another key that its own store does not trust is refused."""
    interception = render_tls.Interception()
    minted = TLSSite(authority, pages=PAGES, tls=interception.for_browser("127.0.0.1"))

    def visit(urls: list[str]) -> list[str]:
        from playwright.sync_api import Error, sync_playwright

        seen = []
        closed = render_proxy.Door(render_proxy.Policy(refuse_all=True), interception)
        with closed, LoopbackTunnel("127.0.0.1") as tunnel, sync_playwright() as playwright:
            options = render.launch_options(closed.url, interception.spki)
            browser = playwright.chromium.launch(**options)
            page = browser.new_context(proxy={"server": tunnel.url()}).new_page()
            for url in urls:
                try:
                    seen.append(str(page.goto(url, timeout=20_000).status))
                except Error as exc:
                    seen.append(str(exc).splitlines()[0])
            browser.close()
        assert "127.0.0.1" in tunnel.targets  # a captive portal's probe besides, refused
        return seen

    with minted, ThreadPoolExecutor(1) as browser_thread:  # Playwright's loop off this thread
        seen = browser_thread.submit(visit, [minted.url(), intranet.url()]).result()
    assert seen[0] == "200"
    assert "net::ERR_CERT_AUTHORITY_INVALID" in seen[1]
    assert minted.requests[0] == "/" and intranet.requests == []
