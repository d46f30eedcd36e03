"""``CrawlSpider`` and ``Rule``, as Scrapy 2.19's: a spider that follows a site's links by
rules and calls back the pages they lead to.

A request naming no callback (``start_urls``, ``Request(url)``) is called back through the
spider's ``_parse`` (``tasks/content/callbacks.py``), which this class sets, as Scrapy's does:
``parse_start_url`` sees the page, then every rule's link extractor reads it in turn, and each
link no rule before took becomes a request of that rule (``process_links`` and
``process_request`` may change or drop them). A rule's request is called back through
``_callback`` (a failure through ``_errback``), which finds the rule again by its index in
``meta["rule"]``: the request is stored with its frontier row, so the rule survives a restart
as any callback does. Its callback (a method, its name, or any callable) sees the page with the
rule's ``cb_kwargs``; the page's links are followed if the rule says ``follow`` (by default,
when it has no callback). ``parse`` is not the default callback here, as in Scrapy: a spider
may define it and name it in a rule.

Reads the spider's ``settings``: ``CRAWLSPIDER_FOLLOW_LINKS`` (Scrapy's, deprecated there for
``follow=False`` on the rules; True unless said otherwise: False follows no rule's links).
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from crawlplatform.spiders.http import Request
from crawlplatform.spiders.linkextractors import LinkExtractor
from crawlplatform.spiders.response import Failure, HtmlResponse, Response
from crawlplatform.spiders.settings import Crawler
from crawlplatform.spiders.spider import Spider
from crawlplatform.spiders.utils import arg_to_iter

if TYPE_CHECKING:
    from crawlplatform.spiders.link import Link

_T = TypeVar("_T")
ProcessLinks = Callable[[list["Link"]], list["Link"]]
ProcessRequest = Callable[[Request, Response], Request | None]


def _identity(x: _T) -> _T:
    return x


def _identity_process_request(request: Request, response: Response) -> Request | None:
    return request


def _get_method(method: Callable[..., Any] | str | None, spider: Spider) -> Any:
    """``method`` itself if it is callable, the spider's method of that name if it is one
    (None if the spider has none, as in Scrapy), else None."""
    if callable(method):
        return method
    if isinstance(method, str):
        return getattr(spider, method, None)
    return None


_default_link_extractor = LinkExtractor()


class Rule:
    """How a ``CrawlSpider`` treats one kind of link: which links (``link_extractor``; every
    link by default), the ``callback`` of their pages with its ``cb_kwargs``, whether their
    pages' links are followed (``follow``: by default when there is no callback), and hooks
    that may change what is requested (``process_links(links)``, ``process_request(request,
    response)``) or handle a failure (``errback(failure)``); each a callable or the name of
    a method of the spider."""

    def __init__(
        self,
        link_extractor: LinkExtractor | None = None,
        callback: Callable[..., Any] | str | None = None,
        cb_kwargs: dict[str, Any] | None = None,
        follow: bool | None = None,
        process_links: ProcessLinks | str | None = None,
        process_request: ProcessRequest | str | None = None,
        errback: Callable[[Failure], Any] | str | None = None,
    ) -> None:
        self.link_extractor = link_extractor or _default_link_extractor
        self.callback = callback
        self.errback = errback
        self.cb_kwargs: dict[str, Any] = cb_kwargs or {}
        self.process_links = process_links or _identity
        self.process_request = process_request or _identity_process_request
        self.follow: bool = follow if follow is not None else not callback

    def _compile(self, spider: Spider) -> None:
        """Names made the spider's methods (a copy of the rule per spider: ``rules`` is the
        class's)."""
        self.callback = _get_method(self.callback, spider)
        self.errback = _get_method(self.errback, spider)
        self.process_links = _get_method(self.process_links, spider)
        self.process_request = _get_method(self.process_request, spider)


