"""The render step's browser behind the platform's one door (``tasks/fetch/render.py``,
``tasks/fetch/render_proxy.py``): real Chromium, real local servers.

The site lives on 127.0.0.2 and the render's policy allows that address only; the target
it must not reach is a listener on 127.0.0.1 (loopback too, so the browser could reach it if
anything let it through) that records every connection it accepts."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tasks.fetch import fetching, outcomes, render, render_proxy, render_tls
from tasks.rules import guard
from tests.antibot import ForwardProxy

pytestmark = pytest.mark.skipif(
    bool(render.unavailable()), reason=f"no browser: {render.unavailable()}"
)
ALLOW = guard.networks("127.0.0.2/32")  # the site's address, not the forbidden one
SECRET_PAGE = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nsecret"
LIMITS = fetching.FetchLimits(
    connect_timeout=5, read_timeout=5, deadline=30, max_bytes=1 << 20, max_redirects=5
)


class Forbidden:
    """A TCP (and UDP) listener on 127.0.0.1 that records every connection or datagram, and
    answers a request with a small page, as a service the crawl must not reach would."""

    def __init__(self, port: int = 0, address: str = "127.0.0.1") -> None:
        self.tcp = socket.create_server((address, port))
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((address, 0))
        self.seen: list[str] = []
        for target in (self._accept, self._receive):
            threading.Thread(target=target, daemon=True).start()

    @property
    def port(self) -> int:
        return self.tcp.getsockname()[1]

    @property
    def udp_port(self) -> int:
        return self.udp.getsockname()[1]

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.tcp.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.seen.append(conn.recv(4096).split(b"\r\n", 1)[0].decode("latin-1"))
                    conn.sendall(SECRET_PAGE)
                except OSError:
                    self.seen.append("(a connection)")

    def _receive(self) -> None:
        while True:
            try:
                self.udp.recvfrom(4096)
            except OSError:
                return
            self.seen.append("(a datagram)")

    def close(self) -> None:
        self.tcp.close()
        self.udp.close()


class PageSite:
    """Pages on 127.0.0.2 (``pages``: path -> (status, headers, body)), recording each path
    served."""

    def __init__(self, pages: dict[str, tuple[int, dict[str, str], bytes]]) -> None:
        site = self
        self.pages, self.served = pages, []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                site.served.append(self.path)
                status, headers, body = site.pages.get(self.path, (404, {}, b"not here"))
                self.send_response(status)
                for name, value in {"Content-Type": "text/html", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def url(self, path: str, host: str = "127.0.0.2") -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def forbidden():
    target = Forbidden()
    yield target
    target.close()


def html(script: str, text: str = "hello") -> bytes:
    return f"<html><body><p>{text}</p><script>{script}</script></body></html>".encode()


def fetch(url: str, allow: tuple[guard.Network, ...] = ALLOW, **kwargs) -> fetching.Response:
    return render.fetch(url, user_agent="render-test", limits=LIMITS, allow=allow, **kwargs)


def test_subresources_fetches_and_websockets_reach_only_what_the_guard_allows(forbidden, caplog):
    there = f"127.0.0.1:{forbidden.port}"
    script = (
        f"new Image().src = 'http://{there}/pixel.png';"
        f"fetch('http://{there}/api').catch(() => null);"
        f"const ws = new WebSocket('ws://{there}/socket');"
        "ws.onerror = () => { document.body.dataset.ws = 'failed'; };"
        "new WebSocket(`ws://${location.host}/allowed-socket`);"  # a tunnel the door opens
    )
    site = PageSite({"/": (200, {}, html(script))})
    try:
        with caplog.at_level("INFO", logger="tasks.fetch.render"):
            resp = fetch(site.url("/"))
    finally:
        site.close()
    assert resp.status == 200 and b"hello" in resp.body
    assert b'data-ws="failed"' in resp.body  # the page tried, and its socket was refused
    assert "/allowed-socket" in site.served and forbidden.seen == []
    assert f"refused {there}: 127.0.0.1 (127.0.0.1) is a loopback address" in caplog.text


def test_a_redirect_hop_to_a_forbidden_address_is_refused_at_the_hop(forbidden):
    hop = f"http://127.0.0.1:{forbidden.port}/landed"
    site = PageSite({"/away": (302, {"Location": hop}, b"")})
    try:
        with pytest.raises(outcomes.BlockedAddress, match=r"127\.0\.0\.1 .* loopback"):
            fetch(site.url("/away"))
    finally:
        site.close()
    assert site.served and set(site.served) == {"/away"}
    assert forbidden.seen == []


def test_a_name_the_platform_cannot_resolve_is_not_resolved_by_the_browser(forbidden, monkeypatch):
    # Chromium resolves any *.localhost name to loopback by itself, with no resolver asked.
    monkeypatch.setenv("CRAWL_RESOLVE", "foo.localhost=")
    with pytest.raises(outcomes.DNSFailure, match="foo.localhost does not resolve"):
        fetch(f"http://foo.localhost:{forbidden.port}/")
    assert forbidden.seen == []


def test_the_browser_connects_to_the_address_the_guard_checked(monkeypatch):
    """A name the platform resolves to the allowed site, which the browser would resolve to
    loopback's 127.0.0.1 on the same port (where the forbidden listener waits)."""
    site = PageSite({"/": (200, {}, html("", text="the checked address"))})
    try:
        target = Forbidden(port=site.port)
    except OSError:
        site.close()
        pytest.skip(f"port {site.port} is taken on 127.0.0.1")
    monkeypatch.setenv("CRAWL_RESOLVE", "app.localhost=127.0.0.2")
    try:
        resp = fetch(site.url("/", host="app.localhost"))
    finally:
        site.close()
        target.close()
    assert resp.status == 200 and b"the checked address" in resp.body
    assert target.seen == [] and site.served[0] == "/"


