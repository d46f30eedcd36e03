"""Spiders for sites whose links redirect or fail (tests/test_spiders.py): an item for every
answer they are called back with."""

from __future__ import annotations

from crawlplatform.spiders import (
    ConnectError,
    DownloadConnectionRefusedError,
    FormRequest,
    HttpError,
    IgnoreRequest,
    Request,
    Spider,
    TimeoutError,
)


class Redirects(Spider):
    name = "redirects"
    base = ""  # -a base=URL

    def start_requests(self):
        yield Request(self.base + "/")
        yield Request(self.base + "/r/e", dont_filter=True, cb_kwargs={"again": True})
        yield Request(self.base + "/r/h")  # to /t/8, queued for another callback: its own
        yield Request(self.base + "/t/8#top", callback=self.parse_other)  # called back as /t/8

    def parse(self, response, again=False):
        yield {"url": response.url, "again": again}
        yield from response.follow_all(css="a")
        yield response.follow("/r/g", callback=self.parse_other)

    def parse_other(self, response):
        yield {"url": response.url, "other": True}


def http_error(failure) -> bool:
    """Scrapy's ``HttpError``, as an errback may tell it: by ``check``, by class and by its
    message."""
    return (bool(failure.check(HttpError)) and isinstance(failure.value, HttpError)
            and failure.getErrorMessage() == "Ignoring non-200 response")  # fmt: skip


class Statuses(Spider):
    """Error answers its callbacks take, as Scrapy's ``HttpErrorMiddleware`` lets them."""

    name = "statuses"
    base = ""  # -a base=URL
    handle_httpstatus_list = [404]
    custom_settings = {"RETRY_MAX_ATTEMPTS": 2}

    def start_requests(self):
        yield Request(self.base + "/missing/1")  # the spider's list
        yield Request(self.base + "/broken/1", meta={"handle_httpstatus_list": [500]})
        yield Request(self.base + "/broken/2", meta={"handle_httpstatus_all": True})
        yield Request(self.base + "/missing/2", meta={"handle_httpstatus_list": []},
                      errback=self.failed)  # the request's list wins: not this one
        yield Request(self.base + "/broken/3")  # neither: the URL fails
        yield Request(self.base + "/broken/4", meta={"dont_retry": True},
                      errback=self.failed)  # its errback after one attempt
        yield Request(self.base + "/broken/5", meta={"max_retry_times": 0},
                      errback=self.failed)  # the same, by Scrapy's other key
        yield Request(self.base + "/slow/1", meta={"download_timeout": 0.5, "dont_retry": True},
                      errback=self.failed)  # the site answers in 2 s: too late
        # Statuses the anti-bot ladder takes for blocks: the callback's where it asks for them
        yield Request(self.base + "/refused/403", meta={"handle_httpstatus_list": [403]})
        yield Request(self.base + "/refused/429", meta={"handle_httpstatus_list": [429]})
        yield Request(self.base + "/refused/503", meta={"handle_httpstatus_all": True})

    def parse(self, response):
        yield {"url": response.url, "status": response.status,
               "h1": response.css("h1::text").get(),
               "retry_times": response.meta.get("retry_times")}

    def failed(self, failure):
        yield {"url": failure.request.url, "http_error": http_error(failure),
               "timeout": bool(failure.check(TimeoutError)),
               "raised": type(failure.value).__name__,
               "retry_times": failure.request.meta.get("retry_times"),
               "sent": [failure.request.meta.get(key) for key in (
                   "depth", "download_slot", "download_timeout", "is_start_request")]}  # fmt: skip


