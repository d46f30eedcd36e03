"""The render step: a page fetched by headless Chromium, for sites that block plain clients and
pages whose content and links need JavaScript.

Reads ``CHROMIUM_PATH``, ``RENDER_NO_SANDBOX``, ``RENDER_SOCKET_WAIT_S`` and the fetch settings
(timeouts, deadline, size cap).

Runs in render workers only (``celery ... worker --queues render``), with Playwright for
Python (``requirements-render.txt``) driving the system's Chromium (Debian's ``chromium``
package: the package registries cannot deliver Playwright's own browser builds). One browser
per worker process, started on first use in a thread of its own; one context per page, with
the identity's user agent, extra headers and cookies, so the session is the same one plain
fetches use.

The browser has one door: every request of a page's context (navigation, each redirect hop,
subresources, WebSockets, workers) goes through a forward proxy of ours for that page
(``render_proxy.py``), which resolves each host once, applies the address guard with the job's
policy and connects to the address it checked, chaining to the identity's proxy if it has
one. TLS to sites is the proxy's too, with the fetcher's trust (``render_tls.py``): the browser
accepts the certificates the proxy mints with this process's key (and, besides, only those its
own store trusts), and the proxy checks the site's as the fetcher does. Chromium itself
resolves no name (``--host-resolver-rules``), loopback goes through the proxy too
(``<-loopback>``), WebRTC sends nothing outside it, service workers are blocked, and its
sandbox is on unless the operator sets ``RENDER_NO_SANDBOX``. The rendered DOM is returned
as the body, once the network has been idle for half a second and each WebSocket the page
opened has answered once or closed (``RENDER_SOCKET_WAIT_S`` at most): links come from what
JavaScript built, including what a socket's first message filled in. A screenshot is kept for
review.
Without Playwright or Chromium the step says so (:func:`unavailable`) and the URL goes to
review instead.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from tasks.defaults import setting
from tasks.fetch import fetching, outcomes, render_proxy, render_tls
from tasks.rules import guard, proxy_urls

log = logging.getLogger(__name__)
_local = threading.local()
_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None  # the browser's own thread (made after a fork)
_ARGS = [
    "--headless=new", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run", "--disable-quic",
    # Chromium resolves no name itself: through a proxy it never needs to, and a name it
    # resolved would be one the guard did not see (127.0.0.1 is where our proxies listen).
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--proxy-bypass-list=<-loopback>",  # loopback goes through the proxy like the rest
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",  # WebRTC: proxied TCP only
]  # fmt: skip
_SANDBOX_AS_ROOT = (
    "Chromium's sandbox does not run as root: run the render worker as another user, or set "
    "CRAWL_RENDER_NO_SANDBOX=true (docs/operations.md, Security)"
)


def unavailable() -> str:
    """Why pages cannot be rendered here ('' if they can)."""
    path = setting("CHROMIUM_PATH")
    if not os.access(path, os.X_OK):
        return f"no Chromium at {path} (apt-get install chromium, or set CRAWL_CHROMIUM_PATH)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -r requirements-render.txt)"
    if os.geteuid() == 0 and not setting("RENDER_NO_SANDBOX"):
        return _SANDBOX_AS_ROOT
    return ""


def launch_options(closed_door: str, spki: str) -> dict:
    """Playwright's launch options for the render browser. ``closed_door``: the proxy of any
    context that was not given its own (one that refuses everything). ``spki``: the key of the
    certificates our proxies show the browser (``render_tls.Interception.spki``), accepted
    besides what the browser's store trusts (Playwright's profile directory is the
    ``--user-data-dir`` without which Chromium ignores the flag)."""
    return {
        "executable_path": setting("CHROMIUM_PATH"),
        "args": [
            *_ARGS,
            f"--proxy-server={closed_door}",
            f"--ignore-certificate-errors-spki-list={spki}",
        ],
        "chromium_sandbox": not setting("RENDER_NO_SANDBOX"),  # Playwright's default is off
    }


def _interception() -> render_tls.Interception:
    """The key of this process's browser and its minted certificates (made on first use)."""
    if getattr(_local, "interception", None) is None:
        _local.interception = render_tls.Interception()
    return _local.interception


def _browser():
    browser = getattr(_local, "browser", None)
    if browser is None or not browser.is_connected():
        from playwright.sync_api import sync_playwright

        if getattr(_local, "closed_door", None) is None:
            _local.closed_door = render_proxy.Door(
                render_proxy.Policy(refuse_all=True), _interception()
            )
        _local.playwright = sync_playwright().start()
        browser = _local.browser = _local.playwright.chromium.launch(
            **launch_options(_local.closed_door.url, _interception().spki)
        )
    return browser


def _cookies(visitor: fetching.Visitor, url: str) -> list[dict]:
    host = urlsplit(url).hostname or ""
    return [
        {"name": c.name, "value": c.value or "", "domain": c.domain or host,
         "path": c.path or "/", "secure": bool(c.secure)}
        for c in visitor.cookies
    ]  # fmt: skip


def fetch(
    url: str,
    *,
    user_agent: str,
    limits: fetching.FetchLimits,
    allow: tuple[guard.Network, ...] = (),
    in_scope=lambda u: True,
    visitor: fetching.Visitor | None = None,
) -> fetching.Response:
    """Render ``url`` and return the DOM as the body (the shape of ``fetching.fetch``).

    The browser lives in one thread of its own per process: Playwright's sync API runs an
    event loop in the thread that drives it, and Django refuses database work in a thread
    with a running loop, so the task's thread only waits for the result."""
    visitor = visitor or fetching.Visitor()
    with _lock:
        global _executor
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="render-browser")
    in_context = contextvars.copy_context().run  # its lines carry the page's log fields
    return _executor.submit(in_context, _render, url, user_agent, limits, allow, in_scope,
                            visitor).result()  # fmt: skip


