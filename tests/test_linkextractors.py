"""``LinkExtractor`` and ``Link`` (``crawlplatform/spiders/linkextractors.py``, ``link.py``)
give Scrapy 2.19's own results: each case runs Scrapy's extractor on Scrapy's response and
ours on ours, built from the same bytes, and the links (url, text, fragment, nofollow) must
be the same list. The counts are Scrapy's, so that no case passes by finding nothing."""

from __future__ import annotations

import re

import pytest
from scrapy.http import HtmlResponse as ScrapyHtmlResponse
from scrapy.http import TextResponse as ScrapyTextResponse
from scrapy.http import XmlResponse as ScrapyXmlResponse
from scrapy.link import Link as ScrapyLink
from scrapy.linkextractors import IGNORED_EXTENSIONS as SCRAPYS_IGNORED
from scrapy.linkextractors import LinkExtractor as ScrapyLinkExtractor

from crawlplatform.spiders import (
    IGNORED_EXTENSIONS,
    HtmlResponse,
    Link,
    LinkExtractor,
    LxmlLinkExtractor,
    TextResponse,
    XmlResponse,
)
from tests import twins
from tests.site import Site

URL = "http://shop.test/dir/page.html?x=1"
RESPONSES = {  # ours, Scrapy's
    "html": (HtmlResponse, ScrapyHtmlResponse),
    "xml": (XmlResponse, ScrapyXmlResponse),
    "text": (TextResponse, ScrapyTextResponse),
}

PLAIN = b"""<html><head><title>Shop</title></head><body>
<a href="item/1">One</a> <a href="/abs">Absolute</a> <a href="http://other.test/x">Other</a>
<a href="//cdn.test/p">Protocol-relative</a> <a href="../up">Up</a> <a href="?q=1">Query</a>
<a href="">Empty</a> <a>No href</a> <a href=";p">Params</a> <a href=".">Dot</a>
<a href="HTTP://UPPER.TEST/A">Upper</a> <a href="https://secure.test:8443/s">Port</a>
<a href="http://user:pw@auth.test/">Auth</a> <a href="item/2?a=1&amp;b=2">Amp</a>
</body></html>"""

BASE = b"""<html><head><base href="http://base.test/sub/"></head><body>
<a href="rel">Rel</a><a href="/root">Root</a><a href="#frag">Frag</a><a href="">Empty</a>
<a href="?q">Q</a><a href="http://abs.test/">Abs</a></body></html>"""

RELATIVE_BASE = b"""<html><head><!-- <base href="/old/"> --><base href="../b/"></head><body>
<a href="rel">Rel</a><a href="#f">F</a><a href="?q">Q</a></body></html>"""

HTTPS_BASE = b"""<html><head><base href="https://base.test/x/"></head><body>
<a href="y">Y</a><a href="http://shop.test/z">Z</a><a href="?q">Q</a></body></html>"""

SCHEMES = b"""<body><a href="javascript:void(0)">JS</a><a href="mailto:a@shop.test">Mail</a>
<a href="tel:+123">Tel</a><a href="data:text/plain,x">Data</a><a href="ftp://ftp.test/f">FTP</a>
<a href="file:///etc/x">File</a><a href="ws://ws.test/">WS</a><a href="about:blank">About</a>
<a href="JavaScript:go()">JS2</a><a href="http:relative">Scheme only</a></body>"""

SPACES = (
    b'<body><a href=" \n item/2 \t">Spaced</a><a href="\x01item">Control</a>'
    b'<a href="it\tem">Tab</a><a href="#fr\nag">Newline</a><a href="a b">Inner space</a>'
    b'<a href="\x0b?q">VT query</a><a href="\x0c#f">Form feed</a><a href="&#1;x">Entity</a>'
    b'<a href=" ">Blank</a><a href="\t?q">Tab query</a><a href="\x7fdel">DEL</a>'
    b'<a href="%20x">Escaped</a><a href="\xc2\xa0nbsp">NBSP</a>'
    b'<a href="x&#10;y">Newline entity</a><a href="\x1f;p">Unit sep</a></body>'
)

FRAGMENTS = b"""<body><a href="#top">Top</a><a href="page.html#x">X</a><a href="item/1#a">A</a>
<a href="item/1#b">B</a><a href="item/1">Plain</a><a href="#">Hash</a><a href="item/1#a">A2</a>
<a href="item/3##y">Double</a></body>"""

