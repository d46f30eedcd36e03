"""The public spider API (``crawlplatform.spiders``) by itself: Scrapy's names and behaviour."""

from __future__ import annotations

import dataclasses
import json

import attrs
import pytest

from crawlplatform.spiders import (
    DropItem,
    FormRequest,
    HtmlResponse,
    JsonRequest,
    Request,
    Response,
    Spider,
    TextResponse,
)
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


def test_form_from_response_fills_hidden_fields_and_clicks_as_asked():
    r = page()
    login = FormRequest.from_response(r, formname="login", formdata={"user": "bob"},
                                      clickdata={"name": "alt"})  # fmt: skip
    assert (login.method, login.url) == ("POST", "http://shop.test/login")
    assert login.body == b"csrf=T0K3N&user=bob&alt=Alt"
    assert login.headers[b"Content-Type"] == b"application/x-www-form-urlencoded"
    search = FormRequest.from_response(r, formcss="#search", formdata={"q": "shoes"})
    assert (search.method, search.url, search.body) == (
        "GET", "http://shop.test/shop/find?q=shoes", b"")  # fmt: skip
    by_xpath = FormRequest.from_response(r, formxpath="//input[@name='user']", dont_click=True)
    assert by_xpath.body == b"csrf=T0K3N&user="
    with pytest.raises(ValueError):
        FormRequest.from_response(r, formcss="#nothing")


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
    with pytest.raises(ValueError, match="Missing scheme"):
        Request("/relative")
    post = JsonRequest("http://x.test/api", data={"b": 1, "a": [2]})
    assert (post.method, json.loads(post.body)) == ("POST", {"a": [2], "b": 1})
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


def test_response_json_and_text_follow_the_declared_charset():
    r = Response("http://x.test/", headers={"Content-Type": "application/json; charset=latin-1"},
                 body='{"name": "café"}'.encode("latin-1"))  # fmt: skip
    assert r.json() == {"name": "café"} and r.encoding == "cp1252"