def _render(url, user_agent, limits, allow, in_scope, visitor) -> fetching.Response:
    if urlsplit(url).scheme not in ("http", "https"):  # a file: URL would read this machine
        raise outcomes.InvalidURL(f"only http and https URLs are rendered, not {url[:200]!r}")
    policy = render_proxy.Policy(
        allow=allow, upstream=visitor.proxy,
        timeout=max(limits.connect_timeout, limits.read_timeout), verify=limits.verify,
    )  # fmt: skip
    with render_proxy.Door(policy, _interception()) as door:
        try:
            return _render_through(door, url, user_agent, limits, in_scope, visitor)
        finally:
            if door.refused:
                refused = dict.fromkeys(f"{r.host}:{r.port}: {r.reason}" for r in door.refused)
                log.info("render %s: refused %s", url[:200],
                         "; ".join(proxy_urls.redact(r)[:300] for r in refused))  # fmt: skip


def _outcome_of(refusal: render_proxy.Refusal) -> outcomes.CrawlOutcome:
    kinds = {"blocked": outcomes.BlockedAddress, "unresolved": outcomes.DNSFailure,
             "unreachable": outcomes.ConnectFailed, "proxy": outcomes.ProxyFailed,
             "tls": outcomes.TLSError, "settings": outcomes.InternalError}  # fmt: skip
    return kinds[refusal.kind](proxy_urls.redact(refusal.reason)[:400])


class _Sockets:
    """The page's WebSockets that have neither answered nor closed: network idle does not count
    them, and a page that fills itself in from a socket's first message is not rendered yet."""

    def __init__(self, page) -> None:
        self.waiting: set = set()
        page.on("websocket", self._opened)

    def _opened(self, socket) -> None:
        self.waiting.add(socket)
        for event in ("framereceived", "close", "socketerror"):
            socket.on(event, lambda *_: self.waiting.discard(socket))

    def settle(self, page, seconds: float, deadline: float) -> None:
        """Wait, ``seconds`` at most (and not past ``deadline``, monotonic), for the waiting
        sockets; then, as time allows, one round trip to the page, so that a message's handler
        has run before the DOM is read. All of it is best effort: a page that moves on, breaks
        the evaluation or closes is read as it stands, as it would have been without it."""
        from playwright.sync_api import Error as PlaywrightError

        if not self.waiting:
            return
        until = min(time.monotonic() + seconds, deadline)
        with contextlib.suppress(PlaywrightError):
            while self.waiting and (left := until - time.monotonic()) > 0:
                page.wait_for_timeout(min(50.0, left * 1000))
            if (left := deadline - time.monotonic()) > 0:
                page.wait_for_function("() => true", timeout=min(1000.0, left * 1000))


def _render_through(door, url, user_agent, limits, in_scope, visitor) -> fetching.Response:
    from playwright.sync_api import Error as PlaywrightError

    started = time.monotonic()
    options = {"user_agent": user_agent, "extra_http_headers": visitor.headers or None}
    context = _browser().new_context(
        proxy={"server": door.url}, service_workers="block",
        **{k: v for k, v in options.items() if v},
    )  # fmt: skip
    try:
        if visitor.cookies:
            context.add_cookies(_cookies(visitor, url))
        page = context.new_page()
        hops: list[str] = []  # the main frame's navigations, each redirect hop included
        page.on("request", lambda r: hops.append(r.url) if (
            r.is_navigation_request() and r.frame == page.main_frame) else None)  # fmt: skip
        sockets = _Sockets(page)
        try:
            answer = page.goto(url, timeout=limits.deadline * 1000, wait_until="networkidle")
            sockets.settle(page, setting("RENDER_SOCKET_WAIT_S"), started + limits.deadline)
        except PlaywrightError as exc:
            if (refusal := door.refusal_for(hops[-1] if hops else url)) is not None:
                raise _outcome_of(refusal) from None
            if "Timeout" in str(exc):
                raise outcomes.DeadlineExceeded(
                    f"not rendered after {limits.deadline:g} s"
                ) from None
            why = proxy_urls.redact(str(exc))[:400]  # the proxy's credentials never in a message
            raise outcomes.ProtocolError(f"render failed: {why}") from None
        if answer is None:
            raise outcomes.ProtocolError("render: no answer")
        if (refusal := door.refusal_for(answer.url)) is not None:
            raise _outcome_of(refusal)
        if (left := next((hop for hop in hops if not in_scope(hop)), None)) is not None:
            raise outcomes.OutOfScope(f"rendering left the job's scope for {left}")
        if not in_scope(page.url):
            raise outcomes.OutOfScope(f"rendering left the job's scope for {page.url}")
        failure = outcomes.from_status(answer.status, None)
        body = page.content().encode("utf-8")[: limits.max_bytes]
        screenshot = page.screenshot(type="png")
        for c in context.cookies():
            visitor.set_cookies.set(c["name"], c["value"], domain=c["domain"], path=c["path"])
        if failure is not None:
            failure.headers, failure.body, failure.url = answer.headers, body, page.url
            failure.screenshot = screenshot
            raise failure
        response = fetching.Response(
            url=url, final_url=page.url, status=answer.status, content_type="text/html",
            content_type_header="text/html; charset=utf-8", body=body,
            truncated=len(body) >= limits.max_bytes, elapsed=time.monotonic() - started,
            redirects=hops[1:], headers=answer.headers, screenshot=screenshot,
        )  # fmt: skip
        return response
    finally:
        context.close()
