"""Scrapy 2.19's item exporters (``scrapy/exporters.py``), ported to the items a job stores:
``jsonlines`` (``jsonl``, ``jl``), ``json``, ``csv`` and ``xml`` give the bytes Scrapy's
``JsonLinesItemExporter``, ``JsonItemExporter``, ``CsvItemExporter`` and ``XmlItemExporter``
give for the same items, so a reader of a Scrapy feed reads ours unchanged.

An item is read from the item table (``Stored``): its JSON, and its field names in the order
Scrapy's exporters take them (an ``Item``'s or a dataclass's declared fields, a dict's keys;
``Item.fields``; a field's ``serializer`` made its value when it was kept:
``items.as_stored``). What the table cannot give back is what JSON lost: a tuple or a set (a
list), a date or a datetime (ISO text, with a ``T`` where ``str()`` of a datetime has a space
in Scrapy's CSV and XML).

Options as Scrapy's: ``encoding``, ``fields_to_export`` (a list, or a dict of field to column
name), ``export_empty_fields``, ``indent``, and each exporter's own keyword arguments
(``json.JSONEncoder``'s, ``csv.writer``'s with ``include_headers_line``, ``join_multivalued``
and ``errors``, ``item_element`` and ``root_element`` for XML).
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Iterable, Mapping
from io import TextIOWrapper
from typing import IO, Any, NamedTuple
from xml.sax.saxutils import XMLGenerator
from xml.sax.xmlreader import AttributesImpl

log = logging.getLogger(__name__)


class Stored(NamedTuple):
    """An item as the item table keeps it."""

    data: dict
    names: list[str] | None = None  # field names in the exporters' order; None: data's keys

    @classmethod
    def of(cls, data: dict, fields: list | None) -> Stored:
        """From an ``Item`` row: its ``data``, its objects' keys put back in the order
        ``fields`` keeps (``tasks/content/items.py``, ``field_names``)."""
        if fields is None:
            return cls(data)
        return cls(_ordered(data, fields), [e if isinstance(e, str) else e[0] for e in fields])

    def field_names(self) -> list[str]:
        """``ItemAdapter(item).field_names()`` of the item it was."""
        return list(self.data) if self.names is None else self.names

    def populated(self) -> list[str]:
        """Its populated fields, declared ones first (Scrapy's ``_get_populated_field_names``)."""
        declared = [name for name in self.field_names() if name in self.data]
        return list(dict.fromkeys([*declared, *self.data]))


def _ordered(value: Any, order: list | dict | None) -> Any:
    """``value`` with its objects' keys in ``order`` (``items.order_of``)."""
    if order is None:
        return value
    if isinstance(order, dict):
        if not isinstance(value, list):
            return value
        each = order.get("list") or []
        return [_ordered(v, each[n] if n < len(each) else None) for n, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    out = {}
    for entry in order:
        name, inner = (entry, None) if isinstance(entry, str) else entry
        if name in value:
            out[name] = _ordered(value[name], inner)
    out.update((key, each) for key, each in value.items() if key not in out)
    return out


def _is_listlike(value: Any) -> bool:
    return hasattr(value, "__iter__") and not isinstance(value, str | bytes)


class BaseExporter:
    """Scrapy's ``BaseItemExporter``: the options every format takes, and which fields of an
    item are written, in which order."""

    def __init__(self, *, dont_fail: bool = False, **options: Any) -> None:
        self.encoding: str | None = options.pop("encoding", None)
        self.fields_to_export: Mapping[str, str] | Iterable[str] | None = options.pop(
            "fields_to_export", None)  # fmt: skip
        self.export_empty_fields: bool = options.pop("export_empty_fields", False)
        self.indent: int | None = options.pop("indent", None)
        if not dont_fail and options:
            raise TypeError(f"Unexpected options: {', '.join(options.keys())}")
        self.kwargs = options  # the rest: the format's own (json.JSONEncoder's, csv.writer's)

    def start_exporting(self) -> None:
        pass

    def finish_exporting(self) -> None:
        pass

    def export_item(self, item: Stored) -> None:
        raise NotImplementedError

    def serialize_field(self, name: str, value: Any) -> Any:
        return value

    def get_serialized_fields(
        self, item: Stored, default_value: Any = None, include_empty: bool | None = None
    ) -> Iterable[tuple[str, Any]]:
        if include_empty is None:
            include_empty = self.export_empty_fields
        data = item.data
        if self.fields_to_export is None:
            names: Iterable = item.field_names() if include_empty else item.populated()
        elif isinstance(self.fields_to_export, Mapping):
            names = (self.fields_to_export.items() if include_empty else
                     ((x, y) for x, y in self.fields_to_export.items() if x in data))  # fmt: skip
        elif include_empty:
            names = self.fields_to_export
        else:
            names = (x for x in self.fields_to_export if x in data)
        for name in names:
            field, output = (name, name) if isinstance(name, str) else name
            value = self.serialize_field(output, data[field]) if field in data else default_value
            yield output, value


class JsonLinesExporter(BaseExporter):
    def __init__(self, file: IO[bytes], **options: Any) -> None:
        super().__init__(dont_fail=True, **options)
        self.file = file
        self.kwargs.setdefault("ensure_ascii", not self.encoding)
        self.encoder = json.JSONEncoder(**self.kwargs)

    def export_item(self, item: Stored) -> None:
        data = self.encoder.encode(dict(self.get_serialized_fields(item))) + "\n"
        self.file.write(data.encode(self.encoding or "utf-8"))


class JsonExporter(BaseExporter):
    def __init__(self, file: IO[bytes], **options: Any) -> None:
        super().__init__(dont_fail=True, **options)
        self.file = file
        # Scrapy's: an indent of 0 puts each item on a line of its own, without indenting
        json_indent = self.indent if self.indent is not None and self.indent > 0 else None
        self.kwargs.setdefault("indent", json_indent)
        self.kwargs.setdefault("ensure_ascii", not self.encoding)
        self.encoder = json.JSONEncoder(**self.kwargs)
        self.first_item = True

    def _beautify_newline(self) -> None:
        if self.indent is not None:
            self.file.write(b"\n")

    def start_exporting(self) -> None:
        self.file.write(b"[")
        self._beautify_newline()

    def finish_exporting(self) -> None:
        self._beautify_newline()
        self.file.write(b"]")

    def export_item(self, item: Stored) -> None:
        data = self.encoder.encode(dict(self.get_serialized_fields(item)))
        data_bytes = data.encode(self.encoding or "utf-8")  # before the comma, as Scrapy's
        if self.first_item:
            self.first_item = False
        else:
            self.file.write(b",")
            self._beautify_newline()
        self.file.write(data_bytes)


class XmlExporter(BaseExporter):
    def __init__(self, file: IO[bytes], **options: Any) -> None:
        self.item_element = options.pop("item_element", "item")
        self.root_element = options.pop("root_element", "items")
        super().__init__(**options)
        if not self.encoding:
            self.encoding = "utf-8"
        self.stream = TextIOWrapper(file, encoding=self.encoding, errors="xmlcharrefreplace",
                                    newline="\n", write_through=True)  # fmt: skip
        self.xg = XMLGenerator(self.stream, encoding=self.encoding)

    def _beautify_newline(self, new_item: bool = False) -> None:
        if self.indent is not None and (self.indent > 0 or new_item):
            self.xg.characters("\n")

    def _beautify_indent(self, depth: int = 1) -> None:
        if self.indent:
            self.xg.characters(" " * self.indent * depth)

    def start_exporting(self) -> None:
        self.xg.startDocument()
        self.xg.startElement(self.root_element, AttributesImpl({}))
        self._beautify_newline(new_item=True)

    def export_item(self, item: Stored) -> None:
        self._beautify_indent(depth=1)
        self.xg.startElement(self.item_element, AttributesImpl({}))
        self._beautify_newline()
        for name, value in self.get_serialized_fields(item, default_value=""):
            self._export_xml_field(name, value, depth=2)
        self._beautify_indent(depth=1)
        self.xg.endElement(self.item_element)
        self._beautify_newline(new_item=True)

    def finish_exporting(self) -> None:
        self.xg.endElement(self.root_element)
        self.xg.endDocument()
        self.stream.detach()  # the file is the caller's to close

    def _export_xml_field(self, name: str, value: Any, depth: int) -> None:
        self._beautify_indent(depth=depth)
        self.xg.startElement(name, AttributesImpl({}))
        if hasattr(value, "items"):
            self._beautify_newline()
            for subname, subvalue in value.items():
                self._export_xml_field(subname, subvalue, depth=depth + 1)
            self._beautify_indent(depth=depth)
        elif _is_listlike(value):
            self._beautify_newline()
            for each in value:
                self._export_xml_field("value", each, depth=depth + 1)
            self._beautify_indent(depth=depth)
        else:
            self.xg.characters(value if isinstance(value, str) else str(value))
        self.xg.endElement(name)
        self._beautify_newline()


class CsvExporter(BaseExporter):
    def __init__(self, file: IO[bytes], include_headers_line: bool = True,
                 join_multivalued: str = ",", errors: str | None = None,
                 **options: Any) -> None:  # fmt: skip
        super().__init__(dont_fail=True, **options)
        if not self.encoding:
            self.encoding = "utf-8"
        self.include_headers_line = include_headers_line
        self.stream = TextIOWrapper(file, line_buffering=False, write_through=True,
                                    encoding=self.encoding, newline="", errors=errors)  # fmt: skip
        self.csv_writer = csv.writer(self.stream, **self.kwargs)
        self._headers_not_written = True
        self._join_multivalued = join_multivalued
        self._autodetected_fields = False
        self._data_loss_warned = False

    def serialize_field(self, name: str, value: Any) -> Any:
        if isinstance(value, list | tuple):
            try:
                return self._join_multivalued.join(value)
            except TypeError:  # not every value is text
                pass
        return value

    def export_item(self, item: Stored) -> None:
        if self._headers_not_written:
            self._headers_not_written = False
            self._write_headers_and_set_fields_to_export(item)
        if (self._autodetected_fields and self.fields_to_export is not None
                and not self._data_loss_warned):  # fmt: skip
            dropped = set(item.field_names()) - set(self.fields_to_export)
            if dropped:
                log.warning("CSVExporter dropped fields %s. To avoid this, fully configure "
                            "your FEED_EXPORT_FIELDS setting.", sorted(dropped))  # fmt: skip
                self._data_loss_warned = True
        fields = self.get_serialized_fields(item, default_value="", include_empty=True)
        self.csv_writer.writerow(list(self._build_row(value for _, value in fields)))

    def finish_exporting(self) -> None:
        self.stream.detach()  # the file is the caller's to close

    def _build_row(self, values: Iterable[Any]) -> Iterable[Any]:
        for value in values:
            yield value.decode(self.encoding) if isinstance(value, bytes) else value

    def _write_headers_and_set_fields_to_export(self, item: Stored) -> None:
        if not self.include_headers_line:
            return
        if not self.fields_to_export:
            self.fields_to_export = item.field_names()  # the first item's, as Scrapy's
            self._autodetected_fields = True
        names = (self.fields_to_export.values() if isinstance(self.fields_to_export, Mapping)
                 else self.fields_to_export)  # fmt: skip
        self.csv_writer.writerow(list(self._build_row(names)))


EXPORTERS: dict[str, type[BaseExporter]] = {
    "json": JsonExporter,
    "jsonlines": JsonLinesExporter,
    "jsonl": JsonLinesExporter,
    "jl": JsonLinesExporter,
    "csv": CsvExporter,
    "xml": XmlExporter,
}
