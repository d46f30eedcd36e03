"""The render step: a page fetched by headless Chromium, for sites that block plain clients and
pages whose content and links need JavaScript.

Reads ``CHROMIUM_PATH`` and the fetch settings (deadline, size cap).

Runs in render workers only (``celery ... worker --queues render``), with Playwright for
Python (``requirements-render.txt``) driving the system's Chromium (Debian's ``chromium``
package: the package registries cannot deliver Playwright's own browser builds). One browser
per worker process, started on first use in a thread of its own; one context per page, with
the identity's user agent, proxy, extra headers and cookies, so the session is the same one
plain fetches use.
Every request the page makes passes the address guard (our own resolution of its host:
Chromium resolves again to connect). The rendered DOM is returned as the body, so links come
from what JavaScript built; a screenshot is kept for review. Without Playwright or Chromium
the step says so (:func:`unavailable`) and the URL goes to review instead.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from tasks.defaults import setting
from tasks.fetch import fetching, outcomes, transport
from tasks.rules import guard, proxy_urls

log = logging.getLogger(__name__)
_local = threading.local()
_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None  # the browser's own thread (made after a fork)
_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run", "--disable-quic",
    "--proxy-bypass-list=<-loopback>",  # a job's proxy carries every request, loopback too
]  # fmt: skip


def unavailable() -> str:
    """Why pages cannot be rendered here ('' if they can)."""
    path = setting("CHROMIUM_PATH")
    if not os.access(path, os.X_OK):
        return f"no Chromium at {path} (apt-get install chromium, or set CRAWL_CHROMIUM_PATH)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -r requirements-render.txt)"
    return ""


def _browser():
    browser = getattr(_local, "browser", None)
    if browser is None or not browser.is_connected():
        from playwright.sync_api import sync_playwright

        _local.playwright = sync_playwright().start()
        browser = _local.browser = _local.playwright.chromium.launch(
            executable_path=setting("CHROMIUM_PATH"), args=_ARGS
        )
    return browser


def _cookies(visitor: fetching.Visitor, url: str) -> list[dict]:
    host = urlsplit(url).hostname or ""
    return [
        {"name": c.name, "value": c.value or "", "domain": c.domain or host,
         "path": c.path or "/", "secure": bool(c.secure)}
        for c in visitor.cookies
    ]  # fmt: skip


def _guarded(allow: tuple[guard.Network, ...]):
    def route(r) -> None:
        try:
            transport.check_target(r.request.url, allow)
        except guard.BlockedAddress as exc:
            log.info("render: blocked %s: %s", r.request.url[:200], exc)
            r.abort("blockedbyclient")
            return
        r.continue_()

    return route


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
    return _executor.submit(_render, url, user_agent, limits, allow, in_scope, visitor).result()


def _render(url, user_agent, limits, allow, in_scope, visitor) -> fetching.Response:
    from playwright.sync_api import Error as PlaywrightError

    try:
        transport.check_target(url, allow)
    except guard.BlockedAddress as exc:
        raise outcomes.BlockedAddress(str(exc)) from None
    started = time.monotonic()
    options = {"user_agent": user_agent, "extra_http_headers": visitor.headers or None}
    if visitor.proxy:
        parts = urlsplit(visitor.proxy)
        options["proxy"] = {
            "server": f"{parts.scheme}://{parts.hostname}:{parts.port}",
            "username": parts.username or "",
            "password": parts.password or "",
        }
    context = _browser().new_context(**{k: v for k, v in options.items() if v})
    try:
        if visitor.cookies:
            context.add_cookies(_cookies(visitor, url))
        context.route("**/*", _guarded(allow))
        page = context.new_page()
        try:
            answer = page.goto(url, timeout=limits.deadline * 1000, wait_until="networkidle")
        except PlaywrightError as exc:
            if "Timeout" in str(exc):
                raise outcomes.DeadlineExceeded(
                    f"not rendered after {limits.deadline:g} s"
                ) from None
            why = proxy_urls.redact(str(exc))[:400]  # the proxy's credentials never in a message
            raise outcomes.ProtocolError(f"render failed: {why}") from None
        if answer is None:
            raise outcomes.ProtocolError("render: no answer")
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
            headers=answer.headers, screenshot=screenshot,
        )  # fmt: skip
        return response
    finally:
        context.close()
