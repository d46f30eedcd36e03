"""XMLFeedSpider and CSVFeedSpider: spiders written as Scrapy's docs write them give, with
their imports changed, Scrapy 2.19's items on the platform (real workers, a local site of
feeds served as sites serve them); in-process, the same responses give the same results to
Scrapy's classes and to ours."""

from __future__ import annotations

import pytest

from crawlplatform import spiders as ours
from tests import twins
from tests.feedsite import FeedSite

RSS = '''
import scrapy
from scrapy.spiders import XMLFeedSpider


class NewsSpider(XMLFeedSpider):
    name = "twin_feed_rss"
    start_urls = ["BASE/feeds/rss.xml", "BASE/feeds/latin.xml", "BASE/feeds/octet.xml"]
    iterator = "iternodes"  # This is actually unnecessary, since it's the default value
    itertag = "item"
    namespaces = [
        ("dc", "http://purl.org/dc/elements/1.1/"),
        ("content", "http://purl.org/rss/1.0/modules/content/"),
        ("media", "http://search.yahoo.com/mrss/"),
    ]

    def adapt_response(self, response):
        return response.replace(body=response.body.replace(b"&amp; more", b"and more"))

    def parse_node(self, response, node):
        self.logger.info("Hi, this is a <%s> node!: %s", self.itertag, "".join(node.getall()))
        item = {
            "title": node.xpath("title/text()").get(),
            "link": node.xpath("link/text()").get(),
            "guid": node.xpath("guid/text()").get(),
            "author": node.xpath("dc:creator/text()").get(),
            "categories": node.xpath("category/text()").getall(),
            "body": node.xpath("content:encoded/text()").get(),
            "thumbnail": node.xpath("media:thumbnail/@url").get(),
            "description": node.xpath("description/text()").get(),
        }
        yield item
        if item["link"] and item["link"].endswith(("/1", "/2", "/3")):
            yield scrapy.Request(item["link"], callback=self.parse_story)

    def process_results(self, response, results):
        for result in results:
            if isinstance(result, dict):
                result["feed"] = response.url
            yield result

    def parse_story(self, response):
        yield {"story": response.url, "title": response.css("title::text").get()}
'''

ATOM = '''
from scrapy.spiders import XMLFeedSpider


class AtomSpider(XMLFeedSpider):
    name = "twin_feed_atom"
    start_urls = ["BASE/feeds/atom.xml", "BASE/feeds/atom-octet.xml"]
    iterator = "xml"
    itertag = "atom:entry"
    namespaces = [("atom", "http://www.w3.org/2005/Atom")]

    def parse_node(self, response, node):
        return {
            "title": node.xpath("atom:title/text()").get(),
            "link": node.xpath("atom:link/@href").get(),
            "author": node.xpath("atom:author/atom:name/text()").get(),
            "updated": node.xpath("atom:updated/text()").get(),
        }
'''

HTML = '''
from scrapy.spiders import XMLFeedSpider


class DealsSpider(XMLFeedSpider):
    name = "twin_feed_html"
    start_urls = ["BASE/feeds/listing.html"]
    iterator = "html"
    itertag = "li"

    def parse_node(self, response, node):
        return {
            "deal": node.css("b::text").get(),
            "price": node.css(".price::text").get(),
            "link": response.urljoin(node.css("a::attr(href)").get()),
            "text": node.xpath("normalize-space(.)").get(),
        }
'''

CSV = '''
from scrapy.spiders import CSVFeedSpider


class ProductsSpider(CSVFeedSpider):
    name = "twin_csv_products"
    start_urls = ["BASE/csv/products.csv", "BASE/csv/products-octet.csv",
                  "BASE/csv/latin.csv", "BASE/csv/cp1252.csv"]

    def parse_row(self, response, row):
        return {**row, "file": response.url.rsplit("/", 1)[1]}
'''

