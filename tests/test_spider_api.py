"""The public spider API (``crawlplatform.spiders``) by itself: Scrapy's names and behaviour."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from urllib.parse import urljoin

import attrs
import pytest
from w3lib.url import safe_url_string

from crawlplatform.spiders import (
    DropItem,
    FormRequest,
    Headers,
    HtmlResponse,
    JsonRequest,
    NotSupported,
    Request,
    Response,
    Spider,
    TextResponse,
    XmlResponse,
    signals,
)
from crawlplatform.spiders.settings import Crawler, Settings
from tasks.content import items

PAGE = b"""<html><head><base href="/shop/"><title>T</title></head><body>
<form id="search" action="find" method="get"><input name="q" value="x"></form>
<form name="login" action="/login" method="post">
  <input type="hidden" name="csrf" value="T0K3N"><input name="user">
  <input type="submit" name="go" value="Go"><input type="submit" name="alt" value="Alt">
</form>
<a class="p" href="item/1">one</a><a class="p" href="/item/2">two</a><span class="p">no link</span>
<p class="price">Price: 12.50 EUR</p></body></html>"""


def page() -> HtmlResponse:
    return HtmlResponse("http://shop.test/a/b", headers={"Content-Type": "text/html"}, body=PAGE)


def test_selectors_are_parsels_and_links_resolve_against_the_base():
    r = page()
    assert r.css("title::text").get() == "T"
    assert r.xpath("//a/@href").getall() == ["item/1", "/item/2"]
    assert r.css(".price::text").re_first(r"[\d.]+") == "12.50"
    assert r.urljoin("item/1") == "http://shop.test/shop/item/1"
    assert [q.url for q in r.follow_all(css="a.p")] == [
        "http://shop.test/shop/item/1", "http://shop.test/item/2"]  # fmt: skip
    assert r.follow(r.css("a.p::attr(href)")[1]).url == "http://shop.test/item/2"
    assert r.soup.title.string == "T"
    assert r.headers.get("content-type") == b"text/html"
    assert isinstance(r, TextResponse) and isinstance(r, Response)


RUSSIAN = "Привет, как дела? Это тест."


@pytest.mark.parametrize(
    "content_type, body, encoding, text",
    [  # Scrapy 2.19's TextResponse: its encoding and text of each
        ("text/html; charset=utf-8", "<p>caf\xe9</p>".encode(), "utf-8", "<p>caf\xe9</p>"),
        ("text/html", b"<meta charset=iso-8859-1><p>caf\xe9</p>", "cp1252",
         "<meta charset=iso-8859-1><p>caf\xe9</p>"),
        ("text/html", b'<meta http-equiv="Content-Type" content="text/html; charset=cp1251">\xe0',
         "cp1251", '<meta http-equiv="Content-Type" content="text/html; charset=cp1251">\u0430'),
        ("text/html; charset=latin-1", '<meta charset="utf-8">caf\xe9'.encode(), "cp1252",
         '<meta charset="utf-8">caf\xc3\xa9'),
        ("text/html; charset=latin-1", b"\xef\xbb\xbf<p>bom</p>", "utf-8", "<p>bom</p>"),
        ("text/html", "\ufeff<p>bom</p>".encode("utf-16-le"), "utf-16-le", "<p>bom</p>"),
        ("text/html; charset=utf-16", "<p>x</p>".encode("utf-16-be"), "utf-16", "<p>x</p>"),
        ("text/html; charset=gb18030", b"<p>\x80</p>", "gb18030", "<p>\u20ac</p>"),
        ("text/html; charset=nonsense", b"<p>\xff</p>", "cp1006", "<p>\ufe7d</p>"),
        ("", b"", "cp1252", ""),
        ("application/json", b'{"a": "\xc3\xa9"}', "utf-8", '{"a": "\xe9"}'),
        ("text/html", b"<p>plain ascii</p>", "cp1252", "<p>plain ascii</p>"),
        ("text/html", "<p>d\xe9j\xe0 vu</p>".encode(), "utf-8", "<p>d\xe9j\xe0 vu</p>"),
        ("text/html", f"<p>{RUSSIAN}</p>".encode("cp1251"), "cp1251", f"<p>{RUSSIAN}</p>"),
        ("text/html", b"\x00\x01\xff\xfe\x80", "ascii", "\x00\x01\ufffd\ufffd\ufffd"),
    ],
)  # fmt: skip
def test_encoding_and_text_are_scrapys(content_type, body, encoding, text):
    """The encoding is found without decoding the body: declared, or inferred from the bytes
    (an ASCII body is ``cp1252``, as Scrapy names it)."""
    r = TextResponse("http://s.test/", headers={"Content-Type": content_type}, body=body)
    assert r.encoding == encoding
    assert r._text is None
    assert r.text == text


@pytest.mark.parametrize(
    "given, body",
    [  # Scrapy 2.19's TextResponse: the given encoding named, the byte order mark decoding
        ("utf-8", b"\xef\xbb\xbf<p>bom</p>"),
        ("latin-1", b"\xef\xbb\xbf<p>bom</p>"),
        ("utf-16", "\ufeff<p>bom</p>".encode("utf-16-le")),
        ("utf-8", "\ufeff<p>bom</p>"),
    ],
)
def test_a_byte_order_mark_is_no_part_of_the_text_whatever_encoding_was_given(given, body):
    r = TextResponse("http://s.test/", body=body, encoding=given)
    assert (r.encoding, r.text) == (given, "<p>bom</p>")


def test_links_are_escaped_in_the_pages_encoding_and_in_utf8_where_it_cannot_spell_them():
    """Scrapy 2.19's URLs; where it raises UnicodeEncodeError (a character the page's
    encoding lacks), the link is kept, escaped in UTF-8."""
    ascii_page = HtmlResponse("http://s.test/", body=b"<p>ascii</p>")  # cp1252, as Scrapy says
    koi8 = HtmlResponse("http://s.test/", body=b"<p>x</p>",
                        headers={"Content-Type": "text/html; charset=koi8-r"})  # fmt: skip
    utf16 = HtmlResponse("http://s.test/", body="<p>x</p>".encode("utf-16-be"),
                         headers={"Content-Type": "text/html; charset=utf-16"})  # fmt: skip
    assert ascii_page.follow("/s?q=caf\xe9").url == "http://s.test/s?q=caf%E9"
    assert ascii_page.follow("/\xfc/x?p=1").url == "http://s.test/%C3%BC/x?p=1"
    assert utf16.follow("/p?x=1").url == "http://s.test/p?%FF%FEx%00=%001%00"
    for page in (ascii_page, koi8):
        assert [r.url for r in page.follow_all(["/s?q=\u65e5"])] == ["http://s.test/s?q=%E6%97%A5"]
    assert koi8.follow("/s?q=caf\xe9").url == "http://s.test/s?q=caf%C3%A9"


@pytest.mark.parametrize(
    "head, base",
    [
        ('<base href="/shop/">', "http://s.test/shop/"),
        ("<BASE target=_top HREF = ' http://cdn.test/x/ '>", "http://cdn.test/x/"),
        ("<!-- <base href='/old/'> --><base href='/new/'>", "http://s.test/new/"),
        ("<base href=/unquoted/>", "http://s.test/unquoted/"),
        ("<title>" + "x" * 5000 + "</title><base href='/late/'>", "http://s.test/a/b"),
        ("", "http://s.test/a/b"),
    ],
)
def test_the_base_is_scrapys_get_base_url(head, base):
    """Relative links resolve against the ``<base href>`` in the first 4096 characters of
    the text, as Scrapy's ``response.urljoin`` (``get_base_url``) does (the expected values
    are Scrapy 2.19's)."""
    body = f"<html><head>{head}</head><body><a href='c'>c</a></body></html>".encode()
    r = HtmlResponse("http://s.test/a/b", headers={"Content-Type": "text/html"}, body=body)
    assert r.base == base
    assert [q.url for q in r.follow_all(css="a")] == [r.urljoin("c")] == [urljoin(base, "c")]


