"""The ported exporters (tasks/content/exporters.py) against Scrapy 2.19's own: the same items,
through the item table as a spider's pipelines store them, give the same bytes in every
format, with every option a feed takes."""

from __future__ import annotations

import dataclasses
import io
import itertools
import json

import pytest
import scrapy
from scrapy import exporters as scrapys

import crawlplatform.spiders as ours_api
from tasks.content import exporters
from tasks.content import items as itempipes

PAIRS = [("JsonLinesItemExporter", "jsonlines"), ("JsonItemExporter", "json"),
         ("CsvItemExporter", "csv"), ("XmlItemExporter", "xml")]  # fmt: skip
OPTIONS = [
    {}, {"indent": 0}, {"indent": 2}, {"indent": None}, {"encoding": "latin-1"},
    {"encoding": "utf-8"}, {"encoding": "utf-16"}, {"fields_to_export": ["url", "title", "zz"]},
    {"fields_to_export": {"url": "U", "title": "T", "seller": "S"}},
    {"export_empty_fields": True}, {"export_empty_fields": True, "fields_to_export": ["url", "zz"]},
]  # fmt: skip
FORMAT_OPTIONS = {
    "jsonlines": [{"sort_keys": True}, {"separators": (",", ":")}],
    "json": [{"sort_keys": True, "indent": 4}],
    "csv": [{"include_headers_line": False}, {"join_multivalued": "|"}, {"delimiter": ";"},
            {"quoting": 1}, {"errors": "replace", "encoding": "ascii"}],
    "xml": [{"item_element": "product", "root_element": "products"}],
}  # fmt: skip


class ScrapyProduct(scrapy.Item):
    url = scrapy.Field()
    title = scrapy.Field()
    price = scrapy.Field()
    seller = scrapy.Field()
    note = scrapy.Field()


class Product(ours_api.Item):
    url = ours_api.Field()
    title = ours_api.Field()
    price = ours_api.Field()
    seller = ours_api.Field()
    note = ours_api.Field()


@dataclasses.dataclass
class Listing:
    title: str
    url: str
    tags: list
    price: float | None = None


def _dicts() -> list[dict]:
    return [
        {"title": "Café", "url": "http://s.test/1", "tags": ["a", "b"], "n": [1, 2],
         "seller": {"name": "Zoë", "city": "Zürich", "rating": {"of": 5, "is": 4.5}},
         "none": None, "f": 1.5, "b": True, "rows": [{"k": 1, "a": [1, {"y": 1, "x": 2}]}]},
        {"url": "http://s.test/2", "title": 'ünï € =SUM(1) "q", c', "extra": "x"},
        {},
    ]  # fmt: skip


def _items(make) -> list:
    return [make(title="Café", url="http://s.test/1", price=2.5,
                 seller={"name": "Zoë", "city": "Zürich"}),
            make(url="http://s.test/2", title="ünï €")]  # fmt: skip


def _listings() -> list[Listing]:
    return [Listing("Café", "http://s.test/1", ["a", "b"], 2.5), Listing("€", "u", [])]


def _as_postgresql_keeps_it(value):
    """``value`` as jsonb gives it back: every object's keys by length, then bytes."""
    if isinstance(value, dict):
        ordered = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return {k: _as_postgresql_keeps_it(value[k]) for k in ordered}
    if isinstance(value, list):
        return [_as_postgresql_keeps_it(v) for v in value]
    return value


def _stored(item) -> exporters.Stored:
    """``item`` through the pipelines' last step and the item table, back."""
    data = itempipes.as_json(item)
    fields = itempipes.field_names(item, data)
    return exporters.Stored.of(_as_postgresql_keeps_it(data), json.loads(json.dumps(fields)))


def _run(writer, items) -> bytes | str:
    out = io.BytesIO()
    try:
        exporter = writer(out)
        exporter.start_exporting()
        for item in items:
            exporter.export_item(item)
        exporter.finish_exporting()
    except Exception as exc:  # the same error, where Scrapy's raises
        return f"{type(exc).__name__}: {exc}"
    return out.getvalue()


CASES = [(scrapy_name, fmt, options) for (scrapy_name, fmt), options in itertools.product(
    PAIRS, OPTIONS)] + [(name, fmt, options) for name, fmt in PAIRS
                        for options in FORMAT_OPTIONS[fmt]]  # fmt: skip


@pytest.mark.parametrize("scrapy_name,fmt,options", CASES)
def test_a_format_gives_scrapys_bytes_for_dicts_items_and_dataclasses(scrapy_name, fmt, options):
    mine = exporters.EXPORTERS[fmt]
    theirs = getattr(scrapys, scrapy_name)
    for originals, ported in [
        (_dicts(), _dicts()),
        (_items(ScrapyProduct), _items(Product)),
        (_listings(), _listings()),
    ]:
        expected = _run(lambda out: theirs(out, **dict(options)), originals)
        got = _run(lambda out: mine(out, **dict(options)), [_stored(i) for i in ported])
        assert got == expected, (fmt, options, type(originals[0]).__name__)


def test_the_options_scrapys_exporters_refuse_are_refused():
    with pytest.raises(TypeError, match="Unexpected options: colour"):
        exporters.XmlExporter(io.BytesIO(), colour="blue")
    with pytest.raises(TypeError):
        exporters.JsonExporter(io.BytesIO(), colour="blue")
    with pytest.raises(TypeError):
        exporters.CsvExporter(io.BytesIO(), delimiter=";;")
