"""The sitemap and feed utilities (``crawlplatform/spiders/utils.py``) hold to Scrapy 2.19's
own, run on the same bytes in this process."""

from __future__ import annotations

import gzip
import logging

import pytest
from scrapy.http import Headers as ScrapyHeaders
from scrapy.http import Response as ScrapyResponse
from scrapy.responsetypes import responsetypes
from scrapy.utils import gz, iterators, sitemap

from crawlplatform import spiders as ours
from crawlplatform.spiders.responsetypes import class_for
from crawlplatform.spiders.utils import DecompressionMaxSizeExceeded

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
SITEMAPS = [
    f"<urlset {NS}><url><loc> http://h/a </loc><lastmod>2024-01-01</lastmod>"
    "<changefreq>daily</changefreq><priority>0.8</priority></url>"
    "<url><loc>http://h/b</loc></url></urlset>",
    f"<sitemapindex {NS}><sitemap><loc>http://h/s1.xml.gz</loc></sitemap>"
    "<sitemap><lastmod>2024</lastmod></sitemap></sitemapindex>",
    f'<urlset {NS} xmlns:xhtml="http://www.w3.org/1999/xhtml"><url><loc>http://h/en</loc>'
    '<xhtml:link rel="alternate" hreflang="fr" href="http://h/fr"/>'
    '<xhtml:link rel="alternate" hreflang="de"/></url></urlset>',
    f'<urlset {NS} xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">'
    "<url><loc>http://h/p</loc><image:image><image:loc>http://h/i.png</image:loc></image:image>"
    "</url><url><loc></loc></url><url><loc>http://h/1</loc><loc>http://h/2</loc></url></urlset>",
    "<urlset><url><loc>http://h/no-namespace</loc></url><!-- c --><?pi x?></urlset>",
    f"<urlset {NS}><url><loc>http://h/a</loc></url><url><loc>http://h/cut",
    '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e "EXPANDED"><!ENTITY f SYSTEM '
    '"file:///etc/passwd">]><urlset><url><loc>http://h/&e;&f;</loc></url></urlset>',
    "<html><body><loc>http://h/x</loc></body></html>",
    "no xml at all",
    "",
    '<?xml version="1.0"?>',
]  # fmt: skip


def _outcome(make):
    try:
        return make()
    except Exception as exc:
        return type(exc).__name__


@pytest.mark.parametrize("text", SITEMAPS)
@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_sitemap_reads_what_scrapys_reads(text, bom):
    body = bom + text.encode()

    def read(cls):
        s = cls(body)
        return s.type, list(s)

    assert _outcome(lambda: read(ours.Sitemap)) == _outcome(lambda: read(sitemap.Sitemap))


ROBOTS = [
    b"User-agent: *\nDisallow: /x\nSitemap: /a.xml\n  sitemap:http://h/b.xml \r\n"
    b"SITEMAP: c.xml.gz\n# Sitemap: /commented\nSitemapx: /no\nSitemap: \xff\xfe\n",
    b"",
    b"Sitemap:",
]  # fmt: skip


@pytest.mark.parametrize("robots", ROBOTS)
@pytest.mark.parametrize("base", [None, "http://h/robots.txt"])
def test_robots_sitemap_lines_are_scrapys(robots, base):
    expected = list(sitemap.sitemap_urls_from_robots(robots, base_url=base))
    assert list(ours.sitemap_urls_from_robots(robots, base_url=base)) == expected
    text = robots.decode("latin-1")
    with pytest.warns(Warning):  # Scrapy's str form is deprecated; ours takes it silently
        expected = list(sitemap.sitemap_urls_from_robots(text, base_url=base))
    assert list(ours.sitemap_urls_from_robots(text, base_url=base)) == expected


DATA = b"<urlset>" + b"<url><loc>http://h/x</loc></url>" * 5000 + b"</urlset>"
# mtime=0: the test ids hold the bytes, which every xdist worker must collect alike
GZIPS = [
    gzip.compress(DATA, mtime=0),
    gzip.compress(DATA, mtime=0)[:-8],  # no trailer
    gzip.compress(DATA, mtime=0)[:3000],  # cut off in the stream
    gzip.compress(DATA, mtime=0)[:-8] + b"\0\0\0\0\0\0\0\0",  # a wrong checksum
    gzip.compress(b"a", mtime=0) + gzip.compress(b"b", mtime=0),  # two members
    gzip.compress(b"", mtime=0),
    b"not gzip",
    b"\x1f\x8b\x08",
]  # fmt: skip


@pytest.mark.parametrize("data", GZIPS)
@pytest.mark.parametrize("max_size", [0, 1, 65536, len(DATA), len(DATA) - 1])
def test_gunzip_gives_what_scrapys_gives_within_its_cap(data, max_size):
    def theirs():
        try:
            return gz.gunzip(data, max_size=max_size)
        except ValueError as exc:  # Scrapy's _DecompressionMaxSizeExceeded
            return "too large", str(exc)

    def mine():
        try:
            return ours.gunzip(data, max_size=max_size)
        except DecompressionMaxSizeExceeded as exc:
            return "too large", str(exc)

    assert _outcome(mine) == _outcome(theirs)