class RedirectedErrors(Spider):
    """Requests whose redirects end on an error answer, seen by their errbacks as under Scrapy:
    a redirect to a URL the crawl requested as its own is dropped (Scrapy's duplicate filter),
    one to a new URL brings its errback that URL's answer, and marks that URL as seen."""

    name = "redirected_errors"
    base = ""  # -a base=URL
    custom_settings = {"REDIRECT_MAX_TIMES": 3}

    def start_requests(self):
        yield Request(self.base + "/r/m0", errback=self.failed)  # a 4th hop: IgnoreRequest
        yield Request(self.base + "/gone/1", errback=self.failed)
        yield Request(self.base + "/r/x", errback=self.failed)  # to /gone/1: dropped
        yield Request(self.base + "/r/y", errback=self.failed)  # to /gone/2, new: its errback
        yield Request(self.base + "/r/loop1", errback=self.failed)  # back to itself: dropped
        yield Request(self.base + "/r/off", errback=self.failed)  # off the domains: dropped
        yield Request(self.base + "/r/refused", errback=self.failed)  # the hop's failure

    def failed(self, failure):
        answer = getattr(failure.value, "response", None)
        yield {"url": failure.request.url, "status": answer.status if answer else None,
               "raised": type(failure.value).__name__,
               "redirect_urls": failure.request.meta.get("redirect_urls", [])}  # fmt: skip
        if failure.request.meta.get("redirect_urls"):  # its target again: seen, dropped
            yield Request(failure.request.url, errback=self.failed)


class Unfollowed(Spider):
    """Redirects its requests take as their answer, as Scrapy's ``RedirectMiddleware`` leaves
    them (``dont_redirect``, ``handle_httpstatus_all``, a status in a
    ``handle_httpstatus_list``; a 3xx it never follows), to its callback where they are
    handled, else its errback."""

    name = "unfollowed"
    base = ""  # -a base=URL
    handle_httpstatus_list = [301]

    def start_requests(self):
        yield Request(self.base + "/r/c1",
                      meta={"dont_redirect": True, "handle_httpstatus_list": [302]})  # fmt: skip
        yield Request(self.base + "/r/c2", meta={"dont_redirect": True}, errback=self.failed)
        yield Request(self.base + "/r/e", meta={"handle_httpstatus_all": True})
        yield Request(self.base + "/r/a")  # a 301: in the spider's list
        yield Request(self.base + "/r/g")  # a 302: followed
        # 3xx answers no redirect follows: HTTP errors, as after Scrapy's RedirectMiddleware
        yield Request(self.base + "/s/300", meta={"handle_httpstatus_list": [300]})
        yield Request(self.base + "/s/304", errback=self.failed)
        yield Request(self.base + "/s/302")  # no Location: neither callback nor errback
        # a redirect to no http(s) URL: the answer as it came; to no URL Scrapy can request
        # (no "://"): Request's ValueError
        yield Request(self.base + "/r/n", errback=self.failed)
        yield Request(self.base + "/r/m", errback=self.failed)

    def parse(self, response):
        yield {"url": response.url, "status": response.status,
               "location": (response.headers.get("Location") or b"").decode()}  # fmt: skip

    def failed(self, failure):
        response = getattr(failure.value, "response", None)
        yield {"url": failure.request.url, "http_error": http_error(failure),
               "status": response and response.status,
               "raised": type(failure.value).__name__}  # fmt: skip


class Unredirected(Unfollowed):
    """``Unfollowed`` with Scrapy's redirect, meta refresh and retry middlewares off: no
    redirect is followed (its 3xx answers are HTTP errors), nothing is retried."""

    name = "unredirected"
    handle_httpstatus_list = []
    custom_settings = {"REDIRECT_ENABLED": False, "METAREFRESH_ENABLED": False,
                       "RETRY_ENABLED": False, "RETRY_TIMES": 5}  # fmt: skip

    def start_requests(self):
        yield Request(self.base + "/r/a", errback=self.failed)  # a 301
        yield Request(self.base + "/r/g", meta={"handle_httpstatus_list": [302]})