CSV_DOCS = '''
from scrapy import Field, Item
from scrapy.spiders import CSVFeedSpider


class TestItem(Item):
    id = Field()
    name = Field()
    description = Field()


class MySpider(CSVFeedSpider):
    name = "twin_csv_docs"
    start_urls = ["BASE/csv/semicolon.csv"]
    delimiter = ";"
    quotechar = "'"
    headers = ["id", "name", "description"]

    def parse_row(self, response, row):
        self.logger.info("Hi, this is a row!: %r", row)
        item = TestItem()
        item["id"] = row["id"]
        item["name"] = row["name"]
        item["description"] = row["description"]
        return item
'''


def _twins(template: str, name: str, worker_env: dict, tmp_path) -> tuple[list, list]:
    with FeedSite() as site:
        source = template.replace("BASE", site.base)
        scrapy = twins.under_scrapy(source, tmp_path)
        platform = twins.on_platform(source, name, worker_env, tmp_path)
    return scrapy.items, platform.items


@pytest.mark.django_db(transaction=True)
def test_an_rss_feed_spider_with_namespaces_gives_scrapys_items(worker_env, tmp_path):
    scrapy, platform = _twins(RSS, "twin_feed_rss", worker_env, tmp_path)
    titles = {item.get("title") for item in scrapy}
    assert {"Story 1 and more", "Octet story 8 and more", "Über café", "Señor"} <= titles
    assert len(scrapy) == 8 + 8 + 2 + 3  # two RSS feeds, the ISO-8859-1 one, three stories
    assert twins.same(platform) == twins.same(scrapy)


@pytest.mark.django_db(transaction=True)
def test_an_atom_feed_spider_on_the_xml_iterator_gives_scrapys_items(worker_env, tmp_path):
    scrapy, platform = _twins(ATOM, "twin_feed_atom", worker_env, tmp_path)
    assert len(scrapy) == 10 and scrapy[0]["author"].startswith("Writer")
    assert "Octet entry 1" in {item["title"] for item in scrapy}  # XML by its URL: text
    assert twins.same(platform) == twins.same(scrapy)


@pytest.mark.django_db(transaction=True)
def test_an_html_listing_on_the_html_iterator_gives_scrapys_items(worker_env, tmp_path):
    scrapy, platform = _twins(HTML, "twin_feed_html", worker_env, tmp_path)
    assert len(scrapy) == 6
    assert twins.same(platform) == twins.same(scrapy)


@pytest.mark.django_db(transaction=True)
def test_csv_feeds_with_their_header_rows_give_scrapys_items(worker_env, tmp_path):
    scrapy, platform = _twins(CSV, "twin_csv_products", worker_env, tmp_path)
    names = {item["name"] for item in scrapy}
    assert {"Chair", "Stool", "Crème brûlée", "Façade", "Ünïcode"} <= names
    assert "Naďve café" in names  # cp1252 undeclared: charset-normalizer's guess, cp1250
    assert not any(item["id"] == "3" for item in scrapy)  # a row of the wrong length
    assert twins.same(platform) == twins.same(scrapy)


@pytest.mark.django_db(transaction=True)
def test_a_csv_feed_spider_from_scrapys_docs_gives_scrapys_items(worker_env, tmp_path):
    scrapy, platform = _twins(CSV_DOCS, "twin_csv_docs", worker_env, tmp_path)
    assert {item["description"] for item in scrapy} == {
        "folds; flat", "line one\nline two", "it's blue"}  # fmt: skip
    assert twins.same(platform) == twins.same(scrapy)


# In-process: the same response to Scrapy's spider and to ours.


def _both(url: str, content_type: str, body: bytes):
    from scrapy import Request
    from scrapy.http import Headers
    from scrapy.responsetypes import responsetypes

    from crawlplatform.spiders.responsetypes import class_for

    headers = {"Content-Type": content_type}
    theirs = responsetypes.from_args(headers=Headers(headers), url=url, body=body)
    mine = class_for(content_type, body, url)
    return (theirs(url, headers=headers, body=body, request=Request(url)),
            mine(url, headers=headers, body=body, request=ours.Request(url)))  # fmt: skip


