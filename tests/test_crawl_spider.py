"""CrawlSpider, Rule and ItemLoader in-process: the same spider source, its imports changed as
a user ports it, given the same page, yields to Scrapy 2.19's classes and to ours the same
requests (URL, rule, link text, callback, errback, cb_kwargs) and items; a rule's request
kept as the frontier keeps it finds its rule again in another process. The end-to-end twins
are in ``tests/test_crawl_twins.py``."""

from __future__ import annotations

import asyncio
import inspect
import warnings
from typing import Any

import pytest

from crawlplatform import spiders as ours
from crawlplatform.spiders.settings import Crawler, Settings
from crawlplatform.spiders.utils import arg_to_iter
from tests import twins

PAGE = b"""<!doctype html><html><head><title>Guide</title></head><body>
<nav class="top"><a href="/">Home</a> <a href="/topics/">Topics</a> <a href="/api/">API</a></nav>
<div class="sidebar"><ul>
  <li><a href="/topics/intro.html">Intro</a></li>
  <li><a href="/topics/rules.html">Rules</a></li>
  <li><a href="/api/spider.html">spider</a></li>
  <li><a href="/api/internal.html">internal</a></li>
</ul></div>
<div class="body">
  <p>See <a href="/topics/rules.html">Rules</a> and <a href="/topics/rules.html">the rules</a>,
  <a href="/topics/rules.html#follow">following</a>, <a href="/v1/topics/rules.html">old</a>,
  <a href="../api/spider.html#Spider.parse">parse</a>, <a href="/faq.html" rel="nofollow">FAQ</a>,
  <a href="/_static/logo.png">logo</a>, <a href="mailto:docs@example.com">mail</a>,
  <a href="https://elsewhere.invalid/topics/x.html">elsewhere</a>, <a href="#top">top</a>.</p>
</div></body></html>"""
URL = "http://docs.test/topics/guide.html"

RULES = '''
import asyncio

from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


def faq_page(response, **kwargs):
    return [{"faq": response.url, **kwargs}]


def drop_drafts(request, response):
    if "internal" in request.url:
        return None
    request.meta["from"] = response.url
    return request.replace(priority=5)


class Docs(CrawlSpider):
    name = "docs"
    rules = (
        Rule(LinkExtractor(allow=r"/topics/", deny=r"/v1/"), callback="parse_topic",
             cb_kwargs={"section": "topics"}, follow=True, errback="topic_failed",
             process_links="no_fragments"),
        Rule(LinkExtractor(restrict_css="div.sidebar", allow=r"/api/"), callback="parse_api",
             process_request=drop_drafts),
        Rule(LinkExtractor(allow=r"/api/"), callback="parse_api", follow=True),
        Rule(LinkExtractor(allow=r"/faq"), callback=faq_page, cb_kwargs={"kind": "faq"}),
        Rule(LinkExtractor(deny=(r"/v1/", r"/topics/", r"/api/"))),
    )

    def no_fragments(self, links):
        return [link for link in links if "#" not in link.url]

    def parse_topic(self, response, section):
        yield {"topic": response.url, "section": section,
               "text": response.meta.get("link_text")}

    def parse_api(self, response, **kwargs):
        return {"api": response.url, "kwargs": kwargs}

    def topic_failed(self, failure):
        yield {"failed": failure.request.url, "rule": failure.request.meta["rule"]}


class StartPages(Docs):
    name = "start_pages"

    def parse_start_url(self, response):
        return [{"start": response.url}, {"start_again": response.url}]

    def process_results(self, response, results):
        for one in results:
            one["seen_on"] = response.url
            yield one


class Overrides(Docs):
    """Defines parse (not the default callback of a CrawlSpider, as in Scrapy 2.19) and its own
    parse_with_rules."""

    name = "overrides"
    rules = (Rule(LinkExtractor(allow=r"/faq"), callback="parse"),)

    def parse(self, response):
        yield {"parse": response.url}

    async def parse_with_rules(self, response, callback, cb_kwargs, follow=True):
        yield {"before": response.url}
        async for one in super().parse_with_rules(response, callback, cb_kwargs, follow):
            yield one


class Async(Docs):
    name = "async"
    rules = (Rule(LinkExtractor(allow=r"/topics/"), callback="parse_topic", follow=True),
             Rule(LinkExtractor(allow=r"/api/"), callback="parse_api"))

    async def parse_topic(self, response):
        await asyncio.sleep(0)
        yield {"async": response.url}

    async def parse_api(self, response):
        return [{"awaited": response.url}]
'''


