"""SitemapSpider: spiders written as Scrapy's docs write them give, with their imports
changed, Scrapy 2.19's items on the platform (real workers, a local site of sitemaps); its
reading of robots.txt, indexes, gzip and broken sitemaps holds to Scrapy's own in-process."""

from __future__ import annotations

import gzip
import logging

import pytest

from crawlplatform import spiders as ours
from tests import twins
from tests.feedsite import BIG_ENTRIES, CAP_BYTES, FeedSite, urlset

SHOP = '''
from scrapy.spiders import SitemapSpider


class ShopSpider(SitemapSpider):
    name = "twin_sitemap_shop"
    sitemap_urls = ["BASE/robots.txt"]
    sitemap_follow = ["/sitemaps/products", "/sitemaps/blog", "/sitemaps/extra"]
    sitemap_alternate_links = True
    custom_settings = {"DOWNLOAD_MAXSIZE": CAP}

    def __init__(self, *a, **kw):
        self.sitemap_rules = [
            ("/product/special", "parse_special"),
            ("/product/", "parse_product"),
            ("/blog/", "parse_blog"),
            ("/page/", self.parse_page),
        ]
        super().__init__(*a, **kw)

    def parse_product(self, response):
        yield {"kind": "product", "url": response.url,
               "title": response.css("title::text").get()}

    def parse_special(self, response):
        yield {"kind": "special", "url": response.url}

    def parse_blog(self, response):
        yield {"kind": "blog", "url": response.url,
               "lang": response.xpath("//html/@lang").get()}

    def parse_page(self, response):
        yield {"kind": "page", "url": response.url, "h1": response.css("h1::text").get()}
'''

NEWS = '''
from datetime import datetime

from scrapy.spiders import SitemapSpider


class FilteredSitemapSpider(SitemapSpider):
    name = "twin_sitemap_filtered"
    allowed_domains = ["127.0.0.1"]
    sitemap_urls = ["BASE/sitemaps/news.xml"]

    def sitemap_filter(self, entries):
        for entry in entries:
            date_time = datetime.strptime(entry["lastmod"], "%Y-%m-%d")
            if date_time.year >= 2005:
                yield entry

    def parse(self, response):
        yield {"url": response.url, "title": response.css("title::text").get()}
'''


def _source(template: str, site: FeedSite) -> str:
    return template.replace("BASE", site.base).replace("CAP", str(CAP_BYTES))


@pytest.mark.django_db(transaction=True)
def test_a_sitemap_spider_from_robots_txt_gives_scrapys_items(worker_env, tmp_path):
    with FeedSite() as site:
        source = _source(SHOP, site)
        scrapy = twins.under_scrapy(source, tmp_path)
        platform = twins.on_platform(source, "twin_sitemap_shop", worker_env, tmp_path)
    kinds = sorted({item["kind"] for item in scrapy.items})
    assert kinds == ["blog", "page", "product", "special"]
    urls = {item["url"] for item in scrapy.items}
    assert f"{site.base}/product/1" in urls and f"{site.base}/product/40" in urls  # both gzip
    assert f"{site.base}/product/45" in urls and f"{site.base}/blog/post-7" in urls
    assert f"{site.base}/de/blog/post-5" in urls  # an alternate
    assert not any("archived" in url or "big-" in url for url in urls)
    assert "Ignoring invalid sitemap" in scrapy.process.stderr
    assert twins.same(platform.items) == twins.same(scrapy.items)


@pytest.mark.django_db(transaction=True)
def test_sitemap_filter_drops_entries_by_lastmod_as_in_scrapy(worker_env, tmp_path):
    with FeedSite() as site:
        source = _source(NEWS, site)
        scrapy = twins.under_scrapy(source, tmp_path)
        platform = twins.on_platform(source, "twin_sitemap_filtered", worker_env, tmp_path)
    assert sorted(item["title"] for item in scrapy.items) == [
        "/news/2005-1", "/news/2005-2", "/news/2011-1", "/news/2011-2"]  # fmt: skip
    assert twins.same(platform.items) == twins.same(scrapy.items)


# In-process: the same responses to Scrapy's SitemapSpider and to ours.


def _spiders(**attributes):
    from scrapy.spiders import SitemapSpider as ScrapySitemapSpider

    class Theirs(ScrapySitemapSpider):
        name = "s"
        sitemap_rules = [("/a/", "parse_a"), ("", "parse")]
        sitemap_follow = ["/keep"]

        def parse_a(self, response):
            pass

    class Ours(ours.SitemapSpider):
        name = "s"
        sitemap_rules = Theirs.sitemap_rules
        sitemap_follow = Theirs.sitemap_follow

        def parse_a(self, response):
            pass

    theirs = Theirs(**attributes)
    theirs._max_size, theirs._warn_size = CAP_BYTES, 32 << 20  # what from_crawler sets
    mine = Ours(**attributes)
    mine.settings = _settings(CAP_BYTES)
    return theirs, mine


def _settings(cap: int):
    from crawlplatform.spiders.settings import Settings

    return Settings({"DOWNLOAD_MAXSIZE": cap})


