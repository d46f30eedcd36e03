"""FEEDS in a spider's custom_settings, run under Scrapy 2.19 and, its imports changed, on the
platform: every feed file (JSON Lines, JSON, CSV, XML, gzip, batches, a path and an S3 key,
``%(name)s``, ``%(time)s`` and a spider argument in the URI) holds the same bytes."""

from __future__ import annotations

import csv
import gzip
import io
import json
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests import twins
from tests.s3server import S3Server
from tests.site import LocalSite, send

pytestmark = pytest.mark.django_db(transaction=True)

PAGES = 9
SELLERS = [("Zoë", "Zürich"), ("Ann", "Oslo"), ("Bob", "Lyon")]


class Catalogue(LocalSite):
    """``/p/0`` .. ``/p/8``, each a product page linking to the next (one after another: the
    order of the items is the chain's, under Scrapy and on the platform), and ``/leaf/N``,
    ``/hub`` linking to every leaf at once."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                kind, _, n = self.path.strip("/").partition("/")
                if kind == "hub":
                    body = "".join(f'<a href="/leaf/{i}">{i}</a>' for i in range(30))
                    send(self, 200, {}, f"<html><body>{body}</body></html>".encode())
                    return
                if kind not in ("p", "leaf") or not n.isdigit():
                    send(self, 404, {}, b"")
                    return
                send(self, 200, {}, _product(kind, int(n)).encode())

        super().__init__(Handler)


def _product(kind: str, n: int) -> str:
    title = {3: "Crème brûlée", 5: "Euro € sign", 7: '=SUM(A1) "quoted", comma'}.get(n, f"Item {n}")
    name, city = SELLERS[n % 3]
    tags = "".join(f"<li>t{n}-{k}</li>" for k in range(n % 3))
    last = kind != "p" or n + 1 == PAGES
    after = "" if last else f'<a class="next" href="/{kind}/{n + 1}">next</a>'
    return (f"<html><head><title>{title}</title></head><body><p class='price'>{n * 1.25}</p>"
            f"<ul>{tags}</ul><span class='seller'>{name}</span><span class='city'>{city}</span>"
            f"{after}</body></html>")  # fmt: skip


CATALOGUE = '''
import scrapy


class Product(scrapy.Item):
    url = scrapy.Field()
    title = scrapy.Field()
    price = scrapy.Field()
    tags = scrapy.Field()
    seller = scrapy.Field()
    note = scrapy.Field()  # never set: a CSV header has it, JSON does not


class CatalogueSpider(scrapy.Spider):
    name = "twin_catalogue"
    custom_settings = {
        "FEEDS": {
            "FEED_DIR/%(side)s/%(name)s.jsonl": {"format": "jsonlines"},
            "FEED_DIR/%(side)s/%(name)s-%(time)s.json": {"format": "json", "indent": 2},
            "FEED_DIR/%(side)s/plain.json": {"format": "json", "indent": None},
            "FEED_DIR/%(side)s/all.csv": {"format": "csv"},
            "FEED_DIR/%(side)s/renamed.csv": {"format": "csv",
                                              "fields": {"url": "link", "seller": "who"},
                                              "item_export_kwargs": {"delimiter": ";"}},
            "FEED_DIR/%(side)s/items.xml": {"format": "xml", "indent": 4,
                                            "item_export_kwargs": {"item_element": "product"}},
            "FEED_DIR/%(side)s/flat.xml": {"format": "xml", "encoding": "latin-1"},
            "FEED_DIR/%(side)s/items.jsonl.gz": {
                "format": "jsonlines", "gzip_mtime": 0,
                "postprocessing": ["scrapy.extensions.postprocessing.GzipPlugin"]},
            "FEED_DIR/%(side)s/batch-%(batch_id)02d.jl": {"format": "jl", "batch_item_count": 4,
                                                          "encoding": "utf-8"},
            "s3://feeds/%(side)s/%(name)s.json": {"format": "json"},
            "s3://feeds/%(side)s/fields.csv": {"format": "csv",
                                               "fields": ["url", "title", "missing"]},
            # last: an item this encoding cannot hold is left out of it; Scrapy leaves it
            # out of the feeds listed after it too
            "FEED_DIR/%(side)s/latin.csv": {"format": "csv", "encoding": "latin-1",
                                            "fields": ["title", "price", "url"],
                                            "overwrite": True},
        },
        "FEED_EXPORT_INDENT": 0,
        "AWS_ENDPOINT_URL": "S3_ENDPOINT",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION_NAME": "us-east-1",
    }

    async def start(self):
        yield scrapy.Request(self.seed)

    def parse(self, response):
        yield Product(
            title=response.css("title::text").get(),
            url=response.url,
            price=float(response.css(".price::text").get()),
            tags=response.css("li::text").getall(),
            seller={"name": response.css(".seller::text").get(),
                    "city": response.css(".city::text").get()},
        )
        yield from response.follow_all(css="a.next")
'''


def _source(feed_dir: Path, endpoint: str) -> str:
    return CATALOGUE.replace("FEED_DIR", str(feed_dir)).replace("S3_ENDPOINT", endpoint)


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by its name, the run's time in a name as TIME."""
    found = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = path.name
        if name.startswith("twin_catalogue-"):
            assert name.endswith("+00-00.json") and "T" in name, name  # Scrapy's %(time)s
            name = "twin_catalogue-TIME.json"
        found[name] = path.read_bytes()
    return found