class Side:
    """One side of the comparison: the spider classes of ``RULES`` under Scrapy or ported,
    with their responses, requests and failures."""

    def __init__(self, scrapy: bool) -> None:
        self.scrapy = scrapy
        self.classes: dict[str, Any] = {"__name__": f"crawl_rules_{int(scrapy)}"}
        exec(RULES if scrapy else twins.port(RULES), self.classes)  # noqa: S102

    def spider(self, name: str, settings: dict | None = None) -> Any:
        cls = self.classes[name]
        if self.scrapy:
            from scrapy.utils.test import get_crawler

            return cls.from_crawler(get_crawler(cls, settings or {}))
        return cls.from_crawler(Crawler(Settings(settings or {}), None))

    def response(self, url: str = URL, body: bytes = PAGE, meta: dict | None = None,
                 html: bool = True) -> Any:  # fmt: skip
        if self.scrapy:
            import scrapy
            from scrapy.http import HtmlResponse, TextResponse

            request, cls = scrapy.Request(url, meta=meta), HtmlResponse if html else TextResponse
        else:
            request, cls = (
                ours.Request(url, meta=meta),
                ours.HtmlResponse if html else ours.TextResponse,
            )
        kind = "text/html" if html else "text/plain"
        return cls(url, body=body, headers={"Content-Type": f"{kind}; charset=utf-8"},
                   request=request)  # fmt: skip

    def failure(self, url: str, rule: int) -> Any:
        if self.scrapy:
            from scrapy import Request
            from scrapy.spidermiddlewares.httperror import HttpError
            from twisted.python.failure import Failure

            failure = Failure(HttpError(self.response(url), "Ignoring non-200 response"))
            failure.request = Request(url, meta={"rule": rule})
            return failure
        request = ours.Request(url, meta={"rule": rule})
        return ours.Failure(ours.HttpError(None, "http_4xx"), request, None)


SCRAPY, OURS = Side(scrapy=True), Side(scrapy=False)


def drained(result: Any) -> list:
    """Everything a callback's result yields, as the worker gathers it."""
    if inspect.isasyncgen(result):

        async def collect() -> list:
            return [one async for one in result]

        return asyncio.run(collect())
    if inspect.isawaitable(result):
        return drained(asyncio.run(_awaited(result)))
    return list(arg_to_iter(result))


async def _awaited(result: Any) -> Any:
    return await result


def shape(one: Any) -> Any:
    """A request or item in a form both sides share."""
    if hasattr(one, "url") and hasattr(one, "cb_kwargs"):
        name = lambda f: getattr(f, "__name__", f)  # noqa: E731
        return ("request", one.url, name(one.callback), name(one.errback), dict(one.meta),
                dict(one.cb_kwargs), one.priority)  # fmt: skip
    return ("item", dict(one))


def on_both(name: str, call: str, *args: Any, settings: dict | None = None,
            **response: Any) -> list:  # fmt: skip
    """What ``spider.call(response, *args)`` yields on both sides; asserted equal."""
    out = []
    for side in (SCRAPY, OURS):
        spider = side.spider(name, settings)
        if call == "_errback":
            result = spider._errback(side.failure(*args))
        else:
            result = getattr(spider, call)(side.response(**response))
        out.append([shape(one) for one in drained(result) if one is not None])
    assert out[1] == out[0]
    return out[0]


def test_a_start_page_yields_a_request_per_link_by_the_first_rule_that_finds_it_as_scrapys():
    found = on_both("Docs", "_parse")
    rules = {url: meta["rule"] for _, url, _, _, meta, _, _ in found}
    assert rules["http://docs.test/topics/rules.html"] == 0  # first rule wins, not the last
    assert "http://docs.test/topics/rules.html#follow" not in rules  # process_links dropped it
    assert rules["http://docs.test/api/spider.html"] == 1  # the sidebar's, before rule 2's
    assert rules["http://docs.test/api/spider.html#Spider.parse"] == 2  # another link
    assert "http://docs.test/api/internal.html" not in rules  # rule 1 took it, then dropped it
    assert rules["http://docs.test/faq.html"] == 3 and rules["http://docs.test/"] == 4
    assert not any("/v1/" in url or "logo" in url or "mailto" in url for url in rules)
    texts = [meta["link_text"] for _, url, _, _, meta, _, _ in found
             if url == "http://docs.test/topics/rules.html"]  # fmt: skip
    assert texts == ["Rules"]  # the first of the extractor's links to one URL
    assert {(cb, eb) for _, _, cb, eb, _, _, _ in found} == {("_callback", "_errback")}