def test_form_from_response_fills_hidden_fields_and_clicks_as_asked():
    r = page()
    login = FormRequest.from_response(r, formname="login", formdata={"user": "bob"},
                                      clickdata={"name": "alt"})  # fmt: skip
    assert (login.method, login.url) == ("POST", "http://shop.test/login")
    assert login.body == b"csrf=T0K3N&alt=Alt&user=bob"  # the button before formdata
    assert login.headers[b"Content-Type"] == b"application/x-www-form-urlencoded"
    search = FormRequest.from_response(r, formcss="#search", formdata={"q": "shoes"})
    assert (search.method, search.url, search.body) == (
        "GET", "http://shop.test/shop/find?q=shoes", b"")  # fmt: skip
    by_xpath = FormRequest.from_response(r, formxpath="//input[@name='user']", dont_click=True)
    assert by_xpath.body == b"csrf=T0K3N&user="
    with pytest.raises(ValueError):
        FormRequest.from_response(r, formcss="#nothing")


FORMS = """<html><head><meta charset="{}"></head><body>
<form id="f1" name="n2" action="/one" method="dialog" enctype="multipart/form-data">
 <input type="hidden" name="t" value="1">
 <select name="s"><option value="a">A</option><option value="b">B</option></select>
 <select name="m" multiple><option value="x" selected>X</option><option value="y" selected>Y
 </option></select><input type="checkbox" name="c" value="on1" checked>
 <input type="checkbox" name="c2" value="v"><input type="radio" name="r" value="r1">
 <input type="radio" name="r" value="r2" checked><textarea name="ta">hello</textarea>
 <button name="b1" value="B1">one</button><input type="submit" name="b2" value="B2">
</form>
<form name="n1" id="i1" action="two"><input name="q" value="привет">
 <input type="submit" name="go" value="Go"><input type="submit" name="go" value="Go"></form>
</body></html>"""
FIELDS = "t=1&s=a&m=x&m=y&c=on1&r=r2&ta=hello"


@pytest.mark.parametrize(("charset", "q", "shch", "de"), [
    ("utf-8", "%D0%BF%D1%80%D0%B8%D0%B2%D0%B5%D1%82", "%D1%89", "%D0%B4"),
    ("cp1251", "%EF%F0%E8%E2%E5%F2", "%F9", "%E4"),
])  # fmt: skip
def test_form_from_response_is_scrapys_for_every_kind_of_form(charset, q, shch, de):
    """What Scrapy 2.19 gives for each (its results written here): fields of every kind, a
    form with an enctype and a method it cannot send (urlencoded GET, as a browser falls
    back), ``nr`` in clickdata, formname before formid, ``url``, the page's encoding."""
    r = HtmlResponse("http://shop.test/x/", body=FORMS.format(charset).encode(charset))
    sent = [FormRequest.from_response(r), FormRequest.from_response(r, clickdata={"nr": 1}),
            FormRequest.from_response(r, formid="i1", formname="n2"),
            FormRequest.from_response(r, formname="n1", url="/elsewhere?x=1", dont_click=True),
            FormRequest.from_response(r, formname="n1", method="post", dont_click=True,
                                      formdata=[("q", "щ"), ("z", ["1", "2"])])]  # fmt: skip
    assert [(f.method, f.url, f.body) for f in sent] == [
        ("GET", f"http://shop.test/one?{FIELDS}&b1=B1", b""),
        ("GET", f"http://shop.test/one?{FIELDS}&s=", b""),  # the form's 2nd input: Scrapy's
        ("GET", f"http://shop.test/one?{FIELDS}&b1=B1", b""),
        ("GET", f"http://shop.test/elsewhere?q={q}", b""),
        ("POST", "http://shop.test/x/two", f"q={shch}&z=1&z=2".encode()),
    ]
    with pytest.raises(ValueError, match="Multiple elements"):
        FormRequest.from_response(r, formname="n1", clickdata={"name": "go"})
    assert FormRequest.from_response(r, clickdata={"nr": -1}).url.endswith(f"{FIELDS}&b2=B2")
    assert FormRequest.from_response(r, formdata=[("b1", "X")]).url.endswith(
        f"{FIELDS}&b1=B1&b1=X")  # a list of pairs: the button too, as Scrapy's  # fmt: skip
    quoted = HtmlResponse("http://shop.test/", encoding="utf-8", body='<form action="/1"></form>'
                          '<form name="l\'é &quot;x&quot;" action="/2"><input type="submit" '
                          'name="b" value="é"></form>')  # fmt: skip
    sent = FormRequest.from_response(quoted, formname="l'é \"x\"", clickdata={"value": "é"})
    assert sent.url == "http://shop.test/2?b=%C3%A9"  # both quotes, non-ASCII: found
    link = HtmlResponse("http://shop.test/x/", body=f'<meta charset="{charset}">'
                        '<a href="/s?q=привет д">x</a>'.encode(charset))  # fmt: skip
    assert link.follow(link.css("a")[0]).url == f"http://shop.test/s?q={q}%20{de}"
    assert [one.url for one in link.follow_all(css="a")] == [link.follow("/s?q=привет д").url]


def test_form_requests_encode_their_fields_and_a_get_replaces_the_query():
    assert FormRequest("http://a.test/p?page=1#f", method="GET",
                       formdata={"page": "2"}).url == "http://a.test/p?page=2#f"  # fmt: skip
    assert FormRequest("http://a.test/p", method=None, formdata={"page": "2"}).method == "POST"
    assert FormRequest("http://a.test/p", formdata={"q": "щ"}, encoding="cp1251").body == b"q=%F9"


def test_json_and_form_requests_replace_their_data_as_scrapys():
    replaced = [JsonRequest("http://a.test/", data={"a": 1}).replace(data={"b": 2}),
                JsonRequest("http://a.test/").replace(data={"c": 3}),
                FormRequest("http://a.test/s", formdata={"q": "x"}).replace(formdata={"q": "y"}),
                FormRequest("http://a.test/s?q=1", method="GET",
                            formdata={"q": "x"}).replace(formdata={"q": "z"})]  # fmt: skip
    assert [(r.method, r.url, r.body) for r in replaced] == [  # Scrapy 2.19's
        ("POST", "http://a.test/", b'{"b": 2}'), ("GET", "http://a.test/", b'{"c": 3}'),
        ("POST", "http://a.test/s", b"q=y"), ("GET", "http://a.test/s?q=z", b"")]  # fmt: skip


def test_a_json_request_keeps_its_dumps_kwargs_and_data_wins_over_a_body_of_none():
    unsorted = JsonRequest("http://a.test/", data={"b": 1}, dumps_kwargs={"sort_keys": False})
    replaced = unsorted.replace(data={"z": 1, "y": 2})
    moved = unsorted.replace(url="http://a.test/other")
    assert (replaced.body, replaced.dumps_kwargs, moved.body, moved.dumps_kwargs) == (
        b'{"z": 1, "y": 2}', {"sort_keys": False}, b'{"b": 1}', {"sort_keys": False})  # fmt: skip
    posted = JsonRequest("http://a.test/", data={"x": 1}, body=None)
    assert (posted.method, posted.body) == ("POST", b'{"x": 1}')  # Scrapy 2.19's


def test_headers_change_as_scrapys():
    r = Request("http://x.test/", headers={"Accept": "a", "Cookie": None})
    r.headers.update({"authorization": "Bearer tok"}, X_Num=1)
    assert r.headers.get("Authorization") == b"Bearer tok" and r.headers["x_num"] == b"1"
    copy = r.headers.copy()
    copy["accept"] = "b"
    del copy["AUTHORIZATION"]
    assert (copy.get("Accept"), copy.get("Authorization"), r.headers["Accept"]) == (
        b"b", None, b"a")  # fmt: skip
    assert (copy.get("Nope", "d"), copy.get("Nope", ["d", "e"]), copy.get("Nope", "")) == (
        b"d", b"e", b"")  # a default made bytes, as Scrapy's: .get(name, "").decode() works
    assert r.headers.pop("x_num") == [b"1"] and "X_Num" not in r.headers
    assert r.headers.pairs() == [("Accept", "a"), ("Authorization", "Bearer tok")]  # no Cookie
    assert "Cookie" in r.headers.copy() and r.headers.copy()["Cookie"] is None  # as Scrapy's
    r.headers.update([("Accept", "b"), ("accept", "c")])
    assert r.headers.getlist("Accept") == [b"b", b"c"]