def _responses(url: str, content_type: str, body: bytes):
    from scrapy import Request
    from scrapy.http import Headers
    from scrapy.responsetypes import responsetypes

    from crawlplatform.spiders.responsetypes import class_for

    headers = {"Content-Type": content_type} if content_type else {}
    theirs = responsetypes.from_args(headers=Headers(headers), url=url, body=body)
    mine = class_for(content_type, body, url)
    return (theirs(url, headers=headers, body=body, request=Request(url)),
            mine(url, headers=headers, body=body, request=ours.Request(url)))


def _asked(requests) -> list[tuple[str, str]]:
    return [(r.url, r.callback.__name__) for r in requests]


H = "http://h.test"
INDEX = (f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
         f"<sitemap><loc>{H}/keep-1.xml</loc></sitemap><sitemap><loc>{H}/drop.xml</loc>"
         f"</sitemap><sitemap><loc>{H}/keep-2.xml.gz</loc></sitemap></sitemapindex>"
         ).encode()  # fmt: skip
SET = urlset(H, ["/a/1", "/b/2", "/a/3"])
BIG = urlset(H, [f"/a/{i:06d}" for i in range(2 * BIG_ENTRIES)])
assert len(BIG) > CAP_BYTES
CASES = [
    (f"{H}/robots.txt", "text/plain", b"Sitemap: /s.xml\nsitemap:\t/t.xml.gz\n#Sitemap: /x\n"),
    (f"{H}/index.xml", "application/xml", INDEX),
    (f"{H}/set.xml", "text/xml", SET),
    (f"{H}/set", "application/xml", SET),
    (f"{H}/set", "text/plain", SET),  # text, not XML, at a URL without .xml: no sitemap
    (f"{H}/set.xml", "text/plain", SET),
    (f"{H}/set", "application/octet-stream", SET),  # XML by its body
    (f"{H}/set.xml.gz", "application/x-gzip", gzip.compress(SET)),
    (f"{H}/set.gz", "application/octet-stream", gzip.compress(SET)),
    (f"{H}/set.xml.gz", "application/gzip", gzip.compress(SET)[:-30]),  # cut short
    (f"{H}/set.xml.gz", "application/gzip", gzip.compress(b"\xef\xbb\xbf" + SET)),
    (f"{H}/big.xml.gz", "application/gzip", gzip.compress(BIG)),  # past the cap
    (f"{H}/set.xml.gz", "", SET),  # gunzipped on the way (Content-Encoding)
    (f"{H}/page.html", "text/html", b"<html><body><loc>x</loc></body></html>"),
    (f"{H}/empty.xml", "application/xml", b""),
    (f"{H}/odd.xml", "application/xml", b"<feed><url><loc>x</loc></url></feed>"),
    (f"{H}/cut.xml", "application/xml", SET[:-40]),
]  # fmt: skip


@pytest.mark.parametrize(("url", "content_type", "body"), CASES)
def test_parse_sitemap_asks_for_what_scrapys_asks_for(url, content_type, body, caplog):
    theirs, mine = _spiders(sitemap_alternate_links=True)
    their_response, our_response = _responses(url, content_type, body)
    with caplog.at_level(logging.WARNING):
        expected = _asked(theirs._parse_sitemap(their_response))
        their_warnings = [r.getMessage().split(":")[0] for r in caplog.records]
        caplog.clear()
        assert _asked(mine._parse_sitemap(our_response)) == expected
    assert [r.getMessage().split(":")[0] for r in caplog.records] == their_warnings


def test_a_gzip_sitemap_unpacks_within_the_jobs_cap_or_the_spiders_smaller_one():
    theirs, mine = _spiders()
    body = gzip.compress(BIG)
    response = _responses(f"{H}/big.xml.gz", "application/gzip", body)[1]
    assert mine._get_sitemap_body(response) is None  # past the job's cap
    mine.settings = _settings(len(BIG))
    assert mine._get_sitemap_body(response) == BIG
    mine.download_maxsize = CAP_BYTES  # the spider's own, lower
    assert mine._get_sitemap_body(response) is None
    mine.download_maxsize = 10 * len(BIG)  # never above the job's
    mine.settings = _settings(CAP_BYTES)
    assert mine._get_sitemap_body(response) is None


def test_a_sitemap_spiders_cap_is_its_jobs_fetch_max_bytes(monkeypatch):
    from tasks.content import spiders
    from web.models import CrawlJob

    class Capped(ours.SitemapSpider):
        name = "capped_sitemap"

    monkeypatch.setitem(spiders._classes, Capped.name, Capped)
    response = _responses(f"{H}/big.xml.gz", "application/gzip", gzip.compress(BIG))[1]
    job = CrawlJob(pk=1, spider=Capped.name, settings={"FETCH_MAX_BYTES": CAP_BYTES})
    assert spiders.create(job).settings.getint("DOWNLOAD_MAXSIZE") == CAP_BYTES
    assert spiders.create(job)._get_sitemap_body(response) is None
    job.settings = {}  # the platform's FETCH_MAX_BYTES, 10 MiB
    assert spiders.create(job)._get_sitemap_body(response) == BIG
