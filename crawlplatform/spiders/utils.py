"""Scrapy 2.19's utilities behind the sitemap and feed spiders, by their names and with their
results (``scrapy.utils.sitemap``, ``.iterators`` and ``.gz``): ``Sitemap`` and
``sitemap_urls_from_robots``; ``xmliter_lxml``, which gives an ``XMLFeedSpider`` its nodes
one at a time; ``csviter``, which gives a ``CSVFeedSpider`` its rows; ``gunzip`` within a
size cap and ``gzip_magic_number``; and the small ones a spider imports (``arg_to_iter``,
``to_unicode``, ``to_bytes``). ``tests/test_feed_utils.py`` and ``tests/test_porting.py`` hold
them to Scrapy's own on the same bytes.

XML is read without entity expansion or network access (libxml2's ``resolve_entities`` off,
``no_network`` on), so a billion-laughs or external-entity body yields nothing harmful; a
decompression stops as soon as its output passes the cap.
"""

from __future__ import annotations

import csv
import logging
import struct
from collections.abc import Iterable, Iterator
from gzip import GzipFile
from io import BytesIO, StringIO
from typing import Any
from urllib.parse import urljoin

import lxml.etree

from crawlplatform.spiders.response import Response, TextResponse
from crawlplatform.spiders.selector import Selector

logger = logging.getLogger(__name__)


class Sitemap:
    """A sitemap (``type`` ``urlset``) or sitemap index (``sitemapindex``), read as it is
    iterated: a dict for each ``<url>`` or ``<sitemap>`` with a ``<loc>``, its other children
    by their local names and, if it has ``<xhtml:link>`` elements, their ``href`` as
    ``alternate``. Any other root gives its own name as the type; a body that is no XML at
    all raises as Scrapy's does."""

    __slots__ = ("type", "xmliter")

    def __init__(self, xmltext: str | bytes) -> None:
        if isinstance(xmltext, str):
            xmltext = xmltext.encode()
        self.xmliter = lxml.etree.iterparse(
            BytesIO(xmltext), recover=True, remove_comments=True, resolve_entities=False,
            remove_blank_text=True, collect_ids=False, remove_pis=True, events=("start", "end"),
        )  # fmt: skip
        _, root = next(self.xmliter)
        self.type = self._get_tag_name(root)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for event, elem in self.xmliter:
            if event == "start" or self._get_tag_name(elem) not in ("url", "sitemap"):
                continue
            if entry := self._process_sitemap_element(elem):
                yield entry

    def _process_sitemap_element(self, elem: lxml.etree._Element) -> dict[str, Any] | None:
        """The entry of one ``<url>`` or ``<sitemap>`` (None without a ``<loc>``); the
        elements read so far are freed, so a large sitemap is never held whole."""
        entry: dict[str, Any] = {}
        alternate: list[str] = []
        has_loc = False
        for el in elem:
            try:
                tag_name = self._get_tag_name(el)
                if not tag_name:
                    continue
                if tag_name == "link":
                    if href := el.get("href"):
                        alternate.append(href)
                else:
                    entry[tag_name] = el.text.strip() if el.text else ""
                    has_loc = has_loc or tag_name == "loc"
            finally:
                el.clear()
        elem.clear()
        parent = elem.getparent()
        if parent is not None:
            while elem.getprevious() is not None:
                del parent[0]
        if not has_loc:
            return None
        if alternate:
            entry["alternate"] = alternate
        return entry

    @staticmethod
    def _get_tag_name(elem: lxml.etree._Element) -> str:
        tag = elem.tag
        if not isinstance(tag, str):
            return ""  # a comment or processing instruction left by recovery
        _, _, localname = tag.partition("}")
        return localname or tag