def test_headers_setlist_setdefault_and_their_text_forms_are_scrapys():
    """Scrapy 2.19's results for the same calls."""
    h = Headers({"A": "1"})
    assert (h.setdefault("a", "x"), h.setdefault("B", "y"), h.setlistdefault("C", ["p", "q"])) == (
        [b"1"], [b"y"], [b"p", b"q"])  # fmt: skip
    assert h.to_string() == b"A: 1\r\nB: y\r\nC: p\r\nC: q"
    assert h.to_tuple_list() == [("A", "1"), ("B", "y"), ("C", "p"), ("C", "q")]
    h.setlist("a", ["u", "v"])
    assert (h.getlist("A"), h.has_key("c")) == ([b"u", b"v"], True)


def test_response_headers_are_scrapys_bytes_keyed_lists():
    """Scrapy 2.19's results for the same headers."""
    r = Response("http://x.test/", body=b"x", headers=[
        ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("content-type", "text/html")])  # fmt: skip
    assert list(r.headers.keys()) == [b"Set-Cookie", b"Content-Type"]
    assert list(r.headers.items()) == [(b"Set-Cookie", [b"a=1", b"b=2"]),
                                       (b"Content-Type", [b"text/html"])]  # fmt: skip
    assert r.headers.values() == [b"b=2", b"text/html"]
    text = r.headers.to_unicode_dict()
    assert (dict(text), text["set-cookie"]) == (
        {"Set-Cookie": "a=1,b=2", "Content-Type": "text/html"}, "a=1,b=2")  # fmt: skip
    assert (r.headers[b"content-type"], r.headers.get("CONTENT-TYPE")) == (b"text/html",) * 2


def test_requests_and_responses_copy_and_replace_as_scrapys():
    r = Request("http://x.test/", cookies=[{"name": "a", "value": "1", "domain": "x.test"}],
                meta={"k": 1})  # fmt: skip
    copy = r.copy()
    copy.meta["k"] = 2
    assert (copy.url, copy.cookies, r.meta) == (  # the cookies as given, as Scrapy's
        "http://x.test/", [{"name": "a", "value": "1", "domain": "x.test"}], {"k": 1})
    page = HtmlResponse("http://x.test/", body="<p>café</p>", encoding="latin-1",
                        headers={"Set-Cookie": ["a=1", "b=2"]})  # fmt: skip
    assert (page.body, page.text, page.css("p::text").get()) == (b"<p>caf\xe9</p>",
                                                                  "<p>café</p>", "café")
    assert page.replace(body=page.text.replace("é", "è")).body == b"<p>caf\xe8</p>"
    fixed = page.replace(body=b"<p>fixed</p>")
    assert (type(fixed), fixed.text, fixed.headers.getlist("Set-Cookie")) == (
        HtmlResponse, "<p>fixed</p>", [b"a=1", b"b=2"])  # fmt: skip
    with pytest.raises(TypeError):
        HtmlResponse("http://x.test/", body="<p>text without an encoding</p>")


@pytest.mark.parametrize(("outcome", "scrapy"), [  # older Scrapy's (Twisted's), then 2.19's
    ("ClientError", ["HttpError", "IgnoreRequest"]),
    ("ServerError", ["HttpError", "IgnoreRequest"]),
    ("TooManyRequests", ["HttpError", "IgnoreRequest"]),
    ("RedirectNotFollowed", ["HttpError", "IgnoreRequest"]),
    ("DNSFailure", ["DNSLookupError", "CannotResolveHostError"]),
    ("ConnectTimeout", ["TimeoutError", "TCPTimedOutError", "ConnectError",
                        "DownloadTimeoutError"]),
    ("ReadTimeout", ["TimeoutError", "DownloadTimeoutError"]),
    ("DeadlineExceeded", ["TimeoutError", "DownloadTimeoutError"]),
    ("ConnectFailed", ["ConnectionRefusedError", "ConnectError",
                       "DownloadConnectionRefusedError"]),
    ("ConnectionReset", ["ConnectionLost", "ResponseNeverReceived", "DownloadFailedError"]),
    ("ConnectionReset/ProtocolError: Connection broken: IncompleteRead(5 bytes read)",
     ["ConnectionLost", "ResponseDataLossError"]),  # the body cut short
    ("ProtocolError", ["ResponseNeverReceived", "DownloadFailedError"]),
    ("RobotsDisallowed", ["IgnoreRequest"]),
    ("HostUnreachable", ["ConnectError"]),
    ("HostUnreachable:connection refused", ["ConnectError", "ConnectionRefusedError",
                                            "DownloadConnectionRefusedError"]),
    ("HostUnreachable:name does not resolve", ["ConnectError", "DNSLookupError",
                                               "CannotResolveHostError"]),
])  # fmt: skip
def test_an_errbacks_failure_checks_as_scrapys_and_twisteds_exceptions(outcome, scrapy):
    import crawlplatform.spiders as api
    from crawlplatform.spiders import Failure
    from tasks.fetch import outcomes

    status = {"ClientError": 404, "ServerError": 503, "TooManyRequests": 429,
              "RedirectNotFollowed": 302}.get(outcome)  # fmt: skip
    outcome, _, message = outcome.partition("/")  # an outcome's own message
    outcome, _, cause = outcome.partition(":")  # a circuit open for that cause
    value = getattr(outcomes, outcome)(message or "no", status=status)
    value.summary = cause or value.summary
    failure = Failure(value, Request("http://x.test/"))
    kinds = ["HttpError", "IgnoreRequest", "DNSLookupError", "TimeoutError", "TCPTimedOutError",
             "ConnectError", "ConnectionRefusedError", "ConnectionLost", "ResponseNeverReceived",
             "CannotResolveHostError", "DownloadTimeoutError", "DownloadConnectionRefusedError",
             "DownloadFailedError", "ResponseDataLossError"]
    assert [k for k in kinds if failure.check(getattr(api, k))] == [k for k in kinds if k in scrapy]
    own = type(outcome, (Exception,), {})
    assert failure.check(own) is own  # by name, the platform's class too
    named = type(scrapy[0], (Exception,), {})  # Scrapy's or Twisted's class of that name
    assert failure.check(KeyError, named) is named and failure.trap(named) is named
    # Its value is what Scrapy 2.19 raises there (the last name listed), else the outcome
    raised = {"DownloadTimeoutError", "CannotResolveHostError", "DownloadConnectionRefusedError",
              "DownloadFailedError", "ResponseDataLossError", "IgnoreRequest"} & {scrapy[-1]}
    kind = getattr(api, scrapy[-1]) if raised and status is None else getattr(outcomes, outcome)
    assert isinstance(failure.value, kind) and failure.value.reason == value.reason
    with pytest.raises(kind):
        failure.trap(KeyError)
    assert failure.getTraceback() == f"{kind.__module__}.{kind.__name__}: {message or 'no'}\n"


def test_requests_keep_callbacks_by_name_and_bodies_as_bytes():
    class S(Spider):
        name = "s"

        def parse_item(self, response):
            pass

    spider = S(category="books")
    assert spider.category == "books" and spider.start_urls == []
    request = Request("http://x.test/", spider.parse_item, cb_kwargs={"n": 1}, meta={"k": 2})
    assert (request.callback_name, request.cb_kwargs, request.meta) == ("parse_item", {"n": 1},
                                                                         {"k": 2})  # fmt: skip
    with pytest.raises(TypeError):
        Request("http://x.test/", callback=lambda r: None)
    for url in ("/relative", "127.0.0.1:8080/x", "mailto:a@b.test"):  # Scrapy 2.19's refusals
        with pytest.raises(ValueError, match="Missing scheme"):
            Request(url)
    assert Request("data:,x").url == "data:,x" and Request("about:blank").url == "about:blank"
    post = JsonRequest("http://x.test/api", data={"b": 1, "a": [2]})
    assert (post.method, json.loads(post.body)) == ("POST", {"a": [2], "b": 1})
    unsorted = JsonRequest("http://x.test/", data={"b": "\xe9", "a": 1},
                           dumps_kwargs={"ensure_ascii": False})  # fmt: skip
    assert unsorted.body == b'{"a": 1, "b": "\xc3\xa9"}'  # sorted still, as Scrapy's
    assert FormRequest("http://x.test/s", formdata={"q": "a b"}).body == b"q=a+b"
    copy = post.replace(url="http://x.test/other")
    assert (type(copy), copy.url, copy.body) == (JsonRequest, "http://x.test/other", post.body)


