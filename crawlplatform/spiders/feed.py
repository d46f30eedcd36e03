"""``XMLFeedSpider`` and ``CSVFeedSpider``, as Scrapy 2.19's: spiders whose default callback
walks a feed and calls the spider once for each of its nodes or rows.

A request naming no callback (``start_urls``, ``Request(url)``) is called back through the
spider's ``_parse`` (``tasks/content/callbacks.py``), which these classes set, as Scrapy's do:
the response goes through ``adapt_response``, then each node (``parse_node``) or row
(``parse_row``) yields items and requests, and ``process_results`` sees what each yielded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from crawlplatform.spiders.errors import NotSupported
from crawlplatform.spiders.response import Response, TextResponse
from crawlplatform.spiders.selector import Selector
from crawlplatform.spiders.spider import Spider
from crawlplatform.spiders.utils import arg_to_iter, csviter, xmliter_lxml


class XMLFeedSpider(Spider):
    """A spider that calls ``parse_node`` for each ``itertag`` element of an XML feed (RSS,
    Atom, a product feed). ``iterator``: ``"iternodes"`` (the default: one node at a time,
    as a stream), ``"xml"`` or ``"html"`` (the whole body parsed as such, then ``//itertag``
    selected); ``namespaces``: ``(prefix, uri)`` pairs registered on each selector."""

    iterator: str = "iternodes"
    itertag: str = "item"
    namespaces: Sequence[tuple[str, str]] = ()

    def process_results(self, response: Response, results: Iterable[Any]) -> Iterable[Any]:
        """What one node yielded (items and requests), to change before it is kept (an item's
        GUID set, say): returned as it is unless a spider says otherwise."""
        return results

    def adapt_response(self, response: Response) -> Response:
        """The response the feed is read from: a spider may fix it up first (its body
        mended, say) and return another."""
        return response

    def parse_node(self, response: Response, selector: Selector) -> Any:
        """Called with each node's selector: yields (or returns) items and requests. A spider
        overrides it (an older spider's ``parse_item`` is called instead, if it has one)."""
        if hasattr(self, "parse_item"):
            return self.parse_item(response, selector)
        raise NotImplementedError

    def parse_nodes(self, response: Response, nodes: Iterable[Selector]) -> Any:
        """``parse_node`` for each node, what each yields through ``process_results``."""
        for selector in nodes:
            ret = arg_to_iter(self.parse_node(response, selector))
            yield from self.process_results(response, ret)

    def _parse(self, response: Response, **kwargs: Any) -> Any:
        response = self.adapt_response(response)
        nodes: Iterable[Selector]
        if self.iterator == "iternodes":
            nodes = self._iternodes(response)
        elif self.iterator in ("xml", "html"):
            if not isinstance(response, TextResponse):
                raise ValueError("Response content isn't text")
            selector = Selector(response, type=self.iterator)  # Scrapy's, as its spider's
            self._register_namespaces(selector)
            nodes = selector.xpath(f"//{self.itertag}")
        else:
            raise NotSupported("Unsupported node iterator")
        return self.parse_nodes(response, nodes)

    def _iternodes(self, response: Response) -> Iterable[Selector]:
        for node in xmliter_lxml(response, self.itertag):
            self._register_namespaces(node)
            yield node

    def _register_namespaces(self, selector: Selector) -> None:
        for prefix, uri in self.namespaces:
            selector.register_namespace(prefix, uri)


class CSVFeedSpider(Spider):
    """A spider that calls ``parse_row`` with a dict for each row of a CSV feed, keyed by
    ``headers`` or else by the file's first row. ``delimiter`` and ``quotechar``: the csv
    module's (``,`` and ``"``) unless set."""

    delimiter: str | None = None
    quotechar: str | None = None
    headers: list[str] | None = None

    def process_results(self, response: Response, results: Iterable[Any]) -> Iterable[Any]:
        """As ``XMLFeedSpider.process_results``, for what one row yielded."""
        return results

    def adapt_response(self, response: Response) -> Response:
        """As ``XMLFeedSpider.adapt_response``."""
        return response

    def parse_row(self, response: Response, row: dict[str, str]) -> Any:
        """Called with each row: yields (or returns) items and requests. A spider overrides it."""
        raise NotImplementedError

    def parse_rows(self, response: Response) -> Any:
        """``parse_row`` for each row, what each yields through ``process_results``."""
        for row in csviter(response, self.delimiter, self.headers, quotechar=self.quotechar):
            ret = arg_to_iter(self.parse_row(response, row))
            yield from self.process_results(response, ret)

    def _parse(self, response: Response, **kwargs: Any) -> Any:
        response = self.adapt_response(response)
        return self.parse_rows(response)