DUPLICATES = b"""<body><a href="/d">First</a><a href="/d" rel="nofollow">Second</a>
<a href="/d?b=2&amp;a=1">Q1</a><a href="/d?a=1&amp;b=2">Q2</a><a href="/D">Case</a>
<a href="http://shop.test/d">Absolute</a><a href=" /d ">Spaced</a></body>"""

AREA = b"""<body><img src="/i.png" usemap="#m"><map name="m">
<area shape="rect" coords="0,0,1,1" href="/area1" alt="One"><area href="/area2" nohref>
<area alt="no href"></map><a href="/a">A</a><link href="/style" rel="stylesheet"></body>"""

MEDIA = b"""<body><img src="/i.png" alt="x"><img src="/img.cgi?id=1"><img src="/j.JPG">
<img data-src="/lazy.png"><script src="/app.js"></script><iframe src="/frame.html"></iframe>
<a href="/a" src="/a-src">A</a>
<link href="/feed" rel="alternate"><form action="/f"></form><video src="/v.mp4"></video>
<div href="/div-href" data-href="/data">D</div></body>"""

REGIONS = b"""<body><div id="nav"><a href="/n1">N1</a><a href="/shared">Shared</a></div>
<div class="content"><p><a href="/c1">C1</a><a href="/shared">Shared</a></p>
<div class="content"><a href="/nested">Nested</a></div></div>
<ul class="list"><li><a href="/l1">L1</a></li><li><a href="/l2">L2</a></li></ul>
<a href="/outside">Outside</a></body>"""

PATTERNS = b"""<body><a href="/item/1.html">I1</a><a href="/item/2.html?ref=x">I2</a>
<a href="/category/shoes/">Shoes</a><a href="/category/hats/">Hats</a><a href="/login">Login</a>
<a href="/item/3.html#rev">I3</a><a href="/ITEM/4.html">I4</a><a href="/search?q=item">S</a>
</body>"""

DOMAINS = b"""<body><a href="http://example.com/">Apex</a><a href="http://www.example.com/">WWW</a>
<a href="http://shop.example.com/x">Sub</a><a href="http://notexample.com/">Not</a>
<a href="http://EXAMPLE.COM/up">Upper</a><a href="http://example.com:8080/port">Port</a>
<a href="http://example.com.evil.test/">Evil</a><a href="http://other.test/">Other</a>
<a href="http://a.b.other.test/">Deep</a><a href="/relative">Relative</a>
<a href="http://user@example.com/">User</a></body>"""

EXTENSIONS = b"""<body><a href="/doc.pdf">PDF</a><a href="/pic.jpg">JPG</a>
<a href="/pic.JPEG">JPEG</a><a href="/a.tar.gz">TGZ</a><a href="/page.html">HTML</a>
<a href="/x.pdf?dl=1">PDF query</a><a href="/x.pdf;jsessionid=1">PDF params</a>
<a href="/x.pdf#p2">PDF frag</a><a href="/pdf">No dot</a>
<a href="/style.css">CSS</a><a href="/dir.zip/">Dir</a><a href="/x.PHP">PHP</a>
<a href="/y.webp">WEBP</a><a href="/z.py">PY</a></body>"""

CANONICAL = b"""<body><a href="/p?b=2&amp;a=1">Unsorted</a><a href="/p?a=1&amp;b=2">Sorted</a>
<a href="/p?a=1&amp;b=2#frag">Frag</a><a href="/caf%C3%A9">Escaped</a><a href="/caf\xc3\xa9">Raw</a>
<a href="/x?q=a%20b">Space</a><a href="/x?q=a+b">Plus</a><a href="HTTP://Shop.Test:80/y">Host</a>
</body>"""

PROCESS = b"""<body><a href="javascript:goToPage('../other/page.html'); return false">JS</a>
<a href="/keep">Keep</a><a href="/drop/me">Drop</a><a href="/rewrite?session=1">Rewrite</a>
<a href="relative">Relative</a></body>"""

NOFOLLOW = b"""<body><a href="/1" rel="nofollow">1</a><a href="/2" rel="NoFollow noopener">2</a>
<a href="/3" rel="external,nofollow">3</a><a href="/4" rel="nofollowme">4</a>
<a href="/5" rel="">5</a><a href="/6" rel=" nofollow ">6</a><a href="/7">7</a>
<area href="/8" rel="nofollow"><a href="/9" rel="ugc\tnofollow">9</a></body>"""