def test_a_rule_callback_gets_the_page_with_its_cb_kwargs_and_follows_only_if_told():
    topic = on_both("Docs", "_callback", meta={"rule": 0, "link_text": "Rules"})
    assert topic[0] == ("item", {"topic": URL, "section": "topics", "text": "Rules"})
    assert len(topic) > 5  # follow=True: the page's links
    api = on_both("Docs", "_callback", meta={"rule": 1})
    assert api == [("item", {"api": URL, "kwargs": {}})]  # a callback: follow defaults to False
    faq = on_both("Docs", "_callback", meta={"rule": 3})
    assert faq == [("item", {"faq": URL, "kind": "faq"})]  # a plain function as callback
    assert len(on_both("Docs", "_callback", meta={"rule": 4})) == len(on_both("Docs", "_parse"))


def test_parse_with_rules_takes_the_first_rule_whose_extractor_takes_the_url():
    from tasks.content.tryout import rule_for

    spider = OURS.spider("Docs")
    assert rule_for(spider, "http://docs.test/topics/x.html") == 0
    assert rule_for(spider, "http://docs.test/api/spider.html") == 1  # before the third
    assert rule_for(spider, "http://docs.test/faq.html") == 3  # a function's rule too
    with pytest.raises(ValueError, match="no rule of spider 'docs' takes"):
        rule_for(spider, "http://docs.test/v1/topics/x.html")


def test_follow_defaults_to_true_only_for_a_rule_without_a_callback_as_scrapys():
    from scrapy.spiders import Rule as ScrapyRule

    for kwargs in ({}, {"callback": "x"}, {"callback": "x", "follow": True},
                   {"follow": False}, {"callback": None, "follow": None}):  # fmt: skip
        assert ours.Rule(**kwargs).follow is ScrapyRule(**kwargs).follow, kwargs


def test_parse_start_url_and_process_results_as_scrapys():
    found = on_both("StartPages", "_parse")
    assert found[:2] == [("item", {"start": URL, "seen_on": URL}),
                         ("item", {"start_again": URL, "seen_on": URL})]  # fmt: skip
    assert all(kind == "request" for kind, *_ in found[2:])


def test_a_rules_errback_gets_the_failure_and_a_rule_without_one_yields_nothing():
    url = "http://docs.test/topics/missing.html"
    assert on_both("Docs", "_errback", url, 0) == [("item", {"failed": url, "rule": 0})]
    assert on_both("Docs", "_errback", url, 2) == []


def test_a_page_that_is_no_html_has_no_links_followed():
    assert on_both("Docs", "_parse", html=False, body=b"<a href='/topics/x.html'>x</a>") == []


def test_crawlspider_follow_links_false_follows_no_rules_links_and_warns():
    with pytest.warns(FutureWarning, match="CRAWLSPIDER_FOLLOW_LINKS"):
        OURS.spider("Docs", {"CRAWLSPIDER_FOLLOW_LINKS": False})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = on_both("StartPages", "_parse", settings={"CRAWLSPIDER_FOLLOW_LINKS": "False"})
    assert [kind for kind, *_ in found] == ["item", "item"]


def test_a_spider_may_define_parse_and_its_own_parse_with_rules_as_in_scrapy():
    start = on_both("Overrides", "_parse")
    assert start[0] == ("item", {"before": URL})
    assert [url for _, url, *_ in start[1:]] == ["http://docs.test/faq.html"]
    assert on_both("Overrides", "_callback", meta={"rule": 0}) == [
        ("item", {"before": URL}), ("item", {"parse": URL})]  # fmt: skip


def test_async_callbacks_give_scrapys_results():
    topic = on_both("Async", "_callback", meta={"rule": 0})
    assert topic[0] == ("item", {"async": URL}) and len(topic) > 1
    assert on_both("Async", "_callback", meta={"rule": 1}) == [("item", {"awaited": URL})]


def test_a_page_with_a_plain_callback_is_called_back_without_an_event_loop():
    """A tenth of a millisecond a page: the worker runs an async generator in an event loop
    of its own, a plain generator as it is."""
    spider = OURS.spider("Docs")
    assert inspect.isgenerator(spider._parse(OURS.response()))
    assert inspect.isgenerator(spider._callback(OURS.response(meta={"rule": 0})))
    assert inspect.isasyncgen(OURS.spider("Async")._callback(OURS.response(meta={"rule": 0})))