def test_items_of_every_kind_become_json_and_a_drop_has_its_reason():
    @dataclasses.dataclass
    class Book:
        title: str
        price: float

    @attrs.define
    class Author:
        name: str

    assert items.as_json(Book("T", 1.5)) == {"title": "T", "price": 1.5}
    assert items.as_json(Author("A")) == {"name": "A"}
    assert items._drop_reason(DropItem("no price")) == "no price"
    quiet = DropItem("duplicate", log_level="DEBUG")  # Scrapy 2.19's form
    assert (items._drop_reason(quiet), quiet.log_level) == ("duplicate", "DEBUG")
    assert items._drop_reason(DropItem("seen", "INFO")) == "seen"
    for not_json in (float("nan"), float("inf"), [float("-inf")]):  # PostgreSQL's JSON has none
        with pytest.raises(ValueError, match="not JSON compliant"):
            items.as_json({"v": not_json})


def test_a_response_whose_body_is_not_text_has_no_text_nor_selectors_as_scrapys():
    """Scrapy 2.19's ``Response`` (an image, a PDF, ``application/octet-stream``): a callback
    that reads it as a page raises, and follows only the URLs it is given."""
    r = Response("http://x.test/a/b.bin", body=b"\x00<a href=x>",
                 headers={"Content-Type": "application/octet-stream"})  # fmt: skip
    with pytest.raises(AttributeError, match="isn't text"):
        r.text  # noqa: B018 (the property raises)
    for query in (r.css, r.xpath, r.jmespath):
        with pytest.raises(NotSupported, match="isn't text"):
            query("a")
    with pytest.raises(TypeError):
        r.follow_all(css="a")
    assert r.follow("c").url == "http://x.test/a/c"
    assert [q.url for q in r.follow_all(["d", "/e"])] == ["http://x.test/a/d", "http://x.test/e"]


def test_request_from_curl_is_scrapys():
    """Scrapy 2.19's requests for the same commands."""
    made = Request.from_curl(
        "curl 'https://api.test/v1/items?page=2' -H 'Accept: application/json' "
        "-H 'Cookie: sid=abc; theme=dark' --compressed", meta={"m": 1})  # fmt: skip
    assert (made.method, made.url, made.headers.getlist("Accept"), made.cookies, made.meta) == (
        "GET", "https://api.test/v1/items?page=2", [b"application/json"],
        {"sid": "abc", "theme": "dark"}, {"m": 1})  # fmt: skip
    posted = Request.from_curl("curl example.test/search -d 'q=shoes' -d 'size=9'")
    assert (posted.method, posted.url, posted.body) == (
        "POST", "http://example.test/search", b"q=shoes&size=9")  # fmt: skip
    put = Request.from_curl("curl -X PUT http://h.test/x --data-raw '$hello' -u user:pa:ss "
                            "-b 'a=1; b=2' -b cookies.txt")  # fmt: skip
    assert (put.method, put.body, put.cookies, put.headers["Authorization"]) == (
        "PUT", b"hello", {"a": "1", "b": "2"}, b"Basic dXNlcjpwYTpzcw==")  # fmt: skip
    with pytest.warns(UserWarning, match="Unrecognized options: --insecure, -L"):
        Request.from_curl("curl http://h.test/ --insecure -L")
    with pytest.raises(ValueError, match="Unrecognized options: --insecure"):
        Request.from_curl("curl http://h.test/ --insecure", ignore_unknown_options=False)
    with pytest.raises(ValueError, match='must start with "curl"'):
        Request.from_curl("wget http://h.test/")


def test_response_json_reads_utf8_whatever_the_charset_and_text_follows_it():
    r = TextResponse("http://x.test/",
                     headers={"Content-Type": "application/json; charset=latin-1"},
                     body='{"name": "café"}'.encode("latin-1"))  # fmt: skip
    assert r.json() == {"name": "café"} and r.encoding == "cp1252"
    utf8 = r.replace(body='{"name": "café"}'.encode())  # a charset JSON has no use for
    assert (utf8.json(), utf8.text) == ({"name": "café"}, '{"name": "cafÃ©"}')  # as Scrapy's


def test_urljoin_is_scrapys_for_every_kind_of_href():
    """Joins are cached by the base's directory and without the href's fragment: the result
    must still be Scrapy's, urllib's join on the page's URL made safe (``get_base_url``)."""
    bases = ["http://a/b/c.html", "http://a", "http://a/", "http://a/b/c?x=/y#z", "http://a/b/../c",
             "http://a/b//c", "http://a/b?", "http://a/b?#f", "https://a:8/b;p/c;q?r#s",
             "http://a/b/c/", "http://a#f", "http://a?q"]  # fmt: skip
    hrefs = ["", "#", "#x", "?y", "?", ";p", "d", "./d", "../d", "../../../d", "/d", "//h/d",
             "http://h/d", "http:d", "https:d", "d?e#f", "mailto:x", ".", "..", "d;e",
             "d/../e", "d#", "d#f#g", "?#", "?y#f", ";p#f", "../d#f", "//h/d#f", "#?y",
             "d#f", "//", "//?q#f", "http:", "http:?q", "HTTP:#f", "https:", "\x01?q", " ?q#f",
             "\t", "#a\tb", "d\n#f", "?q#\r", "mailto:x#", "https://h/d#", "http://h/d;#f",
             "d?#f", "///d", "http:///d"]  # fmt: skip
    for base in bases:
        for response in (TextResponse(base), TextResponse("http://other/x/y")):  # one cache
            for href in hrefs:
                expected = urljoin(safe_url_string(response.url), href)
                assert response.urljoin(href) == expected, (response.url, href)


def test_follow_all_takes_the_links_scrapy_takes():
    body = b"""<html><body><a href=" x \n">1</a><a>no href</a><a href="">self</a>
    <link href="/css"><span href="/span">not a link</span><a href="http://[bad">bad</a>
    <a href="#top">top</a></body></html>"""
    r = HtmlResponse("http://s.test/d/p?q=1", body=body)
    expected = ["http://s.test/d/x", "http://s.test/d/p?q=1", "http://s.test/css",
                "http://s.test/d/p?q=1#top"]  # fmt: skip
    assert [q.url for q in r.follow_all(css="a, link, span")] == expected
    assert [q.url for q in r.follow_all(xpath="//a | //link | //span")] == expected
    assert [q.url for q in r.follow_all(r.css("a, link, span"))] == expected
    assert [q.url for q in r.follow_all(css="a::attr(href)")][:1] == ["http://s.test/d/x"]
    with pytest.raises(ValueError, match="XPath error"):
        list(r.follow_all(xpath="//a["))