NESTED = b"""<body><a href="/1">Hello <b>big</b> <img alt="img"> world</a>
<a href="/2"><span>  spaced  </span>
 text</a><a href="/3"><!-- comment -->after</a><a href="/4"><script>var x;</script>s</a>
<a href="/5">caf&eacute; &amp; &lt;tags&gt;</a><a href="/6"></a><a href="/7"><p>block</p></a>
<a href="/8">outer <a href="/9">inner</a> tail</a></body>"""

BROKEN = b"""<body><a href="http://[bad">Bad IPv6</a><a href="http://[::1]:8080/ok">IPv6</a>
<a href="http://ex ample.test/">Space host</a><a href="http://b\xc3\xbccher.test/x">IDN</a>
<a href="/\xc3\xa4/\xe6\x97\xa5?q=\xc3\xa9">Unicode</a><a href="http://shop.test:99999/">Port</a>
<a href="http://shop.test:x/">Bad port</a><a href="/a%zz">Bad escape</a>
<a href="//">Slashes</a><a href="http:">Scheme</a><a href="/x?">Empty query</a>
<a href="/y;">Empty params</a><a href="/z#">Empty fragment</a><div><a href="/unclosed">U</div>
</body>"""

WITH_TEXT = b"""<body><a href="/1">Next page</a><a href="/2">Previous</a><a href="/3">next</a>
<a href="/4"><b>Next</b> please</a><a href="/1">Other text</a></body>"""

NO_LINKS = b"<html><head><title>Nothing</title></head><body><p>No links here.</p></body></html>"

XHTML = b"""<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><body>
<a href="/x">X</a><a href="y" rel="nofollow">Y</a><area href="/z"/></body></html>"""

XML_TEXT = b"""<?xml version="1.0"?><!DOCTYPE root [<!ENTITY e "Entity">]><root>
<a href="/cdata">x<![CDATA[y]]>z</a><a href="/entity">&amp;x &e; y</a><a href="/only">&e;</a>
<a href="/comment">a<!--c-->b</a><a href="/pi">a<?pi x?>b</a><a href="/child">a<b>b</b>c</a>
</root>"""

PLAIN_XML = b"""<?xml version="1.0"?><root xmlns:h="http://www.w3.org/1999/xhtml">
<a href="/plain">Plain</a><h:a href="/prefixed">Prefixed</h:a>
<item><link>http://shop.test/feed-item</link></item></root>"""


def _many(n: int) -> bytes:
    parts = [b"<html><body>"]
    for i in range(n):
        parts.append(b'<div><a href="/item/%d.html?p=%d" class="c">Item <b>%d</b></a>' % (
            i % 40, i % 7, i))  # fmt: skip
        parts.append(b'<a href="https://other%d.test/x">o</a></div>' % (i % 5))
    return b"".join(parts + [b"</body></html>"])


CP1252 = b"""<html><head><meta http-equiv="Content-Type" content="text/html; charset=windows-1252">
</head><body><a href="/caf\xe9">Caf\xe9</a><a href="/s?q=caf\xe9">Query</a>
<a href="/\x80">Euro</a><a href="/s?q=\xe6\x97">Bytes</a></body></html>"""

META_CHARSET = """<html><head><meta charset="koi8-r"></head><body>
<a href="/путь?q=привет">Привет</a><a href="/plain">Plain</a></body></html>""".encode("koi8-r")

UNDECLARED = "<html><body><a href='/déjà?q=é'>Déjà vu, à la française</a></body></html>".encode(
    "latin-1"
)

SHIFT_JIS = """<html><head><meta charset="shift_jis"></head><body>
<a href="/検索?q=日本語">日本語</a></body></html>""".encode("shift_jis")

UTF16 = '<html><body><a href="/x?q=é">é</a></body></html>'.encode("utf-16")


def _goto(value: str) -> str | None:
    found = re.search(r"javascript:goToPage\('(.*?)'", value)
    return found.group(1) if found else value


def _drop_or_rewrite(value: str) -> str | None:
    if "/drop/" in value:
        return None
    return value.replace("session=1", "session=0")