def sitemap_urls_from_robots(robots_text: str | bytes,
                             base_url: str | None = None) -> Iterator[str]:  # fmt: skip
    """The URLs of a robots.txt's ``Sitemap:`` lines (any case, anywhere in the file), made
    absolute against ``base_url``; a line that is no UTF-8 is skipped."""
    if isinstance(robots_text, str):
        for line in StringIO(robots_text):
            if line.lstrip()[:8].lower() == "sitemap:":
                yield urljoin(base_url or "", line.partition(":")[2].strip())
        return
    for raw in BytesIO(robots_text):
        if raw.lstrip()[:8].lower() == b"sitemap:":
            try:
                url = raw.partition(b":")[2].strip().decode()
            except UnicodeDecodeError:
                continue
            yield urljoin(base_url or "", url)


_CHUNK_SIZE = 65536  # bytes a decompression step gives at most, as Scrapy's


class DecompressionMaxSizeExceeded(ValueError):
    """A body decompressed past the cap it was given (Scrapy's
    ``_DecompressionMaxSizeExceeded``)."""

    def __init__(self, decompressed_size: int, max_size: int) -> None:
        super().__init__(decompressed_size, max_size)
        self.decompressed_size = decompressed_size
        self.max_size = max_size

    def __str__(self) -> str:
        return (f"The number of bytes decompressed so far ({self.decompressed_size} B) "
                f"exceeded the specified maximum ({self.max_size} B).")  # fmt: skip


def gunzip(data: bytes, *, max_size: int = 0) -> bytes:
    """``data`` gunzipped, as much of it as can be (a bad checksum or a cut-off end keeps what
    came before); DecompressionMaxSizeExceeded once more than ``max_size`` bytes (0: no cap)
    come out."""
    f = GzipFile(fileobj=BytesIO(data))
    output_stream = BytesIO()
    chunk = b"."
    decompressed_size = 0
    while chunk:
        try:
            chunk = f.read1(_CHUNK_SIZE)
        except (OSError, EOFError, struct.error):
            if output_stream.getbuffer().nbytes > 0:
                break  # what came out before the damage is kept
            raise
        decompressed_size += len(chunk)
        if max_size and decompressed_size > max_size:
            raise DecompressionMaxSizeExceeded(decompressed_size, max_size)
        output_stream.write(chunk)
    return output_stream.getvalue()


def gzip_magic_number(response: Response) -> bool:
    """Whether the body is gzip data (its first bytes), whatever the headers say."""
    return response.body[:3] == b"\x1f\x8b\x08"


def xmliter_lxml(obj: Response | str | bytes, nodename: str, namespace: str | None = None,
                 prefix: str = "x") -> Iterator[Selector]:  # fmt: skip
    """A selector for each ``nodename`` element of the XML in ``obj``, read as a stream: each
    node is parsed on its own once its end tag is read, and freed. ``nodename`` may be
    ``prefix:name``, the prefix as the document declares it; or give ``namespace`` (the
    selector then knows it as ``prefix``)."""
    reader = _StreamReader(obj)
    tag = f"{{{namespace}}}{nodename}" if namespace else nodename
    iterable = lxml.etree.iterparse(reader, encoding=reader.encoding, events=("end", "start-ns"),
                                    resolve_entities=False, huge_tree=True)  # fmt: skip
    selxpath = "//" + (f"{prefix}:{nodename}" if namespace else nodename)
    needs_namespace_resolution = not namespace and ":" in nodename
    if needs_namespace_resolution:
        prefix, nodename = nodename.split(":", maxsplit=1)
    for event, data in iterable:
        if event == "start-ns":
            if needs_namespace_resolution and data[0] == prefix:
                namespace = data[1]
                needs_namespace_resolution = False
                selxpath = f"//{prefix}:{nodename}"
                tag = f"{{{namespace}}}{nodename}"
            continue
        if data.tag != tag:
            continue
        nodetext = lxml.etree.tostring(data, encoding="unicode")
        data.clear()
        xs = Selector(text=nodetext, type="xml")  # Scrapy's, as its xmliter_lxml gives
        if namespace:
            xs.register_namespace(prefix, namespace)
        yield xs.xpath(selxpath)[0]