def test_a_service_worker_is_not_registered():
    """Neither through the page's own ``register`` nor through a fresh iframe's, which the
    browser context's block does not reach."""
    script = (
        "const f = document.createElement('iframe'); document.body.append(f);"
        "const fresh = f.contentWindow.ServiceWorkerContainer.prototype.register;"
        "Promise.allSettled([navigator.serviceWorker.register('/sw.js'),"
        " fresh.call(navigator.serviceWorker, '/sw.js?fresh')])"
        ".then(() => navigator.serviceWorker.getRegistrations())"
        ".then(r => { document.body.dataset.sw = String(r.length); });"
    )
    site = PageSite({
        "/": (200, {}, html(script)),
        "/sw.js": (200, {"Content-Type": "text/javascript"}, b"self.onfetch = () => null;"),
        "/sw.js?fresh": (200, {"Content-Type": "text/javascript"}, b"self.onfetch = () => null;"),
    })  # fmt: skip
    try:
        resp = fetch(site.url("/"))
    finally:
        site.close()
    assert resp.status == 200 and b'data-sw="0"' in resp.body
    assert not any(path.startswith("/sw.js") for path in site.served)


def test_webrtc_and_webtransport_send_nothing_around_the_door(forbidden):
    script = (
        f"try {{ new WebTransport('https://127.0.0.1:{forbidden.udp_port}/').ready"
        ".catch(() => null); } catch (e) {}"
        "const pc = new RTCPeerConnection("
        f"{{iceServers: [{{urls: 'stun:127.0.0.1:{forbidden.udp_port}'}}]}});"
        "pc.createDataChannel('x');"
        "pc.createOffer().then(o => pc.setLocalDescription(o));"
        "pc.onicegatheringstatechange = () => {"
        " document.body.dataset.ice = pc.iceGatheringState; };"
    )
    site = PageSite({"/": (200, {}, html(script))})
    try:
        resp = fetch(site.url("/"))
    finally:
        site.close()
    assert resp.status == 200
    assert forbidden.seen == []


def test_the_job_s_proxy_is_reached_only_at_an_address_the_guard_allows(forbidden):
    site = PageSite({"/": (200, {}, html(""))})
    try:
        with ForwardProxy("127.0.0.2") as proxy:  # listens on 127.0.0.1: not allowed here
            with pytest.raises(outcomes.BlockedAddress, match=r"127\.0\.0\.1"):
                fetch(site.url("/"), visitor=fetching.Visitor(proxy=proxy.url()))
            assert proxy.requests == 0
    finally:
        site.close()
    assert site.served == []


def test_through_the_job_s_proxy_the_target_is_checked_too():
    """The job's SOCKS proxy (allowed here) carries the page; a WebSocket to an address the
    guard refuses is not handed to the proxy."""
    elsewhere = Forbidden(address="127.0.0.3")
    script = f"new WebSocket('ws://127.0.0.3:{elsewhere.port}/socket');"
    site = PageSite({"/": (200, {}, html(script))})
    try:
        with ForwardProxy("127.0.0.2", kind="socks5") as proxy:
            resp = fetch(
                site.url("/"), allow=guard.networks("127.0.0.2/32,127.0.0.1/32"),
                visitor=fetching.Visitor(proxy=proxy.url()),
            )  # fmt: skip
            assert proxy.requests >= 1
    finally:
        site.close()
        elsewhere.close()
    assert resp.status == 200 and site.served[0] == "/"
    assert elsewhere.seen == []


def test_the_door_refuses_a_service_worker_s_script_it_can_read():
    """Behind the context's block: a worker's script asked for over plain HTTP (Chromium marks
    it) is refused by the door itself."""
    site = PageSite({"/sw.js": (200, {"Content-Type": "text/javascript"}, b"")})
    try:
        with render_proxy.Door(render_proxy.Policy(allow=ALLOW), render_tls.Interception()) as door:
            port = int(door.url.rsplit(":", 1)[1])
            answers = []
            for extra in (b"", b"Service-Worker: script\r\n"):
                with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                    conn.sendall(f"GET {site.url('/sw.js')} HTTP/1.1\r\n".encode() + extra
                                 + b"Host: x\r\n\r\n")  # fmt: skip
                    answers.append(conn.makefile("rb").readline())
    finally:
        site.close()
    assert answers[0].startswith(b"HTTP/1.0 200") and answers[1].startswith(b"HTTP/1.1 403")
    assert site.served == ["/sw.js"]  # once, without the mark
    assert [r.reason for r in door.refused] == ["service workers are blocked"]


def test_only_web_urls_are_rendered(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("a file of the worker's machine")
    with pytest.raises(outcomes.InvalidURL, match="only http and https"):
        fetch(secret.as_uri())


def test_the_sandbox_is_on_unless_the_operator_turns_it_off(monkeypatch):
    monkeypatch.setenv("CRAWL_RENDER_NO_SANDBOX", "false")
    options = render.launch_options("http://127.0.0.1:9", "c3BraQ==")
    assert options["chromium_sandbox"] is True and "--no-sandbox" not in options["args"]
    assert "--proxy-server=http://127.0.0.1:9" in options["args"]
    monkeypatch.setenv("CRAWL_RENDER_NO_SANDBOX", "true")
    assert render.launch_options("http://127.0.0.1:9", "c3BraQ==")["chromium_sandbox"] is False