CASES = [  # (id, body, extractor arguments, Scrapy's count)
    ("relative-and-absolute", PLAIN, {}, 13),
    ("relative-and-absolute-no-unique", PLAIN, {"unique": False}, 13),
    ("base-href", BASE, {}, 6),
    ("relative-base-href", RELATIVE_BASE, {}, 3),
    ("https-base-on-http-page", HTTPS_BASE, {}, 3),
    ("schemes", SCHEMES, {}, 3),
    ("spaces-and-controls", SPACES, {}, 13),
    ("spaces-and-controls-unstripped", SPACES, {"strip": False}, 13),
    ("spaces-and-controls-no-unique", SPACES, {"strip": False, "unique": False}, 15),
    ("fragments", FRAGMENTS, {}, 7),
    ("fragments-no-unique", FRAGMENTS, {"unique": False}, 8),
    ("fragments-canonical", FRAGMENTS, {"canonicalize": True}, 4),
    ("duplicates", DUPLICATES, {}, 4),
    ("duplicates-no-unique", DUPLICATES, {"unique": False}, 7),
    ("duplicates-canonical", DUPLICATES, {"canonicalize": True}, 3),
    ("area", AREA, {}, 3),
    ("img-src", MEDIA, {"tags": "img", "attrs": "src"}, 1),
    ("img-src-no-extensions", MEDIA, {"tags": ("img",), "attrs": ("src",),
                                      "deny_extensions": []}, 3),  # fmt: skip
    ("several-tags-and-attrs", MEDIA, {"tags": ("a", "img", "iframe", "script", "link"),
                                       "attrs": ("href", "src")}, 5),  # fmt: skip
    ("every-tag-and-attr", MEDIA, {"tags": "*", "attrs": "*", "deny_extensions": []}, 15),
    ("every-tag-but-some", MEDIA, {"tags": "*", "deny_tags": ["a", "div"]}, 1),
    ("every-attr-but-some", MEDIA, {"tags": "*", "attrs": "*", "deny_attrs": "alt"}, 9),
    ("no-tags", MEDIA, {"tags": None}, 0),
    ("no-attrs", MEDIA, {"attrs": ()}, 0),
    ("form-action", MEDIA, {"tags": "form", "attrs": "action"}, 1),
    ("tag-of-any-namespace", PLAIN, {"tags": ["{*}a", "{}a"]}, 0),  # names, not lxml's patterns
    ("upper-case-tag", PLAIN, {"tags": "A"}, 0),
    ("restrict-css", REGIONS, {"restrict_css": ".content"}, 3),
    ("restrict-css-several", REGIONS, {"restrict_css": ["#nav", ".list li"]}, 4),
    ("restrict-css-no-unique", REGIONS, {"restrict_css": ".content", "unique": False}, 4),
    ("restrict-xpaths", REGIONS, {"restrict_xpaths": '//div[@id="nav"]'}, 2),
    ("restrict-xpaths-and-css", REGIONS, {"restrict_xpaths": "//ul",
                                          "restrict_css": "#nav"}, 4),  # fmt: skip
    ("restrict-xpaths-to-links", REGIONS, {"restrict_xpaths": "//a[starts-with(@href, '/l')]"}, 2),
    ("restrict-nothing-found", REGIONS, {"restrict_xpaths": "//table"}, 0),
    ("allow-string", PATTERNS, {"allow": r"/item/\d+"}, 3),
    ("allow-compiled", PATTERNS, {"allow": re.compile(r"/item/\d+", re.IGNORECASE)}, 4),
    ("allow-several", PATTERNS, {"allow": [r"/category/", re.compile(r"\.html$")]}, 4),
    ("deny", PATTERNS, {"deny": [r"login", r"\?"]}, 5),
    ("allow-and-deny", PATTERNS, {"allow": "item", "deny": re.compile("ref=")}, 3),
    ("allow-domain", DOMAINS, {"allow_domains": "example.com"}, 4),
    ("allow-domains-and-page", DOMAINS, {"allow_domains": ["other.test", "shop.test"]}, 3),
    ("deny-domains", DOMAINS, {"deny_domains": ["example.com"]}, 7),
    ("allow-and-deny-domains", DOMAINS, {"allow_domains": ["example.com"],
                                         "deny_domains": ["shop.example.com"]}, 3),  # fmt: skip
    ("upper-case-domain", DOMAINS, {"allow_domains": ["Example.COM"]}, 4),
    ("default-extensions", EXTENSIONS, {}, 4),
    ("custom-extensions", EXTENSIONS, {"deny_extensions": ["html", "php"]}, 12),
    ("one-extension", EXTENSIONS, {"deny_extensions": "pdf"}, 10),
    ("no-extensions", EXTENSIONS, {"deny_extensions": []}, 14),
    ("canonicalize-off", CANONICAL, {}, 7),
    ("canonicalize-on", CANONICAL, {"canonicalize": True}, 4),
    ("canonicalize-no-unique", CANONICAL, {"canonicalize": True, "unique": False}, 8),
    ("process-value-javascript", PROCESS, {"process_value": _goto}, 5),
    ("process-value-none-or-changed", PROCESS, {"process_value": _drop_or_rewrite}, 3),
    ("process-value-relative", PROCESS, {"process_value": lambda v: "rel/" + v[-4:]}, 5),
    ("process-value-empty", PROCESS, {"process_value": lambda v: ""}, 1),
    ("nofollow", NOFOLLOW, {}, 9),
    ("nested-text", NESTED, {}, 9),
    ("broken-urls", BROKEN, {}, 10),
    ("broken-urls-no-unique", BROKEN, {"unique": False, "canonicalize": True}, 11),
    ("restrict-text", WITH_TEXT, {"restrict_text": r"(?i)next"}, 3),
    ("restrict-text-first-of-a-url", WITH_TEXT, {"restrict_text": "Other"}, 0),
    ("restrict-text-several", WITH_TEXT, {"restrict_text": [re.compile("Prev"), "^next$"]}, 2),
    ("no-links", NO_LINKS, {}, 0),
    ("empty-body", b"", {}, 0),
    ("many-links", _many(300), {}, 285),
    ("many-links-no-unique", _many(300), {"unique": False}, 600),
]  # fmt: skip