def test_gzip_magic_number_is_scrapys():
    for body in (gzip.compress(b"x"), b"\x1f\x8b", b"<xml/>", b""):
        theirs = gz.gzip_magic_number(ScrapyResponse("http://h/", body=body))
        assert ours.gzip_magic_number(ours.Response("http://h/", body=body)) == theirs


FEEDS = [
    '<?xml version="1.0" encoding="UTF-8"?><rss><channel><item><title>é</title></item>'
    "<item><title>2</title><item><title>nested</title></item></item></channel></rss>",
    '<rss xmlns:dc="http://purl.org/dc/elements/1.1/"><item><dc:creator>x</dc:creator>'
    "<title><![CDATA[<b>cdata</b>]]></title></item><dc:item>d</dc:item></rss>",
    '<feed xmlns="http://www.w3.org/2005/Atom"><entry><title>atom</title></entry></feed>',
    '<a xmlns:g="http://base.google.com/ns/1.0"><g:item><g:id>1</g:id></g:item>'
    '<item xmlns="urn:other">2</item></a>',
    "   \n  <r><item>leading space</item></r>",
    '<!DOCTYPE r [<!ENTITY e "EXPANDED">]><r><item>&e;</item></r>',
    "<r><item>cut",
    "",
]  # fmt: skip


def _xml_responses(body: bytes, content_type: str):
    headers = {"Content-Type": content_type}
    cls = responsetypes.from_args(headers=ScrapyHeaders(headers), url="http://h/f", body=body)
    return (cls("http://h/f", headers=headers, body=body),
            class_for(content_type, body, "http://h/f")("http://h/f", headers=headers,
                                                        body=body))  # fmt: skip


@pytest.mark.parametrize("feed", FEEDS)
@pytest.mark.parametrize("nodename", ["item", "dc:item", "g:item", "entry", "title"])
@pytest.mark.parametrize("form", ["xml", "text", "latin-1", "utf-16", "binary", "str", "bytes"])
def test_xmliter_lxml_gives_scrapys_nodes(feed, nodename, form):
    if form == "str":
        theirs = mine = feed
    elif form == "bytes":
        theirs = mine = feed.encode()
    else:
        encoding = {"latin-1": "latin-1", "utf-16": "utf-16"}.get(form, "utf-8")
        content_type = {"xml": "application/xml", "binary": "application/octet-stream"}.get(
            form, f"text/plain; charset={encoding}")  # fmt: skip
        theirs, mine = _xml_responses(feed.encode(encoding, "replace"), content_type)

    def nodes(xmliter, obj):
        return [(n.get(), n.xpath("string()").get()) for n in xmliter(obj, nodename)]

    expected = _outcome(lambda: nodes(iterators.xmliter_lxml, theirs))
    assert _outcome(lambda: nodes(ours.xmliter_lxml, mine)) == expected


def test_xmliter_lxml_takes_a_namespace_and_prefix_as_scrapys():
    feed = FEEDS[2].encode()
    atom = "http://www.w3.org/2005/Atom"
    expected = [n.xpath("a:title/text()").get()
                for n in iterators.xmliter_lxml(feed, "entry", atom, "a")]  # fmt: skip
    assert expected == ["atom"]
    assert [n.xpath("a:title/text()").get()
            for n in ours.xmliter_lxml(feed, "entry", atom, "a")] == expected  # fmt: skip


CSVS = [
    'id,name\r\n1,"a, b"\r\n2,"two\nlines ""quoted"""\r\n3\r\n4,x,y\r\n',
    "id;name\n1;'semi; colon'\n2;'it''s'\n",
    "\ufeffid,name\n1,é\n",
    "",
    "only,a,header\n",
]


@pytest.mark.parametrize("text", CSVS)
@pytest.mark.parametrize(("delimiter", "quotechar", "headers"), [
    (None, None, None), (";", "'", None), (None, None, ["h1", "h2"])])  # fmt: skip
@pytest.mark.parametrize("form", ["text/csv", "text/csv; charset=latin-1", "binary", "str"])
def test_csviter_gives_scrapys_rows(text, delimiter, quotechar, headers, form, caplog):
    if form == "str":
        theirs = mine = text
    else:
        body = text.encode("latin-1" if "latin" in form else "utf-8", "replace")
        content_type = "application/octet-stream" if form == "binary" else form
        theirs, mine = _xml_responses(body, content_type)
    with caplog.at_level(logging.WARNING):
        expected = _outcome(lambda: list(iterators.csviter(
            theirs, delimiter, headers, quotechar=quotechar)))  # fmt: skip
        warned = [r.getMessage() for r in caplog.records]
        caplog.clear()
        assert _outcome(lambda: list(ours.csviter(
            mine, delimiter, headers, quotechar=quotechar))) == expected  # fmt: skip
    assert [r.getMessage() for r in caplog.records] == warned