class Unreached(Spider):
    """Requests that end before any answer, each seen by its errback as under Scrapy:
    robots.txt forbids them (``IgnoreRequest``), or their host refuses connections (the
    first ones) and its circuit opens (the rest: ``ConnectError`` and Scrapy 2.19's
    ``DownloadConnectionRefusedError`` all)."""

    name = "unreached"
    base = ""  # -a base=URL: a site whose robots.txt disallows /private
    dead = ""  # -a dead=URL: a port nothing listens on
    custom_settings = {"ROBOTSTXT_OBEY": True, "DEPTH_LIMIT": 4}

    def start_requests(self):
        yield Request(self.base + "/private/1", errback=self.failed)
        yield Request(self.base + "/open/1")
        for n in range(3):
            yield Request(f"{self.dead}/x/{n}", errback=self.failed)

    def parse(self, response):
        yield {"url": response.url, "status": response.status}
        yield response.follow("/private/2", errback=self.failed)  # its claim's gate ends it
        yield response.follow("/private/3")  # no errback: skipped as it is yielded
        yield response.follow("/private/4", meta={"dont_obey_robotstxt": True})  # fetched

    def failed(self, failure):
        yield {"url": failure.request.url, "ignored": bool(failure.check(IgnoreRequest)),
               "connect": bool(failure.check(ConnectError)),
               "refused": bool(failure.check(DownloadConnectionRefusedError)),
               "sent": [failure.request.meta.get(key) for key in (
                   "depth", "download_slot", "download_timeout", "is_start_request")]}  # fmt: skip


class Refreshed(Spider):
    """Pages that send the browser on with ``<meta http-equiv="refresh">``: followed as
    Scrapy's ``MetaRefreshMiddleware`` follows them, the callback called on where they lead."""

    name = "refreshed"
    base = ""  # -a base=URL

    def start_requests(self):
        yield Request(self.base + "/refresh/now", cb_kwargs={"tag": "now"})
        yield Request(self.base + "/refresh/late", cb_kwargs={"tag": "late"})  # 200 s: stays
        yield Request(self.base + "/refresh/quiet", meta={"dont_redirect": True},
                      cb_kwargs={"tag": "quiet"})  # fmt: skip

    def parse(self, response, tag):
        yield {"url": response.url, "tag": tag,
               "redirect_urls": response.meta.get("redirect_urls", [])}  # fmt: skip


class Unrefreshed(Refreshed):
    """``Refreshed`` with Scrapy's ``MetaRefreshMiddleware`` off: every page is its own."""

    name = "unrefreshed"
    custom_settings = {"METAREFRESH_ENABLED": False}


class PostedRedirects(Spider):
    """A POST that a 303 turns into a GET of its target is that GET to Scrapy's duplicate
    filter: a GET redirected to that target later is dropped, and a POST redirected to a page
    fetched before is dropped."""

    name = "posted_redirects"
    base = ""  # -a base=URL

    def start_requests(self):
        yield FormRequest(self.base + "/post/1", formdata={"q": "1"}, cb_kwargs={"then": "/r/1"})
        yield Request(self.base + "/t/2", cb_kwargs={"then": "/post/2"})

    def parse(self, response, then=None):
        yield {"url": response.url, "method": response.request.method}
        if then == "/post/2":  # after /t/2 was called back: a POST that a 303 sends to it
            yield FormRequest(self.base + then, formdata={"q": "2"})
        elif then:  # after the POST reached /t/1: a GET that a 302 sends to it
            yield Request(self.base + then)


class Depths(Spider):
    """Depths as Scrapy 2.19's ``DepthMiddleware`` gives them under ``DEPTH_LIMIT`` 1: a meta
    refresh keeps its page's depth (a redirect's request), ``depth_reset`` starts again at 0,
    and so does a request an errback yields after a failure with no answer."""

    name = "depths"
    base = ""  # -a base=URL
    dead = ""  # -a dead=URL: a port nothing listens on
    custom_settings = {"DEPTH_LIMIT": 1}

    def start_requests(self):
        yield Request(self.base + "/refresh")  # refreshes to /landing
        yield Request(self.dead + "/x", errback=self.failed)

    def parse(self, response):
        yield {"url": response.url, "depth": response.meta["depth"],
               "start": response.meta.get("is_start_request", False)}  # fmt: skip
        yield from response.follow_all(css="a")
        if response.url.endswith("/a"):
            yield Request(self.base + "/reset", meta={"depth_reset": True})

    def failed(self, failure):
        yield Request(self.base + "/after")