def test_requests_keep_scrapys_defaults_and_accept_assignment():
    plain = Request("http://s.test/")
    assert (plain.meta, plain.cb_kwargs, plain.headers, plain.cookies) == ({}, {}, {}, {})
    plain.meta["k"] = 1
    plain.headers["X-A"] = "b"
    assert plain.meta == {"k": 1} and plain.headers[b"x-a"] == b"b"
    plain.headers = {"Accept": "text/html"}
    assert plain.headers.getlist("accept") == [b"text/html"]
    assert plain.replace(url="http://s.test/2").headers.pairs() == [("Accept", "text/html")]


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("http://s.test/a b/ä?q=x y", "http://s.test/a%20b/%C3%A4?q=x%20y"),
        ("http://s.test/?a[]=1", "http://s.test/?a%5B%5D=1"),
        ("http://s.test/x?", "http://s.test/x"),
        ("http://s.test/x#", "http://s.test/x"),
        ("http://s.test/x?#f", "http://s.test/x#f"),
        ("http://s.test/x??#", "http://s.test/x??"),
        ("http://s.test?q", "http://s.test/?q"),
        ("http://bücher.test/x", "http://xn--bcher-kva.test/x"),
        ("HTTP://S.TEST/A", "http://s.test/A"),
        ('http://s.test/a"b<c>', "http://s.test/a%22b%3Cc%3E"),
        ("http://[::1]:8080/x", "http://[::1]:8080/x"),
        ("http://s.test/p?q=%20&r=a+b#f", "http://s.test/p?q=%20&r=a+b#f"),
        ("http://s.test/a##b", "http://s.test/a#%23b"),
        ("http://s.test/a#b#c?d", "http://s.test/a#b%23c?d"),
        ("http://s.test:65535/x", "http://s.test:65535/x"),
        ("http://s.test:080/x", "http://s.test:80/x"),
        ("http://s.test:/x", "http://s.test/x"),
        ("http://u:p@x@s.test/", "http://u:p%40x@s.test/"),
        ("http://s.test/q?a='1'", "http://s.test/q?a=%271%27"),
    ],
)
def test_a_requests_url_is_escaped_as_scrapys(given, url):
    """As Scrapy's Request (w3lib's safe_url_string; the expected URLs are Scrapy 2.19's),
    unless ``meta`` says ``verbatim_url``; a followed link is escaped the same way."""
    assert Request(given).url == url
    assert Request(given).url == url  # the second time from the cache
    assert Request(given, meta={"verbatim_url": True}).url == given
    page = HtmlResponse("http://s.test/d/p", body=b"<a href='../a b'>x</a>")
    assert [r.url for r in page.follow_all(css="a")] == ["http://s.test/a%20b"]


def test_a_port_out_of_range_is_refused_as_scrapys():
    for url in ("http://s.test:65536/x", "http://s.test:99999", "http://[::1]:123456/"):
        with pytest.raises(ValueError, match="Port out of range"):
            Request(url)
    for url in ("http://s.test:x/", "http://s.test:1:2/"):
        with pytest.raises(ValueError, match="Port could not be cast"):
            Request(url)


def test_what_a_request_leaves_empty_is_its_own_once_used():
    """A link's request keeps only its URL and callback; what it leaves as Scrapy's defaults
    is made on first use, and changing it changes that request alone."""
    first, second = Request("http://s.test/a"), Request("http://s.test/b")
    assert (first.method, first.body, first.encoding, first.priority, first.dont_filter,
            first.errback, first.flags, first.cookies) == ("GET", b"", "utf-8", 0, False,
                                                          None, [], {})  # fmt: skip
    first.flags.append("cached")
    first.cookies["sid"] = "1"
    first.meta["depth"] = 2
    first.cb_kwargs["page"] = 3
    first.headers["X-A"] = "b"
    first.priority, first.dont_filter, first.method = 5, True, "POST"
    assert (second.flags, second.cookies, second.meta, second.cb_kwargs, dict(second.headers),
            second.priority, second.dont_filter, second.method) == ([], {}, {}, {}, {}, 0,
                                                                    False, "GET")  # fmt: skip
    assert Request("http://s.test/c", flags=("x",), cookies={"k": "v"}).flags == ["x"]
    given = {"k": "v"}
    kept = Request("http://s.test/c", cookies=given)
    kept.cookies["other"] = "w"
    assert given == {"k": "v"} and kept.cookies == {"k": "v", "other": "w"}
    copy = first.replace(url="http://s.test/d")
    assert (copy.flags, copy.cookies, copy.method, copy.priority) == (["cached"], {"sid": "1"},
                                                                     "POST", 5)  # fmt: skip


def test_dict_items_need_no_itemadapter():
    """Importing itemadapter imports every item library installed (Scrapy's among them: half
    a second in each worker); a spider that yields dicts never pays it."""
    import subprocess
    import sys

    code = """
import os, sys
os.environ["DJANGO_SETTINGS_MODULE"] = "crawlplatform.settings"
import django
django.setup()
from crawlplatform.spiders import Response, Spider
from tasks.content import callbacks, items
from web.models import CrawlJob

class Dicts(Spider):
    name = "dicts"

    def parse(self, response):
        yield {"url": response.url, "n": [1, (2, 3)]}
        yield response.follow("next")

found = callbacks.call(Dicts(), "parse", Response("http://s.test/"), {}, CrawlJob(pk=1))
assert items.as_json(found.items[0]) == {"url": "http://s.test/", "n": [1, [2, 3]]}
assert len(found.requests) == 1
print("itemadapter" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_a_callback_past_its_time_ends_as_spider_timeout_and_the_next_one_runs():
    """Callbacks run on a thread kept for the calling thread; one that overruns keeps it, and
    the next callback gets a new one (here and in a forked child)."""
    import os
    import time

    from tasks.content import callbacks
    from tasks.fetch import outcomes
    from web.models import CrawlJob

    class Slow(Spider):
        name = "slow"

        def parse(self, response):
            time.sleep(float(response.url.rsplit("/", 1)[1]))
            yield {"url": response.url}

    job = CrawlJob(pk=1, settings={"SPIDER_CALLBACK_TIMEOUT_S": 0.3})
    spider = Slow()
    assert callbacks.call(spider, "parse", Response("http://s.test/0"), {}, job).items
    with pytest.raises(outcomes.SpiderTimeout):
        callbacks.call(spider, "parse", Response("http://s.test/2"), {}, job)
    assert callbacks.call(spider, "parse", Response("http://s.test/0"), {}, job).items
    child = os.fork()
    if child == 0:  # the parent's runner thread is not in the child
        try:
            found = callbacks.call(spider, "parse", Response("http://s.test/0"), {}, job).items
            os._exit(0 if found else 1)
        finally:
            os._exit(2)
    assert os.waitpid(child, 0)[1] == 0


@pytest.mark.parametrize(
    "head, title",
    [
        ("<title>  Tables \n of\tcontents </title>", "Tables of contents"),
        ("<meta charset=utf-8><title>First</title><title>2</title>", "First"),
        ("<title>Tables&#32;of&nbsp;contents</title>", "Tables of contents"),  # NBSP: a space
        ("", ""),
        ("</head><body><p>text<title>In the body</title><title>2</title>", "In the body"),
        ("<svg><title>In an svg</title></svg><title>2</title>", "In an svg"),
        ("<noscript><title>In a noscript</title></noscript><title>2</title>", "In a noscript"),
    ],
)
def test_a_spider_pages_title_is_the_one_a_crawls_page_has(head, title):
    """The title stored with a spider's page is read from the tree its callback parsed, and
    is the title the crawl's own parse gives the same page; none if the callback did not
    parse it."""
    from tasks.content import callbacks, parsing

    body = f"<html><head>{head}</head><body>{'<p>x</p>' * 500}</body></html>".encode()
    headers = {"Content-Type": "text/html; charset=utf-8"}
    response = TextResponse("http://s.test/", body=body, headers=headers)
    assert callbacks.page_title(response) == ""
    response.css("p")
    expected = parsing.parse_html(body, headers["Content-Type"], response.url, "ua").title
    assert callbacks.page_title(response) == expected == title


def test_selector_is_exported_for_fragments_a_response_carries():
    from crawlplatform.spiders import Selector, SelectorList

    found = Selector(text='<p><a href="/x">x</a></p>').css("a::attr(href)")
    assert isinstance(found, SelectorList) and found.get() == "/x"


@pytest.mark.parametrize(
    "body, charset",
    [
        ("\xa0lead<p>x</p>".encode(), "utf-8"),  # a space str.strip takes and bytes.strip not
        (b"<p>x</p>tail\x1c", "utf-8"),
        ("<p>x</p>tail\u2003".encode(), "utf-8"),
        ("\u3000<p>x</p>".encode(), "utf-8"),
        (b"\xef\xbb\xbf<p>bom</p>", "utf-8"),
        (b"\x00 <p>a\x00b</p> \x00", "utf-8"),
        (b"<p>caf\xe9 \xff</p>", "utf-8"),  # not UTF-8: replaced
        ("<p>café</p>".encode("latin-1"), "latin-1"),
        ("  <p>déjà</p>\n".encode(), "utf-8"),
        (b"", "utf-8"),
    ],
)
def test_the_tree_is_the_one_parsel_builds_from_the_text_as_in_scrapy(body, charset):
    """A UTF-8 body is parsed from its bytes when they are the bytes parsel would make from
    ``text``: every other body keeps parsel's tree of ``text``."""
    import parsel
    from w3lib.encoding import html_to_unicode

    header = f"text/html; charset={charset}"
    response = TextResponse("http://x.test/", headers={"Content-Type": header}, body=body)
    expected = parsel.Selector(text=html_to_unicode(header, body)[1], type="html")
    assert response.css("::text").getall() == expected.css("::text").getall()
    assert response.xpath("//p").getall() == expected.xpath("//p").getall()


