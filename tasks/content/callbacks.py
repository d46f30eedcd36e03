"""A spider's side of one fetched page: the callback run on the response, bounded in time and
in what it yields; the items through the pipelines; the requests turned into frontier rows;
and the page committed with them (``tasks/frontier/yields.py``), with what they changed in the
job's stats (``stats.py``). The page's signals are sent here (``response_received`` before
the callback, ``request_scheduled``) and in ``items.py`` (the item signals).

Reads ``SPIDER_CALLBACK_TIMEOUT_S``, ``SPIDER_MAX_YIELDS``, ``SPIDER_TRACEBACK_LINES`` and
the job's depth limit.

What a callback yields becomes frontier rows as ``tasks/content/rows.py`` keeps them. A
callback that raises ends its URL as ``spider_error`` with the exception and the last lines
of its traceback; one that runs too long, as ``spider_timeout`` (its thread is left to finish
on its own: Python cannot stop it; the worker thread's callbacks run on a thread of their
own, ``_Runner``, a new one after a timeout). Neither is retried unless the request's
``meta`` says ``retry_on_error``.
"""

from __future__ import annotations

import contextvars
import inspect
import ipaddress
import logging
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple
from urllib.parse import urldefrag, urlsplit

from lxml import etree

from crawlplatform.spiders import CloseSpider, Failure, Request, Response, Spider, loop
from crawlplatform.spiders.responsetypes import class_for
from crawlplatform.spiders.scrapysettings import on
from tasks import broker
from tasks.content import answers, pages, pipelines, refresh, rows, spiders, stats
from tasks.content import items as itempipes
from tasks.content.links import JobCache, in_scope
from tasks.defaults import setting
from tasks.fetch import fetching, outcomes, robots
from tasks.frontier.claims import Claim
from tasks.frontier.db import with_retries
from tasks.frontier.retries import ends
from tasks.frontier.transitions import (
    ROBOTS_FORBIDDEN,
    duplicate_redirect,
    record_failure,
    redirect_target_free,
    redirect_target_seen,
)
from tasks.frontier.yields import (
    NewItem,
    NewRequest,
    Redirect,
    close_crawl,
    record_reached,
    record_spider_failure,
    record_spider_page,
)
from web.models import CrawlJob, URLState

log = logging.getLogger(__name__)
DEFAULT_CALLBACK = "_parse"  # a request naming none is called back as in Scrapy: parse, by default
RETRY_ON_ERROR = "retry_on_error"  # meta key: a callback that raises is tried again (fetch too)
CLOSESPIDER_ITEMCOUNT = "closespider_itemcount"  # the reason a run ended by its item count


class Yielded(NamedTuple):
    items: list[Any]
    requests: list[Request]
    closing: str | None = None  # the callback raised CloseSpider with this reason
    raised: outcomes.SpiderError | None = None  # it raised this after yielding the rest


def _left(deadline: float) -> float:
    """The seconds a coroutine of the callback may still run (a moment, past its time)."""
    return max(0.1, deadline - time.monotonic())


def _collect(result: Any, deadline: float, cap: int, into: list) -> None:
    """Everything a callback's result yields, in order (generators, async generators,
    coroutines, a single item or request, or None)."""
    if result is None:
        return
    if inspect.isawaitable(result) and not inspect.isasyncgen(result):
        _collect(loop.run(result, _left(deadline)), deadline, cap, into)
        return
    if inspect.isasyncgen(result):

        async def drain() -> None:
            async for one in result:
                keep_yielded(one, deadline, cap, into)

        loop.run(drain(), _left(deadline))
        return
    if isinstance(result, Request) or itempipes.is_item(result):
        keep_yielded(result, deadline, cap, into)
        return
    if isinstance(result, Iterable) and not isinstance(result, str | bytes):
        for one in result:
            keep_yielded(one, deadline, cap, into)
        return
    keep_yielded(result, deadline, cap, into)  # not a request or item: logged and left out


def keep_yielded(one: Any, deadline: float, cap: int, into: list) -> None:
    if time.monotonic() > deadline:
        raise outcomes.SpiderTimeout("the callback ran past SPIDER_CALLBACK_TIMEOUT_S")
    if one is None:
        return
    into.append(one)
    if len(into) > cap:
        raise ValueError(f"the callback yielded more than SPIDER_MAX_YIELDS ({cap})")