class CrawlSpider(Spider):
    """A spider that crawls a site by its ``rules`` (``Rule``): the first rule whose link
    extractor finds a link on a page is the one that requests it."""

    rules: Sequence[Rule] = ()
    _rules: list[Rule]
    _follow_links: bool = True  # CRAWLSPIDER_FOLLOW_LINKS, read by from_crawler

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self._compile_rules()
        if type(self)._parse_response is not CrawlSpider._parse_response:
            cls = type(self)
            warnings.warn(
                f"The CrawlSpider._parse_response method, which the {cls.__module__}."
                f"{cls.__qualname__} class overrides, is deprecated: it will be removed in "
                "future Scrapy releases. Please override the CrawlSpider.parse_with_rules "
                "method instead.",
                FutureWarning,
                stacklevel=2,
            )

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> Spider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider._follow_links = crawler.settings.getbool("CRAWLSPIDER_FOLLOW_LINKS", True)
        if not spider._follow_links:
            warnings.warn(
                "The CRAWLSPIDER_FOLLOW_LINKS setting is deprecated. You can set "
                "follow=False in your rules to achieve the same effect.",
                FutureWarning,
                stacklevel=2,
            )
        return spider

    def _parse(self, response: Response, **kwargs: Any) -> Any:
        return self._with_rules(response, self.parse_start_url, kwargs, True)

    def parse_start_url(self, response: Response, **kwargs: Any) -> Any:
        """What a start page (a request naming no callback) yields itself, before its links
        are followed: nothing, unless a spider says otherwise."""
        return ()

    def process_results(self, response: Response, results: Iterable[Any]) -> Iterable[Any]:
        """What a rule's callback (or ``parse_start_url``) yielded, to change before it is
        kept: returned as it is unless a spider says otherwise."""
        return results

    def _build_request(self, rule_index: int, link: Link) -> Request:
        return Request(url=link.url, callback=self._callback, errback=self._errback,
                       meta={"rule": rule_index, "link_text": link.text})  # fmt: skip

    def _requests_to_follow(self, response: Response) -> Iterable[Request | None]:
        """A request for each link of an HTML page, by the first rule that finds it (the
        same link found again by a later rule is left out)."""
        if not isinstance(response, HtmlResponse):
            return
        seen: set[Link] = set()
        last = len(self._rules) - 1
        for rule_index, rule in enumerate(self._rules):
            # A link is hashed only where a rule before or after may find it too: a spider of
            # one rule hashes none (two hashes a link, a twentieth of its cost).
            found = rule.link_extractor.extract_links(response)
            links = [lnk for lnk in found if lnk not in seen] if seen else list(found)
            for link in rule.process_links(links):
                if rule_index != last:
                    seen.add(link)
                request = self._build_request(rule_index, link)
                yield rule.process_request(request, response)

    def _callback(self, response: Response, **cb_kwargs: Any) -> Any:
        rule = self._rules[response.meta["rule"]]
        return self._with_rules(response, rule.callback, {**rule.cb_kwargs, **cb_kwargs},
                                rule.follow)  # fmt: skip

    def _errback(self, failure: Failure) -> Iterable[Any]:
        rule = self._rules[failure.request.meta["rule"]]
        return self._handle_failure(failure, rule.errback)

    def _with_rules(self, response: Response, callback: Callable[..., Any] | None,
                    cb_kwargs: dict[str, Any], follow: bool) -> Any:  # fmt: skip
        """What ``parse_with_rules`` yields, without an event loop (a tenth of a millisecond
        a page) where neither the callback nor a ``parse_with_rules`` of the spider's own
        is async."""
        if type(self).parse_with_rules is not CrawlSpider.parse_with_rules:
            return self.parse_with_rules(response, callback, cb_kwargs, follow)
        results = (callback(response, **cb_kwargs) or ()) if callback else None
        if isinstance(results, AsyncIterator) or inspect.isawaitable(results):
            return self._awaited(response, results, follow)
        return self._results_and_links(response, results, follow)

    async def parse_with_rules(self, response: Response, callback: Callable[..., Any] | None,
                               cb_kwargs: dict[str, Any],
                               follow: bool = True) -> AsyncIterator[Any]:  # fmt: skip
        """What ``callback`` yields on the page (through ``process_results``), then, if
        ``follow``, the requests of its links by the rules."""
        results = (callback(response, **cb_kwargs) or ()) if callback else None
        async for one in self._awaited(response, results, follow):
            yield one

    async def _awaited(self, response: Response, results: Any,
                       follow: bool) -> AsyncIterator[Any]:  # fmt: skip
        if isinstance(results, AsyncIterator):
            results = [one async for one in results]
        elif isinstance(results, Awaitable):
            results = await results
        for one in self._results_and_links(response, results, follow):
            yield one

    def _results_and_links(self, response: Response, results: Any,
                           follow: bool) -> Iterable[Any]:  # fmt: skip
        """What a callback returned (``results``; None: there was none), through
        ``process_results``, then the page's links if ``follow``."""
        if results is not None:
            yield from arg_to_iter(self.process_results(response, results))
        if follow and self._follow_links:
            yield from self._requests_to_follow(response)

    def _parse_response(self, response: Response, callback: Callable[..., Any] | None,
                        cb_kwargs: dict[str, Any],
                        follow: bool = True) -> AsyncIterator[Any]:  # fmt: skip
        warnings.warn(
            "The CrawlSpider._parse_response method is deprecated: it will be removed in "
            "future Scrapy releases. Please use the CrawlSpider.parse_with_rules method "
            "instead.",
            FutureWarning,
            stacklevel=2,
        )
        return self.parse_with_rules(response, callback, cb_kwargs, follow)

    def _handle_failure(self, failure: Failure,
                        errback: Callable[[Failure], Any] | None) -> Iterable[Any]:  # fmt: skip
        if errback:
            yield from arg_to_iter(errback(failure) or ())

    def _compile_rules(self) -> None:
        self._rules = []
        for rule in self.rules:
            copied_rule = copy.copy(rule)
            copied_rule._compile(self)
            self._rules.append(copied_rule)