def test_what_a_callback_yields_that_is_no_request_goes_to_the_pipelines_as_in_scrapy():
    """Scrapy 2.19 sends anything but a request (and None) to the item pipelines: one may make
    an item of it; what leaves them as no item is dropped as ``not_an_item``."""
    from tasks.content import callbacks
    from web.models import CrawlJob

    class Wrapping:
        def process_item(self, item):
            return {"text": item} if isinstance(item, str) else item

    class Odd(Spider):
        name = "odd"
        custom_settings = {"ITEM_PIPELINES": {Wrapping: 100}}

        def parse(self, response):
            yield "text"
            yield {"a": 1}
            yield ["a", "list"]
            yield None
            yield Request("http://s.test/next")

    spider = Odd()
    found = callbacks.call(spider, "parse", Response("http://s.test/0"), {}, CrawlJob(pk=1))
    assert found.items == ["text", {"a": 1}, ["a", "list"]]
    assert [r.url for r in found.requests] == ["http://s.test/next"]
    pipes = items.Pipelines(spider)
    assert [pipes.process(one) for one in found.items] == [
        ({"text": "text"}, ""), ({"a": 1}, ""), ({"repr": "['a', 'list']"}, "not_an_item")]


@pytest.mark.parametrize(("content_type", "body", "cls"), [  # Scrapy 2.19's responsetypes
    ("text/html; charset=utf-8", b"", "HtmlResponse"),
    ("application/xhtml+xml", b"", "HtmlResponse"),
    ("application/rss+xml", b"", "XmlResponse"),
    ("text/xml", b"", "XmlResponse"),
    ("application/json", b"", "JsonResponse"),
    ("text/csv", b"", "TextResponse"),
    ("application/javascript", b"", "TextResponse"),
    ("application/pdf", b"%PDF-1.4\n\x01\x02", "Response"),
    ("application/ld+json", b'{"a": 1}', "TextResponse"),  # no class by its type: text by its body
    ("", b"<!DOCTYPE html><p>x", "HtmlResponse"),
    ("", b'<?xml version="1.0"?><a/>', "XmlResponse"),
    ("", b"plain text", "TextResponse"),
    ("", b"\x01\x02", "Response"),
])  # fmt: skip
def test_a_callback_gets_the_response_class_scrapy_gives_the_answer(content_type, body, cls):
    from tasks.content import callbacks
    from tasks.fetch import fetching

    fetched = fetching.Response(
        url="http://s.test/a", final_url="http://s.test/a", status=200, content_type="",
        content_type_header=content_type, body=body, truncated=False, elapsed=0.1, headers={},
    )  # fmt: skip
    response = callbacks.response_of(fetched, Request("http://s.test/a"), 0)
    assert type(response).__name__ == cls


@pytest.mark.parametrize(("coding", "left", "cls"), [  # as Scrapy's HttpCompressionMiddleware
    ("gzip", [], "XmlResponse"),  # undone by the fetch: gone from the headers
    ("identity", [b"identity"], "TextResponse"),  # left on: the class from the URL and body
    ("UTF-8", [b"utf-8"], "TextResponse"),
])  # fmt: skip
def test_a_coding_the_fetch_undid_is_gone_from_the_headers_and_one_left_on_decides_the_class(
    coding, left, cls
):
    from tasks.content import callbacks
    from tasks.fetch import fetching

    fetched = fetching.Response(
        url="http://s.test/a", final_url="http://s.test/a", status=200, content_type="",
        content_type_header="application/xml", body=b"<r/>", truncated=False, elapsed=0.1,
        headers={}, http={"response": [["Content-Type", "application/xml"],
                                       ["Content-Encoding", coding]]},
    )  # fmt: skip
    response = callbacks.response_of(fetched, Request("http://s.test/a"), 0)
    assert (response.headers.getlist("Content-Encoding"), type(response).__name__) == (left, cls)


def test_a_callbacks_meta_has_scrapys_depth_latency_and_redirect_urls():
    from tasks.content import callbacks
    from tasks.fetch import fetching

    fetched = fetching.Response(
        url="http://s.test/a", final_url="http://s.test/c", status=200, content_type="text/html",
        content_type_header="text/html", body=b"", truncated=False, elapsed=0.25, headers={},
        redirects=["http://s.test/b", "http://s.test/c"], redirect_statuses=[301, 302], http={
            "protocol": "HTTP/1.1", "request": [["User-Agent", "ua/1"], ["Accept", "*/*"]],
            "ip": "127.0.0.2"},
    )  # fmt: skip
    asked = Request("http://s.test/a", meta={"m": 1}, headers={"Accept": "text/html"})
    response = callbacks.response_of(fetched, asked, 3, 60.0)
    assert (response.protocol, response.request.headers.to_unicode_dict()) == (
        "HTTP/1.1", {"Accept": "text/html", "User-Agent": "ua/1"})  # as sent; its own kept
    assert response.ip_address == ipaddress.ip_address("127.0.0.2")
    assert (response.url, response.meta) == ("http://s.test/c", {
        "m": 1, "depth": 3, "download_latency": 0.25, "download_slot": "s.test",
        "download_timeout": 60.0, "redirect_times": 2,
        "redirect_urls": ["http://s.test/a", "http://s.test/b"],
        "redirect_reasons": [301, 302]})  # fmt: skip
    # A start request (depth 0) says so, as Scrapy's StartSpiderMiddleware marks it; a request's
    # own download_timeout is kept, as Scrapy's DownloadTimeoutMiddleware keeps it.
    started = Request("http://S.test:8080/a", meta={"download_timeout": 2.5})
    assert {k: v for k, v in callbacks.response_of(fetched, started, 0, 60.0).meta.items()
            if k in ("depth", "download_slot", "download_timeout", "is_start_request")} == {
        "depth": 0, "download_slot": "s.test", "download_timeout": 2.5,
        "is_start_request": True}  # fmt: skip
    # As Scrapy's RedirectMiddleware: the response's request is the last hop's, and a POST
    # that a 302 turned into a GET lost its body and the body's headers.
    assert (response.request.url, response.request.method) == ("http://s.test/c", "GET")
    posted = Request("http://s.test/a", method="POST", body=b"q=1", headers={
        "Content-Type": "application/x-www-form-urlencoded", "X-Mine": "kept"})  # fmt: skip
    fetched.method, fetched.http = "GET", {}
    redirected = callbacks.response_of(fetched, posted, 3).request
    assert (redirected.url, redirected.method, redirected.body) == ("http://s.test/c", "GET", b"")
    assert redirected.headers.to_unicode_dict() == {"X-Mine": "kept"}
    refreshed = Request("http://s.test/a", meta={"redirect_times": 1, "redirect_urls": [
        "http://s.test/r"], "redirect_reasons": ["meta refresh"]})  # a meta refresh's request
    meta = callbacks.response_of(fetched, refreshed, 3).meta
    assert (meta["redirect_times"], meta["redirect_urls"], meta["redirect_reasons"]) == (
        3, ["http://s.test/r", "http://s.test/a", "http://s.test/b"],
        ["meta refresh", 301, 302])  # added to, as Scrapy's middlewares add: the cap holds


