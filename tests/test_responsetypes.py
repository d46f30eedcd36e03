"""The response class a callback gets (``crawlplatform/spiders/responsetypes.py``) is the one
Scrapy 2.19's ``responsetypes`` gives the same answer: by its headers, its URL, its body."""

from __future__ import annotations

import gzip

import pytest
from scrapy.http import Headers as ScrapyHeaders
from scrapy.responsetypes import responsetypes

from crawlplatform.spiders.responsetypes import class_for

# Every extension Scrapy's table knows, and the headers and bodies that decide a class.
EXTENSIONS = sorted({ext for table in responsetypes.mimetypes.types_map for ext in table})
CONTENT_TYPES = ["", "text/html; charset=utf-8", "TEXT/XML", "application/rss+xml",
                 "application/json", "text/csv", "text", "application/octet-stream",
                 "application/x-gzip", "image/png", "application/ld+json", ";"]  # fmt: skip
BODIES = [b"", b"plain", b"<html><p>", b"<!DOCTYPE html><p>", b'<?xml version="1.0"?><a/>',
          b'<?xml version="1.0"?><!doctype html><html xmlns="x">', b"\x01\x02",
          b"\x00text", gzip.compress(b"<?xml")]  # fmt: skip


def _scrapy_class(content_type: str, body: bytes, url: str, disposition: str = "") -> str:
    headers = {}
    if content_type:
        headers["Content-Type"] = content_type
    if disposition:
        headers["Content-Disposition"] = disposition
    return responsetypes.from_args(headers=ScrapyHeaders(headers), url=url, body=body).__name__


def test_a_urls_extension_gives_the_class_scrapys_gives():
    for ext in EXTENSIONS:
        for url in (f"http://h/file{ext}", f"http://h/FILE{ext.upper()}", f"http://h/a{ext}.gz",
                    f"http://h/a{ext}?q=1"):  # fmt: skip
            for content_type in ("", "application/octet-stream"):
                assert class_for(content_type, b"", url).__name__ == _scrapy_class(
                    content_type, b"", url), (url, content_type)  # fmt: skip
        disposition = f'attachment; filename="report{ext}"'
        assert class_for("application/octet-stream", b"\x01", "http://h/x", disposition
                         ).__name__ == _scrapy_class("application/octet-stream", b"\x01",
                                                     "http://h/x", disposition), ext  # fmt: skip


@pytest.mark.parametrize("content_type", CONTENT_TYPES)
def test_a_callback_gets_the_class_scrapys_responsetypes_gives(content_type):
    for url in ("http://h/x", "http://h/x.xml", "http://h/x.xml.gz", "http://h:8080",
                "http://h/a.b/c"):  # fmt: skip
        for body in BODIES:
            assert class_for(content_type, body, url).__name__ == _scrapy_class(
                content_type, body, url), (url, body)  # fmt: skip


@pytest.mark.parametrize("disposition", ["attachment", 'attachment; filename="a.csv"',
                                         "inline; filename=a.html; x=y", "attachment; name",
                                         "attachment; filename*=UTF-8''a.xml"])  # fmt: skip
def test_content_disposition_names_the_class_as_in_scrapy(disposition):
    for content_type in ("", "application/octet-stream", "text/html"):
        expected = _scrapy_class(content_type, b"\x01", "http://h/x", disposition)
        assert class_for(content_type, b"\x01", "http://h/x", disposition).__name__ == expected

