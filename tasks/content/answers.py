"""Which answers a spider request's callback takes, as Scrapy's ``HttpErrorMiddleware`` and
``RedirectMiddleware`` decide (``handle_httpstatus_list``, ``handle_httpstatus_all``,
``HTTPERROR_ALLOWED_CODES``, ``HTTPERROR_ALLOW_ALL``, ``dont_redirect``): what its fetch must
know beforehand (``takes``), whether an error answer goes to it (``handles``), and a 3xx no
redirect followed made an error answer (``unfollowed``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any, NamedTuple

from crawlplatform.spiders import Spider
from crawlplatform.spiders.scrapysettings import on
from tasks.content import spiders
from tasks.fetch import fetching, outcomes
from web.models import CrawlJob

log = logging.getLogger(__name__)

HTTP_ERRORS = (outcomes.ClientError, outcomes.ServerError, outcomes.TooManyRequests,
               outcomes.RequestTimeout, outcomes.RedirectNotFollowed)  # fmt: skip
REDIRECTS = (301, 302, 303, 307, 308)


def unfollowed(resp: fetching.Response) -> outcomes.RedirectNotFollowed | None:
    """A spider request's answer that is not 2xx and that the fetch did not follow (a 3xx
    with no ``Location``, a 300, 304, 305 or 306): as after Scrapy's ``RedirectMiddleware``,
    it is an HTTP error answer, which goes to the callback only if it takes the status, else
    to the errback (``HttpError``), else nowhere. None for a 2xx answer."""
    if 200 <= resp.status < 300:
        return None
    answer = outcomes.RedirectNotFollowed(f"HTTP {resp.status}", status=resp.status)
    answer.url, answer.method, answer.headers = resp.final_url, resp.method, dict(resp.headers)
    answer.body, answer.truncated = resp.body, resp.truncated
    answer.redirects, answer.redirect_statuses = list(resp.redirects), list(resp.redirect_statuses)
    return answer



class Takes(NamedTuple):
    """What a spider request's fetch must know of its callback beforehand."""

    errors: bool  # it may take an error answer (``handles``): the body is read whole
    redirects: tuple[int, ...]  # the redirect statuses it takes as its answer, not followed
    statuses: Collection[int] | None = ()  # the error statuses it takes (None: all)
    cookies: bool = True  # the spider keeps cookies (``COOKIES_ENABLED``, Scrapy's default)

    def status(self, status: int) -> bool:
        """Whether the callback takes an answer of ``status`` (not 2xx)."""
        return self.statuses is None or status in self.statuses


def takes(job: CrawlJob, kept: dict | None) -> Takes:
    """What the request's callback takes (one look at the spider's class per fetch). The
    redirects are kept as Scrapy's ``RedirectMiddleware`` decides: all of them with
    ``dont_redirect`` or ``handle_httpstatus_all`` in its ``meta`` (or ``REDIRECT_ENABLED``
    off in the spider's ``custom_settings``), else those in the request's or the spider's
    ``handle_httpstatus_list``."""
    kept = kept or {}
    try:
        cls = spiders.load(job.spider)
    except spiders.SpiderUnavailable:
        return Takes(False, ())  # the callback's side says so, with the reason
    taken = _taken(cls, kept, quiet=True)
    errors = taken is None or bool(taken)
    meta, custom = kept.get("meta") or {}, cls.custom_settings or {}
    cookies = on(custom.get("COOKIES_ENABLED", True))
    if (not on(custom.get("REDIRECT_ENABLED", True)) or meta.get("dont_redirect")
            or meta.get("handle_httpstatus_all")):  # fmt: skip
        return Takes(errors, REDIRECTS, taken, cookies)
    asked = _statuses(meta.get("handle_httpstatus_list", ()), "", quiet=True)
    own = _statuses(getattr(cls, "handle_httpstatus_list", None) or (), "", quiet=True)
    return Takes(errors, tuple(s for s in REDIRECTS if s in asked or s in own), taken, cookies)


def handles(spider: Spider, kept: dict, status: int | None) -> bool:
    """Whether the request's callback takes an answer of ``status`` (not 2xx)."""
    taken = _taken(spider, kept)
    return taken is None or status in taken


def _taken(holder: Spider | type[Spider], kept: dict,
           quiet: bool = False) -> Collection[int] | None:  # fmt: skip
    """The error statuses a request's callback takes (None: all), as Scrapy's
    ``HttpErrorMiddleware`` decides: the request's ``meta`` (``handle_httpstatus_all``, or
    its ``handle_httpstatus_list``), else ``HTTPERROR_ALLOW_ALL`` in the spider's
    ``custom_settings``, else the spider's ``handle_httpstatus_list``, else
    ``HTTPERROR_ALLOWED_CODES`` in its ``custom_settings``. A list that is no list of
    statuses takes none (logged unless ``quiet``)."""
    meta, custom = kept.get("meta") or {}, holder.custom_settings or {}
    if meta.get("handle_httpstatus_all"):
        return None
    if "handle_httpstatus_list" in meta:
        return _statuses(meta["handle_httpstatus_list"], "meta handle_httpstatus_list", quiet)
    if custom.get("HTTPERROR_ALLOW_ALL"):
        return None
    own = getattr(holder, "handle_httpstatus_list", None)
    if own is None:
        return _statuses(custom.get("HTTPERROR_ALLOWED_CODES", ()), "HTTPERROR_ALLOWED_CODES",
                         quiet)  # fmt: skip
    return _statuses(own, f"spider {holder.name}'s handle_httpstatus_list", quiet)


def _statuses(listed: Any, what: str, quiet: bool) -> Collection[int]:
    if isinstance(listed, list | tuple | set | frozenset | range):
        return listed
    if not quiet:
        log.error("%s must be a list of HTTP statuses, not %.100r: it takes none", what, listed)
    return ()