def _links(links: list) -> list[tuple[str, str, str, bool]]:
    return [(link.url, link.text, link.fragment, link.nofollow) for link in links]


def _extracted(kwargs: dict, body: bytes, url: str = URL, headers: dict | None = None,
               kind: str = "html") -> tuple[list, list]:  # fmt: skip
    """Scrapy's links and ours of the same body (ours twice: the second time from the caches
    the first filled, and by a second extractor)."""
    ours, scrapys = RESPONSES[kind]
    theirs = ScrapyLinkExtractor(**kwargs).extract_links(scrapys(url, body=body, headers=headers))
    extractor = LinkExtractor(**kwargs)
    found = extractor.extract_links(ours(url, body=body, headers=headers))
    assert _links(extractor.extract_links(ours(url, body=body, headers=headers))) == _links(found)
    assert all(type(link) is Link for link in found)
    return _links(found), _links(theirs)


@pytest.mark.parametrize(("body", "kwargs", "count"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_links_are_scrapys(body, kwargs, count):
    ours, theirs = _extracted(kwargs, body)
    assert ours == theirs
    assert len(theirs) == count


UTF16_HEADER = "text/html; charset=utf-16"  # without a byte order mark: big-endian


@pytest.mark.parametrize(
    ("body", "headers", "count"),
    [
        (CP1252, None, 4),  # declared in a <meta http-equiv>
        (CP1252, {"Content-Type": "text/html; charset=cp1252"}, 4),
        (CP1252, {"Content-Type": "text/html; charset=utf-8"}, 4),  # the header wins, wrongly
        (META_CHARSET, None, 2),
        (UNDECLARED, None, 1),  # inferred from the bytes
        (SHIFT_JIS, None, 1),
        (UTF16, None, 1),  # a byte order mark
        ("<a href='/x?q=é'>é</a>".encode("utf-16-be"), {"Content-Type": UTF16_HEADER}, 1),
        (b"<a href='/x?q=\xe9'>x</a>", {"Content-Type": "text/html; charset=latin-1"}, 1),
    ],
)
def test_links_are_escaped_in_the_pages_encoding_as_scrapys(body, headers, count):
    ours, theirs = _extracted({}, body, headers=headers)
    assert ours == theirs
    assert len(theirs) == count


@pytest.mark.parametrize(
    ("kind", "body", "kwargs", "count"),
    [
        ("xml", XHTML, {}, 3),
        ("xml", PLAIN_XML, {}, 2),
        ("xml", PLAIN_XML, {"tags": "link", "attrs": "*"}, 0),
        ("xml", XML_TEXT, {}, 6),
        ("html", XML_TEXT, {}, 6),
        ("xml", XHTML, {"restrict_xpaths": "//*[local-name()='body']"}, 3),
        ("text", PLAIN, {}, 13),
        ("html", XHTML, {}, 3),
    ],
)
def test_links_of_xml_and_text_responses_are_scrapys(kind, body, kwargs, count):
    ours, theirs = _extracted(kwargs, body, kind=kind)
    assert ours == theirs
    assert len(theirs) == count


PAGE_URLS = ["http://shop.test/", "https://shop.test/a/b", "http://other.test/x/y?q#f",
             "ftp://ftp.test/d/", "file:///tmp/p.html"]  # fmt: skip
VALUES = ["http://shop.test/x;", "http://shop.test/x?", "http://shop.test/x#", "https://s.test/y",
          "http:foo", "relative/p", "", "//cdn.test/z", "ftp://f.test/a;type=i", "/root;p?q#f",
          "HTTP://Shop.Test/Up", "mailto:x@y", "http://shop.test", "?only", "#only"]  # fmt: skip


@pytest.mark.parametrize("page_url", PAGE_URLS)
def test_what_process_value_returns_is_joined_with_the_page_as_scrapy_joins_it(page_url):
    """A value ``process_value`` returns is escaped and joined with the page's URL; joins that
    do not depend on the page are cached across pages of one scheme, so every kind of value is
    joined against every kind of page here (and each page twice, the second from the cache)."""
    body = b"".join(b'<a href="/%d">%d</a>' % (i, i) for i in range(len(VALUES)))
    kwargs = {"process_value": lambda v: VALUES[int(v.rsplit("/", 1)[1])], "unique": False,
              "deny_extensions": []}  # fmt: skip
    for _ in range(2):
        ours, theirs = _extracted(kwargs, body, url=page_url)
        assert ours == theirs
        assert len(theirs) >= 13


def test_one_extractor_gives_scrapys_links_on_pages_of_different_sites_and_directories():
    """What an extractor keeps from one page (verdicts by URL, joins by directory) must not
    change another page's links."""
    ours, scrapys = LinkExtractor(allow_domains=["shop.test"]), ScrapyLinkExtractor(
        allow_domains=["shop.test"])  # fmt: skip
    body = b'<a href="x">X</a><a href="/y">Y</a><a href="http://shop.test/z">Z</a><a href="?q">Q'
    for url in ["http://shop.test/a/", "http://shop.test/b/c", "http://other.test/a/",
                "https://shop.test/a/", "http://shop.test/a/?p=2", "http://shop.test/a/",
                "http://shop.test/a"]:  # fmt: skip
        assert _links(ours.extract_links(HtmlResponse(url, body=body))) == _links(
            scrapys.extract_links(ScrapyHtmlResponse(url, body=body))), url  # fmt: skip


def test_filters_changed_after_construction_apply_from_the_next_page_as_in_scrapy():
    """Scrapy reads its filters on every page: an extractor changed between pages (a pattern
    added, a domain dropped, an extension allowed) gives the links Scrapy's then gives."""
    url, body = "http://shop.test/d/p", PATTERNS + EXTENSIONS + DOMAINS
    ours, theirs = LinkExtractor(deny_domains="other.test"), ScrapyLinkExtractor(
        deny_domains="other.test")  # fmt: skip
    changes = [lambda x: None, lambda x: x.deny_res.append(re.compile("item")),
               lambda x: x.deny_domains.clear(), lambda x: x.deny_extensions.discard(".pdf"),
               lambda x: x.allow_domains.add("example.com")]  # fmt: skip
    counts = []
    for change in changes:
        change(ours)
        change(theirs)
        found = _links(ours.extract_links(HtmlResponse(url, body=body)))
        assert found == _links(theirs.extract_links(ScrapyHtmlResponse(url, body=body)))
        counts.append(len(found))
    assert counts == [21, 17, 19, 23, 4]


MATCH_URLS = ["http://example.com/item/1", "http://www.example.com/login",
              "http://example.com:81/", "https://other.test/item/2", "http://EXAMPLE.com/x",
              "ftp://example.com/f.pdf", "/relative/item", "", "mailto:a@example.com",
              "http://notexample.com/item"]  # fmt: skip


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"allow": "item"},
        {"deny": ["login", re.compile("PDF", re.IGNORECASE)]},
        {"allow_domains": "example.com"},
        {"deny_domains": ["www.example.com", "other.test"]},
        {"allow": "item", "deny": "other", "allow_domains": ["example.com", "other.test"]},
    ],
)
def test_matches_is_scrapys(kwargs):
    ours, theirs = LinkExtractor(**kwargs), ScrapyLinkExtractor(**kwargs)
    assert [ours.matches(u) for u in MATCH_URLS] == [theirs.matches(u) for u in MATCH_URLS]
    assert any(theirs.matches(u) for u in MATCH_URLS)