def test_the_classes_rules_are_left_as_written_each_spider_compiling_its_own_copy():
    spider = OURS.spider("Docs")
    assert OURS.classes["Docs"].rules[0].callback == "parse_topic"
    assert spider._rules[0].callback == spider.parse_topic
    assert spider._rules[0].process_links == spider.no_fragments
    assert spider._rules[1].process_request is OURS.classes["drop_drafts"]


def test_overriding_the_deprecated_parse_response_warns_as_in_scrapy():
    class Old(ours.CrawlSpider):
        name = "old"

        def _parse_response(self, response, callback, cb_kwargs, follow=True):
            return ()

    with pytest.warns(FutureWarning, match="_parse_response"):
        Old()


def test_a_rules_request_as_the_frontier_keeps_it_finds_its_rule_in_another_process():
    """The request is stored with its callback's name and its meta (JSON); a new spider
    object, as another worker makes one, calls back the rule's callback from it."""
    from tasks.content import rows

    first = OURS.spider("Docs")
    request = next(r for r in drained(first._parse(OURS.response()))
                   if r.url.endswith("/topics/rules.html"))  # fmt: skip
    kept = rows.record(request, first)
    assert (kept["callback"], kept["errback"]) == ("_callback", "_errback")
    assert kept["meta"] == {"rule": 0, "link_text": "Rules"}
    again = rows.request_of(request.url, kept)
    page = ours.HtmlResponse(request.url, body=PAGE, request=again)
    other = OURS.spider("Docs")
    found = drained(getattr(other, again.callback_name)(page, **again.cb_kwargs))
    assert found[0] == {"topic": request.url, "section": "topics", "text": "Rules"}


# ItemLoader: Scrapy's loader made from a response.

LOADER = """
from itemloaders.processors import Compose, Identity, Join, MapCompose, TakeFirst

import scrapy
from scrapy.loader import ItemLoader


class Page(scrapy.Item):
    title = scrapy.Field()
    links = scrapy.Field(output_processor=Identity())
    words = scrapy.Field()
    nav = scrapy.Field()
    url = scrapy.Field()


class PageLoader(ItemLoader):
    default_item_class = Page
    default_output_processor = TakeFirst()
    title_in = MapCompose(str.strip, str.upper)
    links_in = MapCompose(lambda href: href.split("#")[0])
    words_in = MapCompose(lambda text: len(text.split()))
    words_out = Compose(sum)
    nav_out = Join(" | ")


def load(response):
    loader = PageLoader(response=response)
    loader.add_css("title", "title::text")
    loader.add_xpath("links", "//div[@class='sidebar']//a/@href")
    loader.add_css("words", "div.body p ::text")
    nav = loader.nested_css("nav.top")
    nav.add_css("nav", "a::text")
    loader.add_value("url", loader.context["response"].url)
    return loader.load_item()


def plain(response):
    loader = ItemLoader(response=response)
    return type(loader.item).__name__, loader.selector is not None
"""


def test_an_item_loader_fills_an_item_from_a_response_as_scrapys():
    loaded = []
    for side in (SCRAPY, OURS):
        space: dict[str, Any] = {"__name__": "loader_twin"}
        exec(LOADER if side.scrapy else twins.port(LOADER), space)  # noqa: S102
        item = space["load"](side.response())
        assert type(item).__name__ == "Page"
        loaded.append((dict(item), space["plain"](side.response())))
    assert loaded[1] == loaded[0]
    assert loaded[0][0]["title"] == "GUIDE" and loaded[0][0]["nav"] == "Home | Topics | API"
    assert loaded[0][1] == ("Item", True)


def test_an_item_loaders_selector_is_scrapys_in_the_responses_tree_and_none_for_a_binary_one():
    page = OURS.response()
    loader = ours.ItemLoader(response=page)
    assert isinstance(loader.selector, ours.Selector) and loader.selector.response is page
    assert loader.selector.root is page.selector.root  # the page is parsed once
    assert loader.context["response"] is page
    text = ours.TextResponse(URL, body=b'{"a": 1}', headers={"Content-Type": "text/plain"})
    assert ours.ItemLoader(response=text).selector.type == ours.Selector(text).type == "json"
    binary = ours.Response("http://docs.test/logo.png", body=b"\x89PNG")
    assert ours.ItemLoader(response=binary).selector is None
    with pytest.raises(RuntimeError):
        ours.ItemLoader(response=binary).add_css("x", "p")
    given = ours.Selector(text="<p>x</p>")
    assert ours.ItemLoader(selector=given, response=page).selector is given
