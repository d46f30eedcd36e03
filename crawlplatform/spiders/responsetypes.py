"""The response class a callback gets, as Scrapy 2.19's ``responsetypes.from_args`` chooses it
for an answer: by its ``Content-Type``; failing that (no such header, or a type that is no
text, such as ``application/octet-stream``), by the file name of its ``Content-Disposition``,
then of its URL (``.xml``, ``.csv``, ...); failing those, by its body (HTML or XML by their
marks, text, else binary). So a ported callback's ``isinstance(response, XmlResponse)`` holds
where it held there, and the feed spiders read a body as text where Scrapy's did.
"""

from __future__ import annotations

import posixpath
import re

from crawlplatform.spiders.response import (
    HtmlResponse,
    JsonResponse,
    Response,
    TextResponse,
    XmlResponse,
)

# The class of each mime type Scrapy names (``text/*`` not listed: TextResponse; anything
# else: Response).
_CLASSES: dict[str, type[Response]] = {
    "text/html": HtmlResponse, "application/xhtml+xml": HtmlResponse,
    "application/vnd.wap.xhtml+xml": HtmlResponse, "text/xml": XmlResponse,
    "application/xml": XmlResponse, "application/atom+xml": XmlResponse,
    "application/rdf+xml": XmlResponse, "application/rss+xml": XmlResponse,
    "application/json": JsonResponse, "application/x-json": JsonResponse,
    "application/json-amazonui-streaming": JsonResponse,
    "application/javascript": TextResponse, "application/x-javascript": TextResponse,
}  # fmt: skip

# The file extensions whose mime type, in the table Scrapy reads (Python's own and Scrapy's
# mime.types), gives a class other than Response (tests/test_feed_utils.py checks them all).
_BY_EXTENSION: dict[str, type[Response]] = {
    f".{ext}": cls
    for cls, extensions in (
        (HtmlResponse, "htm html shtml xht xhtml"),
        (XmlResponse, "atom rdf rss wsdl xml xpdl xsd xsl"),
        (JsonResponse, "json"),
        (TextResponse, "323 asc bib boo brf c c++ cc cls cpp csh css csv cxx d diff etx gcd h "
                       "h++ hh hpp hs htc hxx ics icz jad java js ksh lhs ltx mjs mml moc n3 p "
                       "pas patch pl pm pot py rtx scala sct sgm sgml sh srt sty tcl tex text tk "
                       "tm ts tsv txt uls vcf vcs vtt wml wmls wsc"),
    )
    for ext in extensions.split()
}  # fmt: skip

_BINARY = re.compile(rb"[\x01-\x08\x0b\x0c\x0e-\x1f]")  # Scrapy's binary_is_text: no text has
_SCHEME = re.compile(r"([^/:]+):(.*)", re.DOTALL)  # as mimetypes splits a URL's scheme off


def class_for(content_type: str, body: bytes, url: str = "",
              disposition: str = "") -> type[Response]:  # fmt: skip
    """The response class Scrapy gives an answer with these ``Content-Type`` and
    ``Content-Disposition`` headers ("" for none), at this URL, with this (decoded) body."""
    cls = Response
    if content_type:
        cls = _from_mimetype(content_type.split(";", 1)[0].strip().lower())
    if cls is Response and disposition:
        cls = _from_disposition(disposition)
    if cls is Response and url:
        cls = _from_filename(url)
    return _from_body(body) if cls is Response else cls


def _from_mimetype(mime: str) -> type[Response]:
    return _CLASSES.get(mime) or (TextResponse if mime.split("/", 1)[0] == "text" else Response)


def _from_disposition(disposition: str) -> type[Response]:
    """By the ``filename`` of a ``Content-Disposition`` (Scrapy reads the first parameter's
    value, whatever its name)."""
    try:
        filename = disposition.split(";")[1].split("=")[1].strip("\"'")
    except IndexError:
        return Response
    return _from_filename(filename)


def _from_filename(name: str) -> type[Response]:
    """By the extension of a file name or URL, as Python's ``mimetypes`` guesses it for
    Scrapy (a query after it hides it; a compressed file, ``.xml.gz``, is binary)."""
    split = _SCHEME.match(name)  # a data: URL's type is not read: the platform fetches none
    if split is not None:
        name = split.group(2)
    return _BY_EXTENSION.get(posixpath.splitext(name)[1].lower(), Response)


def _from_body(body: bytes) -> type[Response]:
    """By the body's first 5000 bytes: binary, else HTML or XML by their marks, else text."""
    chunk = body[:5000]
    if _BINARY.search(chunk):
        return Response
    lowered = chunk.lower()
    if b"<html>" in lowered:
        return HtmlResponse
    if b"<?xml" in lowered:
        return XmlResponse
    return HtmlResponse if b"<!doctype html>" in lowered else TextResponse