def test_the_extractors_settings_are_scrapys_attributes():
    kwargs = {"allow": ["a", re.compile("b")], "deny": "c", "allow_domains": "d.test",
              "deny_domains": ["e.test"], "restrict_xpaths": "//div", "restrict_css": ".x",
              "deny_extensions": ["pdf"], "canonicalize": True, "restrict_text": "t"}  # fmt: skip
    ours, theirs = LinkExtractor(**kwargs), ScrapyLinkExtractor(**kwargs)
    for name in ("allow_res", "deny_res", "allow_domains", "deny_domains", "restrict_xpaths",
                 "deny_extensions", "canonicalize", "restrict_text"):  # fmt: skip
        assert getattr(ours, name) == getattr(theirs, name), name
    assert LxmlLinkExtractor is LinkExtractor
    assert IGNORED_EXTENSIONS == SCRAPYS_IGNORED
    assert LinkExtractor().deny_extensions == ScrapyLinkExtractor().deny_extensions


def test_a_response_follows_links_as_scrapys_follows_them():
    url, body = "http://shop.test/d/p", CANONICAL + PLAIN
    ours, theirs = HtmlResponse(url, body=body), ScrapyHtmlResponse(url, body=body)
    found = LinkExtractor().extract_links(ours)
    scrapys = ScrapyLinkExtractor().extract_links(theirs)
    assert [r.url for r in ours.follow_all(found)] == [r.url for r in theirs.follow_all(scrapys)]
    assert ours.follow(found[3]).url == theirs.follow(scrapys[3]).url == found[3].url
    assert len(found) == 20


