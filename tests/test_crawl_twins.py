"""CrawlSpiders written as Scrapy's docs write them, run under Scrapy 2.19 and, their imports
changed, on the platform (real workers) over a local documentation site with many links a
page: the same items. The in-process tests of rules are in ``tests/test_crawl_spider.py``."""

from __future__ import annotations

import pytest

from tests import twins
from tests.docsite import DRAFTS, MODULES, TOPICS, DocsSite

pytestmark = pytest.mark.django_db(transaction=True)

EVERY_PAGE = """
import scrapy
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class DocsSpider(CrawlSpider):
    name = "twin_docs_all"
    rules = (Rule(LinkExtractor(), callback="parse_item", follow=True),)

    async def start(self):
        yield scrapy.Request(self.seed)

    def parse_item(self, response):
        yield {"url": response.url, "title": response.css("title::text").get()}
"""


def test_a_crawlspider_following_every_link_gives_scrapys_items(worker_env, tmp_path):
    with DocsSite() as site:
        args = {"seed": site.url("/")}
        scrapy = twins.under_scrapy(EVERY_PAGE, tmp_path, args)
        ours = twins.on_platform(EVERY_PAGE, "twin_docs_all", worker_env, tmp_path, args)
    pages = site.expected_pages() - {site.url("/")}  # the start page: parse_start_url's
    sources = len(TOPICS) + len(DRAFTS) + len(MODULES)  # "Show source": text, no title
    assert len(scrapy.items) == len(pages) + sources
    assert {item["url"] for item in scrapy.items if item["title"]} == pages
    assert twins.same(ours.items) == twins.same(scrapy.items)


RULES = """
from itemloaders.processors import Compose, Join, MapCompose, TakeFirst

import scrapy
from scrapy.linkextractors import LinkExtractor
from scrapy.loader import ItemLoader
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.spiders import CrawlSpider, Rule


class DocPage(scrapy.Item):
    url = scrapy.Field()
    title = scrapy.Field()
    section = scrapy.Field()
    headings = scrapy.Field(output_processor=Join(" / "))
    words = scrapy.Field()
    marked = scrapy.Field()
    deep = scrapy.Field()


class DocLoader(ItemLoader):
    default_item_class = DocPage
    default_output_processor = TakeFirst()
    title_in = MapCompose(str.strip, lambda title: title.removesuffix(" — Docs"))
    headings_in = MapCompose(str.strip, str.lower)
    words_in = MapCompose(lambda text: len(text.split()))
    words_out = Compose(sum)


def old_intro(response):
    return [{"old": response.url, "title": response.css("title::text").get()}]


class DocsRulesSpider(CrawlSpider):
    name = "twin_docs_rules"
    rules = (
        Rule(LinkExtractor(allow=r"/topics/", deny=(r"/v1/", r"/draft-", r"/_sources/")),
             callback="parse_topic", cb_kwargs={"section": "topics"}, follow=True,
             errback="topic_missing", process_request="mark"),
        Rule(LinkExtractor(allow=r"/api/\\w", restrict_css="div.sidebar"), callback="parse_api",
             follow=False, process_links="public_only"),
        Rule(LinkExtractor(allow=r"/v1/topics/intro"), callback=old_intro),
        Rule(LinkExtractor(deny=(r"/topics/", r"/api/\\w", r"/v1/", r"/stable/", r"/_sources/"))),
    )

    async def start(self):
        yield scrapy.Request(self.seed)

    def parse_start_url(self, response):
        return [{"start": response.url, "toc": len(response.css("ul.toctree a"))}]

    def process_results(self, response, results):
        for result in results:
            if not isinstance(result, scrapy.Request):
                result["deep"] = response.meta["depth"] > 0
            yield result

    def mark(self, request, response):
        if "/faq-topic.html" in request.url:
            return None
        request.meta["marked"] = "topics"
        return request

    def public_only(self, links):
        return [link for link in links if not link.url.endswith(("/internal.html", "-api.html"))]

    def parse_topic(self, response, section):
        loader = DocLoader(response=response)
        loader.add_value("url", response.url)
        loader.add_css("title", "title::text")
        loader.add_value("section", section)
        body = loader.nested_css("div.body")
        body.add_xpath("headings", ".//h2/text()")
        body.add_css("words", "p::text")
        loader.add_value("marked", response.meta.get("marked"))
        yield loader.load_item()

    def parse_api(self, response):
        loader = DocLoader(item={"via": response.meta["link_text"]}, response=response)
        loader.add_css("title", "title::text")
        loader.add_value("url", response.url)
        yield loader.load_item()

    def topic_missing(self, failure):
        if failure.check(HttpError):
            yield {"missing": failure.request.url, "status": failure.value.response.status}
"""


def test_a_crawlspider_with_several_rules_and_an_item_loader_gives_scrapys_items(
    worker_env, tmp_path
):
    with DocsSite() as site:
        args = {"seed": site.url("/")}
        scrapy = twins.under_scrapy(RULES, tmp_path, args)
        ours = twins.on_platform(RULES, "twin_docs_rules", worker_env, tmp_path, args)
    kinds = sorted(next(iter(item)) for item in scrapy.items)
    topics = len(TOPICS) - 1  # faq-topic: process_request dropped it
    public = len(MODULES) - 2  # internal, deprecated-api: process_links dropped them
    assert kinds == sorted(["url"] * topics + ["via"] * public + ["old", "missing", "start"])
    intro = next(i for i in scrapy.items if i.get("url") == site.url("/topics/intro.html"))
    assert intro["title"] == "Intro" and intro["marked"] == "topics"
    assert intro["headings"] == "part 0 / part 1 / part 2" and intro["words"] > 30
    assert twins.same(ours.items) == twins.same(scrapy.items)
    assert not any(site.hits[f"/topics/{d}.html"] for d in DRAFTS.values())