def test_a_filled_in_download_timeout_is_not_kept_by_the_requests_that_carry_it():
    """The job's deadline in response.meta is the platform's, not the request's: a request made
    with ``meta=response.meta`` is kept without it (fetched under the job's deadline of its
    own time, which may have been raised since); a request's own is kept."""
    from tasks.content import callbacks, rows
    from tasks.fetch import fetching

    fetched = fetching.Response(
        url="http://s.test/a", final_url="http://s.test/a", status=200, content_type="text/html",
        content_type_header="text/html", body=b"", truncated=False, elapsed=0.1, headers={})
    spider = Spider(name="carrier")
    meta = callbacks.response_of(fetched, Request("http://s.test/a"), 1, 60.0).meta
    assert meta["download_timeout"] == 60.0
    carried = rows.record(Request("http://s.test/b", meta=meta), spider)
    assert "download_timeout" not in carried["meta"] and carried["meta"]["depth"] == 1
    own = rows.record(Request("http://s.test/c", meta={**meta, "download_timeout": 60.0}), spider)
    assert own["meta"]["download_timeout"] == 60.0
    assert rows.download_timeout(carried) is None and rows.download_timeout(own) == 60.0


def test_items_declare_their_fields_as_scrapys():
    from crawlplatform.spiders import Field, Item

    class Product(Item):
        name = Field()
        price = Field(serializer=float)

    class Book(Product):
        isbn = Field()
        name = Field(required=True)  # redefined: its place stays the first

    book = Book(name="Dune", isbn="978")
    assert (list(Book.fields), Book.fields["name"], dict(book)) == (
        ["name", "price", "isbn"], {"required": True}, {"name": "Dune", "isbn": "978"})  # fmt: skip
    with pytest.raises(KeyError, match="Book does not support field: nmae"):
        book["nmae"] = "typo"
    with pytest.raises(KeyError):
        book.update(pages=3)
    with pytest.raises(AttributeError, match="Use item"):
        book.name  # noqa: B018
    with pytest.raises(AttributeError, match="Use item"):
        book.price = 2
    copied = book.copy()
    copied["price"] = 9.5
    assert (type(copied), "price" in book, book.deepcopy()) == (Book, False, book)
    assert items.is_item(book) and items.as_json(copied) == {"name": "Dune", "isbn": "978",
                                                              "price": 9.5}  # fmt: skip
    from itemadapter import ItemAdapter  # as Scrapy's items: what ItemLoader's processors read

    adapter = ItemAdapter(Book())
    assert (list(adapter.field_names()), adapter.get_field_meta("price")) == (
        ["name", "price", "isbn"], {"serializer": float})  # fmt: skip
    assert ItemAdapter.get_field_names_from_class(Book) == ["name", "price", "isbn"]
    assert len({book, copied}) == 2  # hashed by identity, as Scrapy's


def test_a_json_response_has_a_json_selector_for_jmespath_as_scrapys():
    body = b'{"results": [{"name": "a"}, {"name": "b"}], "next": "/api?page=2"}'
    api = TextResponse("http://x.test/api", headers={"Content-Type": "application/json"}, body=body)
    assert (api.selector.type, api.jmespath("results[*].name").getall()) == ("json", ["a", "b"])
    assert api.jmespath("next").get() == "/api?page=2"
    with pytest.raises(ValueError, match="Cannot use css on a Selector of type 'json'"):
        api.css("a")  # as Scrapy's JsonResponse


def test_html_and_xml_responses_parse_as_their_names_say():
    body = b'<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>T</title></feed>'
    xml = XmlResponse("http://x.test/feed", body=body, headers={"Content-Type": "text/plain"})
    xml.selector.register_namespace("a", "http://www.w3.org/2005/Atom")
    assert (xml.selector.type, xml.xpath("//a:title/text()").get()) == ("xml", "T")
    html = HtmlResponse("http://x.test/", body=b"<p>x", headers={"Content-Type": "text/xml"})
    assert (html.selector.type, TextResponse("http://x.test/", body=body, headers={
        "Content-Type": "application/atom+xml"}).selector.type) == ("html", "xml")  # fmt: skip
    # a TextResponse (text/plain, say) is parsed as its body reads, as since Scrapy 2.18
    kinds = [TextResponse("http://x.test/", body=text, headers={"Content-Type": "text/plain"})
             .selector.type for text in (b'{"a": 1}', body, b"<p>x", b"plain")]  # fmt: skip
    assert kinds == ["json", "xml", "html", "html"]


def test_what_json_has_no_type_for_in_meta_and_cb_kwargs_is_made_again_from_the_row():
    """A request's row keeps a Decimal, datetimes, dates, times, sets, frozensets, tuples and
    bytes tagged (JSON), and the request made from it has them as they were."""
    import datetime
    import decimal

    from tasks.content import rows

    carried = {"price": decimal.Decimal("9.90"), "at": datetime.datetime(2026, 1, 2, 3, 4, 5,
               tzinfo=datetime.UTC), "day": datetime.date(2026, 1, 2),
               "time": datetime.time(1, 2), "seen": {1, 2}, "frozen": frozenset({"a"}),
               "pair": (1, (2, 3)), "raw": b"\x00x", "list": [decimal.Decimal(1)], "none": None}
    spider = Spider(name="s")
    kept = rows.record(Request("http://s.test/x", meta={"item": carried},
                               cb_kwargs={"pair": (1, 2)}), spider)  # fmt: skip
    made = rows.request_of("http://s.test/x", json.loads(json.dumps(kept)))
    assert made.meta == {"item": carried} and made.cb_kwargs == {"pair": (1, 2)}


def test_a_callback_wrapped_without_functools_wraps_is_kept_by_the_name_the_spider_has():
    from tasks.content import rows

    def logged(method):
        def wrapper(self, response):
            yield from method(self, response)

        return wrapper

    class Wrapped(Spider):
        name = "wrapped"

        @logged
        def parse_item(self, response):
            yield {"url": response.url}

    spider = Wrapped()
    request = Request("http://s.test/x", callback=spider.parse_item, errback=spider.parse_item)
    kept = rows.record(request, spider)
    assert (request.callback_name, kept["callback"], kept["errback"]) == (
        "wrapper", "parse_item", "parse_item")  # fmt: skip


CLOSED: list[str] = []


@dataclasses.dataclass
class Book:
    title: str
    price: float | None = None


class PricedOnly:
    """Scrapy 2.14's form: no spider argument; reads the item as the callback made it."""

    def open_spider(self):
        CLOSED.clear()

    def process_item(self, item):
        if item.price is None:
            raise DropItem("no price")
        item.title = item.title.strip()
        return item

    def close_spider(self):
        CLOSED.append("priced")


class Stamped:
    """The older form: every method takes the spider, under a name of its own."""

    def process_item(self, item, the_spider):
        return {**dataclasses.asdict(item), "by": the_spider.name}

    def close_spider(self, the_spider):
        CLOSED.append("stamped")


def test_pipelines_take_the_item_as_yielded_with_or_without_the_spider_and_close_in_reverse():
    class Books(Spider):
        name = "books"
        custom_settings = {"ITEM_PIPELINES": {"tests.test_spider_api.PricedOnly": 100,
                                              "tests.test_spider_api.Stamped": 200}}  # fmt: skip

    pipes = items.Pipelines(Books())
    assert pipes.process(Book(" T ", 2.5)) == ({"title": "T", "price": 2.5, "by": "books"}, "")
    assert pipes.process(Book("U")) == ({"title": "U", "price": None}, "no price")
    pipes.close()
    assert CLOSED == ["stamped", "priced"]  # as Scrapy: the last opened closes first


def test_pipelines_given_as_classes_run_those_of_one_order_as_given():
    class Mark:
        def process_item(self, item):
            return {**item, "order": [*item.get("order", []), type(self).__name__]}

    class Z(Mark):
        pass

    class A(Mark):
        pass

    class Script(Spider):  # a one-file ``runspider`` script names its classes themselves
        name = "script"
        custom_settings = {"ITEM_PIPELINES": {Z: 300, A: 300}}

    assert items.Pipelines(Script()).process({"title": "T"}) == (
        {"title": "T", "order": ["Z", "A"]}, "")  # fmt: skip