def _results(spider, response) -> list:
    try:
        return [dict(r) if isinstance(r, dict) else r for r in spider._parse(response)]
    except Exception as exc:  # the same error, by its type and message
        return [type(exc).__name__, str(exc)]


MERCHANT = (b'<?xml version="1.0"?><rss xmlns:g="http://base.google.com/ns/1.0"><channel>'
            b"<item><g:id>1</g:id><title>A</title></item><g:item><g:id>2</g:id></g:item>"
            b"<item><g:id>3</g:id><title>C</title></item></channel></rss>")  # fmt: skip
FEEDS = [
    ("application/xml", MERCHANT),
    ("text/xml", b"\xef\xbb\xbf" + MERCHANT),
    ("application/octet-stream", MERCHANT),
    ("image/png", MERCHANT),  # no text by its type: XML by its URL
    ("text/html", b"<html><body><item>1<item>2<g:item>3</body>"),
    ("application/xml",
     b'<?xml version="1.0" encoding="iso-8859-1"?><r><item>\xe9t\xe9</item></r>'),
    ("application/xml", b"<r><item>1</item><item>2"),  # cut off
    ("application/xml", b""),
]  # fmt: skip


@pytest.mark.parametrize("iterator", ["iternodes", "xml", "html", "nodes"])
@pytest.mark.parametrize("itertag", ["item", "g:item"])
@pytest.mark.parametrize(("content_type", "body"), FEEDS)
def test_xml_feed_nodes_are_scrapys(iterator, itertag, content_type, body):
    from scrapy.spiders import XMLFeedSpider

    def parse_node(self, response, node):
        return {"node": node.get(), "ids": node.xpath(".//g:id/text()").getall(),
                "title": node.xpath("title/text()").get(), "class": type(node).__name__,
                "base": getattr(node.root, "base", None)}  # fmt: skip

    attributes = {"name": "f", "iterator": iterator, "itertag": itertag, "parse_node": parse_node,
                  "namespaces": [("g", "http://base.google.com/ns/1.0")]}  # fmt: skip
    theirs = type("Theirs", (XMLFeedSpider,), attributes)()
    mine = type("Mine", (ours.XMLFeedSpider,), attributes)()
    their_response, our_response = _both("http://h.test/feed.xml", content_type, body)
    assert _results(mine, our_response) == _results(theirs, their_response)


CSVS = [
    ("text/csv; charset=utf-8", 'a,b\n1,"x\ny"\n2,3,4\n"q""q",é\n'.encode()),
    ("text/csv", "a;b\n1;é\n".encode("cp1252")),
    ("application/octet-stream", b"a,b\n1,2\n"),
    ("text/csv", b""),
    ("text/csv", b"\xef\xbb\xbfa,b\n1,2\n"),
]


@pytest.mark.parametrize(("delimiter", "quotechar", "headers"), [
    (None, None, None), (";", "'", None), (None, None, ["x", "y"])])  # fmt: skip
@pytest.mark.parametrize(("content_type", "body"), CSVS)
def test_csv_feed_rows_are_scrapys(delimiter, quotechar, headers, content_type, body):
    from scrapy.spiders import CSVFeedSpider

    def parse_row(self, response, row):
        return [row, {"url": response.url}]

    def process_results(self, response, results):
        return [{"n": n, **r} for n, r in enumerate(results)]

    attributes = {"name": "f", "delimiter": delimiter, "quotechar": quotechar,
                  "headers": headers, "parse_row": parse_row,
                  "process_results": process_results}  # fmt: skip
    theirs = type("Theirs", (CSVFeedSpider,), attributes)()
    mine = type("Mine", (ours.CSVFeedSpider,), attributes)()
    their_response, our_response = _both("http://h.test/feed.csv", content_type, body)
    assert _results(mine, our_response) == _results(theirs, their_response)