def test_a_link_compares_hashes_and_prints_as_scrapys():
    args = ("http://shop.test/a#f", "Text", "f", True)
    ours, theirs = Link(*args), ScrapyLink(*args)
    assert repr(ours) == repr(theirs)
    assert hash(ours) == hash(theirs)
    assert ours == Link(*args) and ours != Link(*args[:3]) and len({ours, Link(*args)}) == 1
    assert Link("http://x/") == Link("http://x/", "", "", False)
    assert ours != theirs  # a Link of another library is no Link of ours
    with pytest.raises(TypeError, match="Link urls must be str objects, got bytes"):
        Link(b"http://x/")


LINKS_SPIDER = """
import scrapy
from scrapy.linkextractors import LinkExtractor


class LinksSpider(scrapy.Spider):
    name = "twin_links"
    pages = LinkExtractor(allow=r"/p/\\d+$", deny_domains="external.invalid")
    every_link = LinkExtractor(unique=False, deny_extensions=[])

    async def start(self):
        yield scrapy.Request(self.seed)

    def parse(self, response):
        found = self.every_link.extract_links(response)
        yield {"url": response.url, "links": [[x.url, x.text, x.nofollow] for x in found]}
        for link in self.pages.extract_links(response):
            yield response.follow(link, callback=self.parse)
"""


@pytest.mark.django_db(transaction=True)
def test_a_spider_following_its_link_extractors_gives_scrapys_items(worker_env, tmp_path):
    """A spider as Scrapy's docs write one, its imports changed, crawls the same pages and
    finds the same links on the platform (real workers) as under Scrapy."""
    with Site(pages=30) as site:
        args = {"seed": site.url("/p/0")}
        scrapy = twins.under_scrapy(LINKS_SPIDER, tmp_path, args)
        ours = twins.on_platform(LINKS_SPIDER, "twin_links", worker_env, tmp_path, args)
    assert len(scrapy.items) == 30
    assert twins.same(ours.items) == twins.same(scrapy.items)