def test_a_spiders_feeds_hold_scrapys_bytes_in_every_format(worker_env, tmp_path):
    feeds = tmp_path / "feeds"
    with Catalogue() as site, S3Server("feeds") as s3:
        source = _source(feeds, s3.endpoint)
        twins.under_scrapy(source, tmp_path, {"seed": site.url("/p/0"), "side": "scrapy"},
                           output=False)  # fmt: skip
        twins.on_platform(source, "twin_catalogue", worker_env, tmp_path,
                          {"seed": site.url("/p/0"), "side": "platform"},
                          ["--workers", "2"], output=False)  # fmt: skip
        stored = {side: {key: s3.get("feeds", f"{side}/{key}")
                         for key in ("twin_catalogue.json", "fields.csv")}
                  for side in ("scrapy", "platform")}  # fmt: skip
    scrapy, ours = _files(feeds / "scrapy"), _files(feeds / "platform")
    assert sorted(ours) == sorted(scrapy) == sorted([
        "twin_catalogue.jsonl", "twin_catalogue-TIME.json", "plain.json", "latin.csv", "all.csv",
        "renamed.csv", "items.xml", "flat.xml", "items.jsonl.gz", "batch-01.jl", "batch-02.jl",
        "batch-03.jl"])  # fmt: skip
    for name, expected in scrapy.items():
        assert ours[name] == expected, name
    assert stored["platform"] == stored["scrapy"]

    # What the bytes hold, read as a reader reads them.
    rows = [json.loads(line) for line in scrapy["twin_catalogue.jsonl"].splitlines()]
    assert len(rows) == PAGES and list(rows[0]) == ["url", "title", "price", "tags", "seller"]
    assert json.loads(scrapy["twin_catalogue-TIME.json"]) == rows
    assert scrapy["twin_catalogue-TIME.json"].startswith(b'[\n{\n  "url"')
    assert gzip.decompress(scrapy["items.jsonl.gz"]) == scrapy["twin_catalogue.jsonl"]
    latin = list(csv.reader(io.StringIO(scrapy["latin.csv"].decode("latin-1"))))
    assert latin[0] == ["title", "price", "url"] and len(latin) == PAGES  # the € row left out
    assert ["Crème brûlée", "3.75", site.url("/p/3")] in latin
    header = next(csv.reader(io.StringIO(scrapy["all.csv"].decode())))
    assert header == ["url", "title", "price", "tags", "seller", "note"]  # declared fields
    assert len(ET.fromstring(scrapy["items.xml"]).findall("product")) == PAGES  # noqa: S314
    assert scrapy["flat.xml"].startswith(b'<?xml version="1.0" encoding="latin-1"?>\n<items>')
    assert b"&#8364;" in scrapy["flat.xml"]
    assert [len(scrapy[f"batch-0{n}.jl"].splitlines()) for n in (1, 2, 3)] == [4, 4, 1]


HUB = '''
import scrapy


class HubSpider(scrapy.Spider):
    name = "twin_hub"
    custom_settings = {"FEEDS": {"FEED_DIR/%(side)s/leaves.csv": {"format": "csv"},
                                 "FEED_DIR/%(side)s/leaves.jsonl": {"format": "jsonl"}}}

    async def start(self):
        yield scrapy.Request(self.seed, callback=self.hub)

    def hub(self, response):
        yield from response.follow_all(css="a", callback=self.parse)

    def parse(self, response):
        yield {"title": response.css("title::text").get(), "url": response.url,
               "price": response.css(".price::text").get()}
'''


def test_feeds_of_a_crawl_on_two_workers_hold_scrapys_items_in_some_order(worker_env, tmp_path):
    feeds = tmp_path / "feeds"
    source = HUB.replace("FEED_DIR", str(feeds))
    with Catalogue() as site:
        args = {"seed": site.url("/hub")}
        twins.under_scrapy(source, tmp_path, {**args, "side": "scrapy"}, output=False)
        twins.on_platform(source, "twin_hub", worker_env, tmp_path, {**args, "side": "platform"},
                          ["--workers", "2", "--concurrency", "8"], output=False)  # fmt: skip
    for name in ("leaves.csv", "leaves.jsonl"):
        scrapy = (feeds / "scrapy" / name).read_bytes().splitlines(keepends=True)
        ours = (feeds / "platform" / name).read_bytes().splitlines(keepends=True)
        if name.endswith(".csv"):  # the header first, exactly; rows in any order
            assert ours[0] == scrapy[0] == b"title,url,price\r\n"
            scrapy, ours = scrapy[1:], ours[1:]
        assert len(ours) == 30 and sorted(ours) == sorted(scrapy)