class _StreamReader:
    """The body as a file for lxml: a text response's bytes in its encoding, anything else as
    UTF-8; the first read without leading white space (an XML declaration must come first)."""

    def __init__(self, obj: Response | str | bytes) -> None:
        self._ptr = 0
        self._text: str | bytes
        if isinstance(obj, TextResponse):
            self._text, self.encoding = obj.body, obj.encoding
        elif isinstance(obj, Response):
            self._text, self.encoding = obj.body, "utf-8"
        else:
            self._text, self.encoding = obj, "utf-8"
        self._is_first_read = True

    def read(self, n: int = 65535) -> bytes:
        start, self._ptr = self._ptr, self._ptr + n
        piece = self._text[start : self._ptr]
        result = piece.encode("utf-8") if isinstance(piece, str) else piece
        if self._is_first_read:
            self._is_first_read = False
            result = result.lstrip()
        return result


def csviter(obj: Response | str | bytes, delimiter: str | None = None,
            headers: list[str] | None = None, encoding: str | None = None,
            quotechar: str | None = None) -> Iterator[dict[str, str]]:  # fmt: skip
    """A dict for each row of the CSV in ``obj`` (a response's text, a string, or UTF-8
    bytes), keyed by ``headers`` or else by the first row; a row with another number of
    fields is skipped with a warning. ``delimiter`` and ``quotechar``: the csv module's
    defaults unless given; ``encoding`` is ignored, as in Scrapy."""
    lines = StringIO(_body_or_str(obj))
    kwargs: dict[str, Any] = {}
    if delimiter:
        kwargs["delimiter"] = delimiter
    if quotechar:
        kwargs["quotechar"] = quotechar
    csv_r = csv.reader(lines, **kwargs)
    if not headers:
        try:
            headers = next(csv_r)
        except StopIteration:
            return
    for row in csv_r:
        if len(row) != len(headers):
            logger.warning("ignoring row %(csvlnum)d (length: %(csvrow)d, should be: "
                           "%(csvheader)d)", {"csvlnum": csv_r.line_num, "csvrow": len(row),
                                              "csvheader": len(headers)})  # fmt: skip
            continue
        yield dict(zip(headers, row, strict=False))


def _body_or_str(obj: Response | str | bytes) -> str:
    if isinstance(obj, TextResponse):
        return obj.text
    if isinstance(obj, Response):
        return obj.body.decode("utf-8")
    if isinstance(obj, str):
        return obj
    if isinstance(obj, bytes):
        return obj.decode("utf-8")
    raise TypeError(f"Object {obj!r} must be Response or str or bytes, not {type(obj).__name__}")


def arg_to_iter(result: Any) -> Iterable[Any]:
    """What a callback returned as the things it yields, as Scrapy's ``arg_to_iter``: None is
    nothing, an iterable is itself, but for a dict (an item), a string or bytes, which are one
    thing."""
    if result is None:
        return ()
    if not isinstance(result, dict | str | bytes) and hasattr(result, "__iter__"):
        return result
    return [result]


def to_unicode(text: str | bytes, encoding: str | None = None, errors: str = "strict") -> str:
    """``text`` as a str: bytes decoded (UTF-8 unless ``encoding`` says), a str as it is; as
    Scrapy's."""
    if isinstance(text, str):
        return text
    if not isinstance(text, bytes):
        raise TypeError(f"to_unicode must receive a bytes or str object, got {type(text).__name__}")
    return text.decode(encoding or "utf-8", errors)


def to_bytes(text: str | bytes, encoding: str | None = None, errors: str = "strict") -> bytes:
    """``text`` as bytes: a str encoded (UTF-8 unless ``encoding`` says), bytes as they are; as
    Scrapy's."""
    if isinstance(text, bytes):
        return text
    if not isinstance(text, str):
        raise TypeError(f"to_bytes must receive a str or bytes object, got {type(text).__name__}")
    return text.encode(encoding or "utf-8", errors)