def spider_error(exc: BaseException, lines: int) -> outcomes.SpiderError:
    text = "".join(traceback.format_exception(exc)).rstrip().splitlines()
    head = f"{type(exc).__name__}: {exc}"
    return outcomes.SpiderError("\n".join([head, *text[-lines:]])[:2000])


class _Runner:
    """The thread that runs the callbacks of one worker thread, one at a time: a callback
    runs apart, so that it can be bounded in time, without a thread started for each page;
    in the calling thread's context (the page's stats, ``stats.bound``)."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="spider-callbacks", daemon=True).start()

    def _serve(self) -> None:
        while True:
            context, run, done = self._calls.get()
            context.run(run)
            done.release()

    def run(self, call: Any, timeout: float) -> bool:
        """Run ``call`` on this runner's thread; whether it ended within ``timeout``. The call
        releases a lock taken for it (an Event's condition costs twice as much a page)."""
        done = threading.Lock()
        done.acquire()
        self._calls.put((contextvars.copy_context(), call, done))  # the page's log fields, stats
        return done.acquire(timeout=timeout)


_runners = threading.local()


def _forget_runners() -> None:  # a forked process has none of its parent's threads
    global _runners
    _runners = threading.local()


os.register_at_fork(after_in_child=_forget_runners)


def call(spider: Spider, name: str, response: Any, kwargs: dict, job: CrawlJob) -> Yielded:
    """Run ``spider.name(response, **kwargs)`` (an errback: ``(failure)``) and gather what it
    yields, within ``SPIDER_CALLBACK_TIMEOUT_S``; raises SpiderTimeout past it. A callback that
    raises gives what it yielded before, with the SpiderError (``raised``), as Scrapy keeps
    what a generator yielded before its exception. A callback that runs past its time keeps
    its thread (Python cannot stop it): the calling thread takes a new one for its next
    callbacks."""
    timeout, cap = setting("SPIDER_CALLBACK_TIMEOUT_S", job), setting("SPIDER_MAX_YIELDS", job)
    deadline = time.monotonic() + timeout
    found: list[Any] = []
    error: list[BaseException] = []

    def run() -> None:  # user code only: this thread never opens a database connection
        try:
            _collect(getattr(spider, name)(response, **kwargs), deadline, cap, found)
        except BaseException as exc:  # user code: whatever it raises is the URL's outcome
            error.append(exc)

    runner = getattr(_runners, "runner", None) or _Runner()
    _runners.runner = runner
    if not runner.run(run, timeout):
        _runners.runner = None
        raise outcomes.SpiderTimeout(f"{name} still running after {timeout:g} s")
    closing = None
    if error and isinstance(error[0], CloseSpider):  # what it yielded before is kept
        closing = str(error.pop().reason) or "cancelled"  # Scrapy's default reason
        log.info("job=%s: callback %s on %r closes the crawl: %s", job.pk, name, response,
                 closing)  # fmt: skip
    raised = None
    if error:
        if isinstance(error[0], outcomes.SpiderTimeout):
            raise error[0]
        log.error("job=%s: callback %s raised on %r", job.pk, name, response,
                  exc_info=error[0])  # fmt: skip
        raised = spider_error(error[0], setting("SPIDER_TRACEBACK_LINES"))
        for key in ("count", type(error[0]).__name__):  # Scrapy's counts, kept with the URL
            spider.crawler.stats.inc_value(f"spider_exceptions/{key}")
    items, requests = [], []
    for one in found:  # anything but a request goes to the pipelines, as in Scrapy 2.19
        (requests if isinstance(one, Request) else items).append(one)
    if closing is not None:
        requests = []  # the crawl ends: nothing new is scheduled, as in Scrapy
    return Yielded(items, requests, closing, raised)


def response_of(resp: fetching.Response, request: Request, depth: int = 0,
                deadline: float | None = None, start: bool | None = None) -> Response:  # fmt: skip
    """What a callback sees of a fetched answer: the class Scrapy gives it (``HtmlResponse``,
    ``XmlResponse``, ...: ``crawlplatform/spiders/responsetypes.py``), its URL without a
    fragment, as Scrapy's download handler gives it; its ``meta`` has what Scrapy's
    middlewares and downloader put there: ``depth``, ``download_latency``, ``download_slot``
    (the host), ``download_timeout`` (the request's own, else the job's ``deadline``),
    ``is_start_request`` for a start request (``start``; None: at depth 0) and, after redirects,
    ``redirect_urls``, ``redirect_times`` and ``redirect_reasons``, added to those the request
    carried (a meta refresh's). After redirects its ``request`` is the last hop's, as Scrapy's
    ``RedirectMiddleware`` makes it: the target's URL, a GET where a redirect turned a POST
    into one."""
    meta = sent_meta(request, depth, deadline, start=start)
    meta.setdefault("depth", 0)  # a start request's, as Scrapy's DepthMiddleware sets it
    meta["download_latency"] = resp.elapsed
    request = _redirected(request, resp)
    for name, value in resp.http.get("request") or ():  # as it went out, as Scrapy's has them
        request.headers.setdefault(name, value)
    headers = resp.http.get("response") or list(resp.headers.items())
    encoding = ", ".join(v for k, v in headers if k.lower() == "content-encoding")
    left = fetching.left_encoded(encoding)
    if encoding:  # what the fetch undid is gone from the headers, as Scrapy's middleware does
        headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
        headers += [("Content-Encoding", coding) for coding in left]
    url = urldefrag(resp.final_url)[0]
    disposition = next((v for k, v in headers if k.lower() == "content-disposition"), "")
    # An encoding left on the body: Scrapy's class comes from the URL and the body instead.
    content_type = "" if left else resp.content_type_header
    cls = class_for(content_type, resp.body, url, disposition)
    peer = resp.http.get("ip")
    return cls(url, status=resp.status, headers=headers, body=resp.body, request=request,
               protocol=resp.http.get("protocol"),
               ip_address=ipaddress.ip_address(peer) if peer else None)  # fmt: skip


def sent_meta(request: Request, depth: int, deadline: float | None,
              downloading: bool = True, start: bool | None = None) -> dict:  # fmt: skip
    """``request.meta`` with what Scrapy's middlewares put in it on its way: ``depth`` (beyond
    the start) and ``is_start_request`` (a start request: ``start``, None: at depth 0); if it
    went on to the download, ``download_slot`` (the host, or what the meta carried) and
    ``download_timeout`` (the request's own, else the job's ``deadline``, marked as filled
    in: ``rows.FilledTimeout``)."""
    meta = request.meta
    if start is None:
        start = depth == 0
    if start:
        meta.setdefault("is_start_request", True)
    else:
        meta["depth"] = depth
    if downloading:
        meta.setdefault("download_slot", urlsplit(request.url).hostname or "")
        if deadline is not None:
            meta.setdefault("download_timeout", rows.FilledTimeout(deadline))
    return meta


def _redirected(request: Request, resp: fetching.Response | outcomes.CrawlOutcome) -> Request:
    """The request of the last hop of ``resp``'s redirects (an answer's, or a failure's that
    came after them): its URL, its ``meta``'s ``redirect_urls``, ``redirect_times`` and
    ``redirect_reasons`` added to those it carried (a meta refresh's), and a GET without the
    body and the body's headers where a redirect turned the request into one."""
    if not resp.redirects:
        return request
    meta = request.meta
    meta["redirect_urls"] = [*meta.get("redirect_urls", []), request.url,
                             *resp.redirects[:-1]]  # fmt: skip
    meta["redirect_times"] = meta.get("redirect_times", 0) + len(resp.redirects)
    if len(resp.redirect_statuses) == len(resp.redirects):
        meta["redirect_reasons"] = [*meta.get("redirect_reasons", []),
                                    *resp.redirect_statuses]  # fmt: skip
    redirected = request.replace(url=resp.redirects[-1])
    if resp.method and resp.method != request.method:
        redirected = redirected.replace(method=resp.method, body=b"")
        for name in fetching.BODY_HEADERS:
            redirected.headers.pop(name, None)
    return redirected


def new_requests(claimed: Claim, cache: JobCache, spider: Spider, requests: list[Request],
                 scheduled: Callable[[Request], bool],
                 depth: int | None = None) -> list[NewRequest]:  # fmt: skip
    """The frontier rows of what a callback yielded: in the job's scope and depth, each once,
    those robots.txt forbids entering skipped (unless they have an errback: their claim's
    robots.txt gate ends them, and the errback sees it, as Scrapy's ``IgnoreRequest``). A
    request that cannot be kept fails the URL. ``scheduled`` sends ``request_scheduled`` for
    each request in scope, before duplicates are dropped, as Scrapy's engine sends it before
    its scheduler's filter; False leaves the request out.

    A request's depth is the page's plus one, or 0 with ``depth_reset`` in its ``meta``
    (Scrapy 2.18's ``DepthMiddleware``, which takes the key out), unless ``depth`` gives it:
    a meta refresh's request is its page's, as a redirect's is; an errback's after a failure
    with no answer is 0, as Scrapy's skips that middleware. One beyond the job's depth is
    left out."""
    job = claimed.job
    out: dict[str, NewRequest] = {}
    judged: dict[str, str] = {}  # row key -> its URL, for the robots.txt this worker holds
    for n, request in enumerate(requests):
        reset = request.meta.pop("depth_reset", False)
        own = depth if depth is not None else 0 if reset else claimed.url.depth + 1
        if own > job.max_depth:
            continue  # as Scrapy's DepthMiddleware drops it
        canonical = in_scope(cache, request.url,
                             rows.leaves_domains(request.dont_filter, request.meta))  # fmt: skip
        if not canonical:
            continue  # off the job's domains or patterns, as Scrapy's offsite filter drops it
        if not scheduled(request):
            continue  # a request_scheduled handler raised IgnoreRequest
        if rows.plain_get(request) and (canonical in out or canonical in cache.committed):
            continue  # yielded before on this page, or already in the frontier
        try:
            kept = rows.record(request, spider, restarted=own == 0)
        except Exception as exc:  # what the spider put in it: its error, not the worker's
            raise outcomes.SpiderError(f"{type(exc).__name__}: {exc}"[:2000]) from None
        unique = f"{claimed.url.pk}.{n}" if request.dont_filter else ""
        row_key = rows.key(canonical, kept, unique)
        if row_key in out:
            continue  # the first of the same requests is the one kept
        if job.obey_robots and not kept["errback"] and not rows.ignores_robots(request.meta):
            judged[row_key] = canonical
        out[row_key] = NewRequest(row_key, rows.stored(kept, row_key), None, rows.rank(request),
                                  own)  # fmt: skip
    refused = robots.forbidden(job, judged.values())
    return [r._replace(skip=ROBOTS_FORBIDDEN) if judged.get(r.key) in refused else r
            for r in out.values()]  # fmt: skip


def _with_spider(claimed: Claim, work: Callable[[Spider, itempipes.Pipelines], str],
                 unavailable: outcomes.CrawlOutcome | None) -> str:  # fmt: skip
    """``work(spider, pipelines)`` with the job's spider and this process's pipelines of its
    run held until it returns. If either cannot be had (a broken spider or pipeline: this
    worker cannot run it), the URL ends with ``unavailable``, or as SpiderUnavailable."""
    job = claimed.job
    try:
        spider = spiders.for_job(job)
        held = pipelines.take(claimed, spider)
    except Exception as exc:  # user code, or its import
        log.exception("job=%s: spider %r unavailable", job.pk, job.spider)
        return record_failure(claimed, unavailable or outcomes.SpiderUnavailable(
            f"{type(exc).__name__}: {exc}"[:2000]))  # fmt: skip
    try:
        return work(spider, held.pipes)
    finally:
        pipelines.give_back(held)


def store(claimed: Claim, cache: JobCache, resp: fetching.Response) -> str:
    """Run the URL's callback on its response and commit the page with what it yielded."""
    return _with_spider(claimed, lambda spider, pipes: _store(claimed, cache, resp, spider,
                                                              pipes), None)  # fmt: skip


def _request_of(claimed: Claim) -> Request:
    """The request the claimed row stands for; after retries, its ``meta``'s ``retry_times``
    says how many, as Scrapy's ``RetryMiddleware`` counts them (a deferral uses no attempt)."""
    request = rows.request_of(claimed.url.url, claimed.url.request, claimed.url.priority)
    if claimed.attempt > 1:
        request.meta["retry_times"] = claimed.attempt - 1
    return request


def _store(claimed: Claim, cache: JobCache, resp: fetching.Response, spider: Spider,
           pipes: itempipes.Pipelines) -> str:  # fmt: skip
    job = claimed.job
    request = _request_of(claimed)
    redirect = _redirect(claimed, cache, resp, request)
    if redirect and not redirect_target_free(claimed, redirect.target, redirect.take_queued):
        return duplicate_redirect(claimed, redirect.target, resp.status)  # no callback to run
    response = response_of(resp, request, claimed.url.depth, setting("FETCH_DEADLINE_S", job),
                           rows.started(claimed.url.depth, claimed.url.request))  # fmt: skip
    with stats.bound(stats.Pending(job.pk)) as changed:  # committed with the page, or never
        try:
            refreshed = refresh.meta_refresh(
                response, response.request, setting("FETCH_MAX_REDIRECTS", job),
                on((spider.custom_settings or {}).get("METAREFRESH_ENABLED", True)))
            if refreshed is not None:  # as a redirect: no callback on this page
                yielded = Yielded([], [refreshed])
            else:
                pipes.received(response)
                yielded = call(spider, request.callback_name or DEFAULT_CALLBACK, response,
                               request.cb_kwargs, job)  # fmt: skip
            if yielded.raised is not None:
                yielded.raised.status = resp.status  # answered: counted as Scrapy counts it
                if request.meta.get(RETRY_ON_ERROR):
                    raise yielded.raised  # fetched and called again, to the cap: nothing kept
            new = new_requests(claimed, cache, spider, yielded.requests, pipes.scheduled,
                               claimed.url.depth if refreshed is not None else None)  # fmt: skip
        except (outcomes.SpiderError, outcomes.SpiderTimeout) as failure:
            if request.meta.get(RETRY_ON_ERROR):
                failure.retryable = True  # the spider asks: fetched and called again, to the cap
            return record_failure(claimed, failure)
        kept = [NewItem(*pipes.keep(item, response)) for item in yielded.items]
    if yielded.raised is not None:  # what it yielded before the raise, with the URL's failure
        state = with_retries(lambda: record_spider_failure(
            claimed, yielded.raised, new, kept, spider.name, yielded.closing, changed.rows()))
        return _counted(spider, changed, state)
    title = page_title(response)[: setting("TITLE_MAX_CHARS", job)]
    page = pages.page_row(claimed, resp, title, {})
    state = with_retries(lambda: record_spider_page(claimed, page, new, kept, spider.name,
                                                    redirect, yielded.closing,
                                                    changed.rows()))  # fmt: skip
    _counted(spider, changed, state)
    if state == URLState.DONE and yielded.closing is None:
        _enough_items(claimed, spider, kept)
    for request in new:  # in the frontier now: this process sends them no more
        cache.committed.put(request.key)
    return state


def _enough_items(claimed: Claim, spider: Spider, kept: list[NewItem]) -> None:
    """The spider's ``CLOSESPIDER_ITEMCOUNT``: once the run has scraped that many items, the
    crawl ends as its page's ``CloseSpider`` ends it (reason ``closespider_itemcount``); pages
    in flight still add theirs, as Scrapy's do. Counted in Redis after each page's commit, so a
    page run again is not counted twice."""
    most = (spider.custom_settings or {}).get("CLOSESPIDER_ITEMCOUNT")
    scraped = sum(1 for item in kept if not item.dropped)
    if not most or not scraped:
        return
    key = f"crawl:items:{claimed.job.pk}:{claimed.run}"
    pipe = broker.client().pipeline()
    pipe.incrby(key, scraped)
    pipe.expire(key, 7 * 86400)
    if pipe.execute()[0] >= int(most):
        with_retries(lambda: close_crawl(claimed, CLOSESPIDER_ITEMCOUNT))


def _counted(spider: Spider, changed: stats.Pending, state: str) -> str:
    """``state``, the URL's end that wrote what its page ``changed`` in the job's stats (one
    skipped, as a redirect to a page seen, wrote none): this process's later reads count it at
    once (``JobStats.committed``)."""
    committed = getattr(spider.crawler.stats, "committed", None)
    if committed is not None and state != URLState.SKIPPED:
        committed(changed)
    return state


def _redirect(claimed: Claim, cache: JobCache, resp: fetching.Response,
              request: Request) -> Redirect | None:  # fmt: skip
    """Where the request's redirects led, if its page is to be stored once: a GET without a
    body, or a request a redirect turned into one (Scrapy's filter sees that GET), not
    ``dont_filter`` (whose target's key is its canonical URL, as its own is), that ended on
    another URL of the job's scope. A queued row of the target may be taken only by a plain
    row (a GET for ``parse``), which runs the callback it would have run."""
    became_get = resp.method == "GET" and request.method != "GET" and not request.dont_filter
    if resp.final_url == claimed.url.url or not (rows.plain_get(request) or became_get):
        return None
    target = in_scope(cache, resp.final_url)
    if not target or target == claimed.url.url:
        return None
    return Redirect(target, take_queued=claimed.url.request is None)


_FIRST_TITLE = etree.XPath("descendant::title[1]")  # an evaluation at a time (lxml's lock)


def page_title(response: Response) -> str:
    """The page's title as a crawl's page has it (the first ``<title>``'s text, its spaces
    collapsed), if the callback parsed the page: read from that tree, stopping at the first
    (``css("title")``, or lxml's ``iter("title")``, walks the whole page: a fifth of a
    millisecond on a docs page, against 4 µs; 1 µs compiled once)."""
    if response._selector is None or response._selector.type == "json":
        return ""
    found = _FIRST_TITLE(response._selector.root)  # libxml2 stops at it
    return " ".join("".join(found[0].itertext()).split()) if found else ""


def for_the_spider(claimed: Claim, outcome: outcomes.CrawlOutcome) -> bool:
    """Whether a spider request's ``outcome`` may be the spider's to see, once it ends the
    URL: the request has an errback, or the outcome is an HTTP error answer, which a callback
    may ask for (``handle_httpstatus_list``)."""
    errback = (claimed.url.request or {}).get("errback")
    return bool(errback or isinstance(outcome, answers.HTTP_ERRORS))


def failed(claimed: Claim, cache: JobCache, outcome: outcomes.CrawlOutcome) -> str:
    """A spider request ended with ``outcome``. If it ends the URL: an HTTP error answer that
    the request or spider handles (``handles``) goes to the callback as any answer; else, if
    the request has an errback, the errback runs on it and what it yields commits with the
    URL's failure (an errback that raises is logged; the URL keeps its own outcome)."""
    if not ends(claimed, outcome):
        return record_failure(claimed, outcome)
    return _with_spider(claimed, lambda spider, pipes: _failed(claimed, cache, outcome, spider,
                                                               pipes), outcome)  # fmt: skip


# A redirect back to a hop already taken, or off the job's domains: Scrapy's duplicate and
# offsite filters drop the redirected request before its download, and no errback hears of
# it (unless the request is dont_filter, which both filters let through).
_FILTERED = (outcomes.RedirectLoop, outcomes.OutOfScope)


def _failed(claimed: Claim, cache: JobCache, outcome: outcomes.CrawlOutcome, spider: Spider,
            pipes: itempipes.Pipelines) -> str:  # fmt: skip
    kept = claimed.url.request or {}
    if isinstance(outcome, answers.HTTP_ERRORS) and answers.handles(spider, kept, outcome.status):
        return _store(claimed, cache, _answer(claimed, outcome), spider, pipes)
    reached = _reached(claimed, cache, outcome)
    if reached and redirect_target_seen(claimed, reached):
        return duplicate_redirect(claimed, reached, outcome.status)
    filtered = isinstance(outcome, _FILTERED) and not kept.get("dont_filter")
    if kept.get("errback") and not filtered:
        return _errback(claimed, cache, outcome, spider, pipes, reached)
    if isinstance(outcome, answers.HTTP_ERRORS):
        return _unhandled(claimed, outcome, spider, pipes, reached)
    return _record_failed(claimed, outcome, reached)


def _unhandled(claimed: Claim, outcome: outcomes.CrawlOutcome, spider: Spider,
               pipes: itempipes.Pipelines, reached: str | None) -> str:  # fmt: skip
    """An HTTP error answer that neither a callback nor an errback takes: ``response_received``
    hears it all the same, as Scrapy's engine sends it for every answer (the response made
    only if a handler listens), and what its handlers change commits with the URL's end."""
    with stats.bound(stats.Pending(claimed.job.pk)) as changed:
        pipes.received(lambda: response_of(_answer(claimed, outcome), _request_of(claimed),
                                           claimed.url.depth))  # fmt: skip
    counted = changed.rows()
    if not counted:
        return _record_failed(claimed, outcome, reached)
    return _counted(spider, changed, with_retries(lambda: record_spider_failure(
        claimed, outcome, [], [], spider.name, None, counted, reached)))


def _record_failed(claimed: Claim, outcome: outcomes.CrawlOutcome, reached: str | None) -> str:
    """The URL's failure, with the URL its redirects reached marked as seen (``_reached``)."""
    if reached:
        return with_retries(lambda: record_reached(claimed, outcome, reached))
    return record_failure(claimed, outcome)


def _reached(claimed: Claim, cache: JobCache, outcome: outcomes.CrawlOutcome) -> str | None:
    """The URL of the job a failed request's redirects led to, where the failure came, for a
    request Scrapy's duplicate filter would have seen there (a GET without a body, not
    ``dont_filter``). If the frontier holds it as its own, Scrapy's filter drops the redirect:
    neither the failure nor an errback is this request's. Else it is, and the URL is marked
    as seen (``record_reached``)."""
    if not outcome.url:
        return None
    redirect = _redirect(claimed, cache, _answer(claimed, outcome), _request_of(claimed))
    return redirect.target if redirect else None


def _answer(claimed: Claim, outcome: outcomes.CrawlOutcome) -> fetching.Response:
    """An HTTP error's answer (its headers and body, kept with the outcome, and the redirects
    before it) as a response."""
    kept = claimed.url.request or {}
    url = kept.get("url") or claimed.url.url
    header = next((v for k, v in outcome.headers.items() if k.lower() == "content-type"), "")
    return fetching.Response(url=url, final_url=outcome.url or url, status=outcome.status or 0,
                             content_type=header.split(";", 1)[0].strip().lower(),
                             content_type_header=header, body=outcome.body,
                             truncated=outcome.truncated, elapsed=0.0,
                             redirects=list(outcome.redirects),
                             redirect_statuses=list(outcome.redirect_statuses),
                             method=outcome.method or kept.get("method", "GET"),
                             headers=dict(outcome.headers))  # fmt: skip


def _errback(claimed: Claim, cache: JobCache, outcome: outcomes.CrawlOutcome, spider: Spider,
             pipes: itempipes.Pipelines, reached: str | None) -> str:  # fmt: skip
    job, kept = claimed.job, claimed.url.request or {}
    request = _request_of(claimed)
    answer, deadline = None, setting("FETCH_DEADLINE_S", job)
    depth, start = claimed.url.depth, rows.started(claimed.url.depth, kept)
    if outcome.status is not None:  # an HTTP error: failure.value.response
        answer = response_of(_answer(claimed, outcome), request, depth, deadline, start)
    else:  # robots.txt's refusal is Scrapy's IgnoreRequest, raised before the download
        sent_meta(request, depth, deadline, not isinstance(outcome, outcomes.RobotsDisallowed),
                  start)  # fmt: skip
        request = _redirected(request, outcome)  # a hop's failure: the hop's request
    with stats.bound(stats.Pending(job.pk)) as changed:  # committed with the URL's end
        try:
            if answer is not None:
                pipes.received(answer)
            failure = Failure(outcome, request if answer is None else answer.request, answer)
            yielded = call(spider, kept["errback"], failure, {}, job)  # a raise is logged there
            new = new_requests(claimed, cache, spider, yielded.requests, pipes.scheduled,
                               None if answer is not None else 0)  # fmt: skip
        except (outcomes.SpiderError, outcomes.SpiderTimeout) as exc:
            log.warning("job=%s url=%s: errback failed: %s", job.pk, claimed.url.url, exc)
            return _record_failed(claimed, outcome, reached)
        items = [NewItem(*pipes.keep(item, answer)) for item in yielded.items]
    return _counted(spider, changed, with_retries(lambda: record_spider_failure(
        claimed, outcome, new, items, spider.name, yielded.closing, changed.rows(), reached)))