def test_an_item_is_stored_as_item_scraped_handlers_leave_it_and_one_not_json_alone_is_dropped():
    class Signed(Spider):
        name = "signed"

        @classmethod
        def from_crawler(cls, crawler, *args, **kwargs):
            spider = super().from_crawler(crawler, *args, **kwargs)
            crawler.signals.connect(spider.sign, signal=signals.item_scraped)
            return spider

        def sign(self, item):
            item["sig"] = item["n"] * 10 if item["n"] < 3 else object()  # the third: no JSON

    crawler = Crawler(Settings({}), None)
    spider = crawler.spider = Signed.from_crawler(crawler)
    pipes = items.Pipelines(spider)
    assert pipes.process({"n": 1}) == ({"n": 1, "sig": 10}, "")
    kept, reason = pipes.process({"n": 2, "ratio": float("nan")})
    assert (kept, reason.split(":")[0]) == ({"repr": "{'n': 2, 'ratio': nan}"}, items.NOT_JSON)
    assert pipes.process({"n": 3}) == ({"n": 3}, "")  # kept as it was before the handler


class FromCrawler:
    """Made as Scrapy makes a pipeline with ``from_crawler``: the settings and the spider."""

    def __init__(self, timeout: float, spider_name: str) -> None:
        self.timeout, self.spider_name = timeout, spider_name

    @classmethod
    def from_crawler(cls, crawler):
        assert crawler.settings.get("MONGO_URI") == "mongodb://db"  # the spider's own
        return cls(crawler.settings.getfloat("FETCH_READ_TIMEOUT_S"), crawler.spider.name)

    def process_item(self, item):
        return {**item, "timeout": self.timeout, "spider": self.spider_name}


class WantsEngine:
    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.engine)


def test_pipelines_with_from_crawler_get_the_jobs_settings_and_spider():
    from tasks.content.items import PipelineProblem

    class Timed(Spider):
        name = "timed"
        custom_settings = {"FETCH_READ_TIMEOUT_S": 5.0, "MONGO_URI": "mongodb://db",
                           "ITEM_PIPELINES": ["tests.test_spider_api.FromCrawler"]}  # fmt: skip

    assert items.Pipelines(Timed()).process({"a": 1}) == ({"a": 1, "timeout": 5.0,
                                                           "spider": "timed"}, "")  # fmt: skip

    class Engine(Spider):
        name = "engine"
        custom_settings = {"ITEM_PIPELINES": ["tests.test_spider_api.WantsEngine"]}

    with pytest.raises(PipelineProblem, match="has settings, spider, stats and signals, not "
                                              "engine"):  # fmt: skip
        items.Pipelines(Engine())
    from tasks.content import spiders  # a spider's own setting is no job setting

    assert spiders.custom_settings(Timed)[::2] == ({"FETCH_READ_TIMEOUT_S": 5.0}, [])


def test_a_dict_from_a_page_that_looks_like_a_tag_comes_back_as_it_was(tmp_path):
    """What a spider carries in ``meta`` may be a site's own data: a dict that spells the
    row's tag for an item of a class (a module's function, say) is kept as the dict it was,
    and a row's tag only ever makes an item class."""
    import json

    from tasks.content import rows

    marker = tmp_path / "made"
    crafted = {rows._TYPE: "item", "class": "subprocess:Popen",
               "v": {"args": ["touch", str(marker)]}}  # fmt: skip
    meta = {"data": crafted, "decimal": {rows._TYPE: "decimal", "v": "1"}}
    request = Request("http://s.test/a", meta=meta)
    kept = json.loads(json.dumps(rows.record(request, Spider("s"))))
    assert rows.request_of("http://s.test/a", kept).meta == meta
    assert rows._untagged(crafted) == crafted["v"] and not marker.exists()  # no Popen


def test_a_spiders_credentials_go_to_its_auth_domain_else_its_own_domains_only():
    from tasks.content import rows

    def sent(url: str, **attributes) -> str | None:
        spider = Spider("s", http_user="me", http_pass="pw", **attributes)  # noqa: S106
        return rows._basic_auth(Request(url), spider)

    auth = "Basic bWU6cHc="
    assert sent("http://a.test/", http_auth_domain="a.test") == auth
    assert sent("http://www.a.test/", http_auth_domain="a.test") == auth
    assert sent("http://b.test/", http_auth_domain="a.test") is None
    assert sent("http://b.test/", http_auth_domain=None) == auth  # None: every host
    assert sent("http://a.test/", allowed_domains=["a.test"]) == auth  # none named: its own
    assert sent("http://b.test/", allowed_domains=["a.test"]) is None
    assert sent("http://b.test/") is None  # nowhere to send them safely


def test_a_meta_refresh_to_another_host_carries_no_credentials():
    from tasks.content import refresh

    page = b'<html><head><meta http-equiv="refresh" content="0; url=%s"></head></html>'
    asked = Request("http://a.test/p", headers={"Authorization": "Basic x", "Cookie": "c=1"})
    for target, kept in (("http://a.test/q", True), ("http://b.test/q", False)):
        response = HtmlResponse("http://a.test/p", body=page % target.encode(), request=asked)
        refreshed = refresh.meta_refresh(response, asked, 5)
        assert ("Authorization" in refreshed.headers, "Cookie" in refreshed.headers) == (
            kept, kept), target


def test_a_coroutine_that_blocks_the_loop_costs_its_caller_alone():
    """A coroutine past its time is given up with TimeoutError, and one that holds the loop
    (a time.sleep in an async def) leaves the coroutines after it a loop of their own."""
    import asyncio
    import time

    from crawlplatform.spiders import loop

    async def blocking() -> None:
        time.sleep(1.5)

    async def quick() -> str:
        await asyncio.sleep(0)
        return "done"

    with pytest.raises(TimeoutError):
        loop.run(blocking(), timeout=0.2)
    started = time.monotonic()
    assert loop.run(quick(), timeout=5) == "done"
    assert time.monotonic() - started < 1.0  # not behind the blocked loop


def test_the_loop_paused_for_a_fork_keeps_what_it_holds_and_runs_again():
    """The crawl command runs a spider's start() on its loop, then forks its workers: for the
    fork the loop's thread ends (a fork copies no thread), and after it the same loop serves
    again, with what a coroutine left on it (a queue, a session, a task) as it was."""
    import asyncio
    import threading

    from crawlplatform.spiders import loop

    held: dict = {}

    async def open_queue() -> threading.Thread:
        held["loop"] = asyncio.get_running_loop()
        held["queue"] = asyncio.Queue()
        held["task"] = asyncio.ensure_future(held["queue"].get())
        return threading.current_thread()

    async def put_and_take() -> str:
        held["queue"].put_nowait("kept")
        return await held["task"]

    serving = loop.run(open_queue(), timeout=5)
    assert serving.is_alive() and serving.name == "spider-asyncio"
    with loop.paused():
        assert not serving.is_alive()
        later = asyncio.run_coroutine_threadsafe(put_and_take(), held["loop"])
        assert not later.done()
    assert later.result(timeout=5) == "kept"  # served again, on its own: the same loop


def test_a_loop_busy_past_the_pause_is_left_running():
    """A coroutine that holds the loop (a time.sleep in an async def) past the pause's wait:
    the loop is left running, its stop called off, and serves what comes after."""
    import asyncio
    import threading
    import time

    from crawlplatform.spiders import loop

    async def where() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    started = threading.Event()

    async def blocking() -> None:
        started.set()
        time.sleep(0.6)

    async def quick() -> str:
        await asyncio.sleep(0.05)
        return "done"

    running = loop.run(where(), timeout=5)
    asyncio.run_coroutine_threadsafe(blocking(), running)
    assert started.wait(5)  # the loop is busy when the pause asks it to stop
    with loop.paused(wait=0.2):
        pass
    time.sleep(0.6)  # the blocking coroutine has ended: a stop left queued would run now
    assert asyncio.run_coroutine_threadsafe(quick(), running).result(timeout=3) == "done"
    assert loop.run(quick(), timeout=3) == "done"
