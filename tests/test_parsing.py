import pytest

from tasks.content.parsing import looks_binary, needs_javascript, parse_html


def test_links_are_absolute_unique_and_skip_other_schemes():
    body = b"""<html><head><title> A   title </title></head><body>
      <a href="b.html">b</a><a href="b.html">again</a><a href="/c?x=1">c</a>
      <a href="#top">frag</a><a href="mailto:x@y.z">m</a><a href="javascript:go()">j</a>
      <a href="tel:1">t</a><a href="https://other.example/">o</a><area href="d.html">
    </body></html>"""
    parsed = parse_html(body, "text/html", "http://h/dir/a.html")
    assert parsed.title == "A title"
    assert parsed.links == [
        "http://h/dir/b.html",
        "http://h/c?x=1",
        "https://other.example/",
        "http://h/dir/d.html",
    ]


def test_base_href_is_honoured():
    body = b'<html><head><base href="http://h/base/"></head><a href="x.html">x</a></html>'
    assert parse_html(body, "text/html", "http://h/other/page").links == ["http://h/base/x.html"]


def test_charset_from_header_and_from_meta():
    latin1 = "<title>caf\u00e9 cr\u00e8me</title>".encode("latin-1")
    assert parse_html(latin1, "text/html; charset=iso-8859-1", "http://h/").title == "café crème"
    meta = b'<meta charset="iso-8859-1">' + latin1
    assert parse_html(meta, "text/html", "http://h/").title == "café crème"


def test_malformed_html_still_yields_links():
    body = b"<html><body><div><a href='a'>a<table><a href=b>b</p></td><a href=\"c\">c"
    assert parse_html(body, "text/html", "http://h/").links == [
        "http://h/a",
        "http://h/b",
        "http://h/c",
    ]


def test_empty_and_xml_declared_documents():
    assert parse_html(b"", "text/html", "http://h/").links == []
    xhtml = b'<?xml version="1.0" encoding="utf-8"?><html><a href="x">x</a></html>'
    assert parse_html(xhtml, "application/xhtml+xml", "http://h/").links == ["http://h/x"]


def test_binary_bodies_are_recognized():
    assert looks_binary(b"\x89PNG\r\n\x1a\n\x00\x00")
    assert not looks_binary(b"<html></html>")


def test_bytes_invalid_in_their_charset_are_replaced_not_fatal():
    body = b"<title>ok \xff\xfe caf\xc3\xa9</title><a href='/x'>x</a>"
    parsed = parse_html(body, "text/html; charset=utf-8", "http://h/")
    assert parsed.title.startswith("ok ") and parsed.title.endswith("café")
    assert parsed.links == ["http://h/x"]


def test_a_utf8_body_reads_as_its_decoded_text_does():
    """A UTF-8 body goes to the parser as it came, declared or not: each invalid sequence is
    one replacement character, as in the decoded text kept for extraction."""
    body = b"\xef\xbb\xbf<title>caf\xc3\xa9 \xe2\x98\x95 \xff\xc3 x</title>" \
           b"<a href='/caf\xc3\xa9\xed\xa0\x80'>x</a>"  # fmt: skip
    parsed = parse_html(body, "text/html", "http://h/")
    assert parsed.encoding == "utf-8"
    assert parsed.title == "caf\u00e9 \u2615 \ufffd\ufffd x"
    assert parsed.links == ["http://h/caf\u00e9\ufffd\ufffd\ufffd"]
    assert parsed.text.startswith("<title>caf\u00e9 \u2615 \ufffd\ufffd x</title>")
    undeclared = parse_html(body.removeprefix(b"\xef\xbb\xbf"), "text/html", "http://h/")
    assert (undeclared.encoding, undeclared.title) == ("utf-8", parsed.title)


def test_rel_nofollow_links_are_reported_only_when_every_link_to_them_says_so():
    html = (b'<a rel="NoFollow sponsored" href="/ad#x">ad</a><a href="/both" rel="nofollow">1</a>'
            b'<a href="/both">2</a><area rel="nofollow" href="/map"><a rel="noopener" href="/ok">'
            b'<a rel="followup" href="/fine">')  # fmt: skip
    parsed = parse_html(html, "text/html", "http://h/")
    assert parsed.nofollow_hrefs == {"/ad", "/map"}
    assert set(parsed.hrefs) == {"/ad", "/both", "/map", "/ok", "/fine"}
    assert parse_html(b'<a href="/a">a</a>', "text/html", "http://h/").nofollow_hrefs == set()


NAV = '<nav><a href="/">Home</a> <a href="/about">About</a></nav>'
TEXT = "<p>" + "A paragraph people read, with words enough to be an article. " * 8 + "</p>"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("<div id=list></div><script>go()</script>", "no links, and scripts"),
        (NAV + TEXT + "<noscript>Enable JavaScript</noscript><script>go()</script>", "noscript"),
        (NAV + TEXT + '<script>const a = document.createElement("a"); a.href = "/i/1";</script>',
         "an inline script makes anchors"),
        (NAV + TEXT + "<script>list.innerHTML = items.map(i => `<a href=${i}>`)</script>",
         "an inline script writes anchors"),
        (NAV + TEXT + "<script>fetch('/api/items').then(show)</script>", "it loads content"),
        (NAV + TEXT + '<div id="root"></div><script src="/app.js"></script>', "an app's mount"),
        (NAV + "<p>Loading...</p><script src=/app.js></script>", "almost no text"),
        (NAV + TEXT + '<ul id="items"></ul><script src="/items.js"></script>', "an empty list"),
        (NAV + TEXT + "<div>Loading\u2026</div><script src=/items.js></script>", "a placeholder"),
    ],
)
def test_pages_whose_scripts_make_their_links_or_content_need_rendering(body, why):
    html = f"<html><head><title>t</title></head><body>{body}</body></html>".encode()
    assert needs_javascript(parse_html(html, "text/html", "http://example.com/"), html), why


@pytest.mark.parametrize(
    "body",
    [
        NAV + TEXT,  # no scripts
        NAV + TEXT + '<script src="https://www.googletagmanager.com/gtm.js?id=X"></script>',
        NAV + TEXT + "<script>window.dataLayer = window.dataLayer || []; gtag('js', new Date());"
        "var s = document.createElement('script'); s.src = '/x.js';</script>",
    ],
)
def test_pages_that_are_whole_in_their_html_are_not_rendered(body):
    html = f"<html><head><title>t</title></head><body>{body}</body></html>".encode()
    assert not needs_javascript(parse_html(html, "text/html", "http://example.com/"), html)
