"""``ItemLoader``, as Scrapy 2.19's: itemloaders' loader (fields filled through input and
output processors, ``itemloaders.processors``) made from a response.

``ItemLoader(item=None, selector=None, response=None, parent=None, **context)``: without an
item, one of ``default_item_class`` (the platform's ``Item``) is made; without a selector, one
of ``default_selector_class`` (Scrapy's ``Selector``) over the response, none for a response
that is no text, as in Scrapy. ``context["response"]`` is the response.

Scrapy's ``Selector(response)`` parses the page again; the default one here selects in the
tree the response has already parsed (the one the callback's ``response.css()`` reads), with
the type and base URL Scrapy's would have: an HTML, XML or JSON response is not parsed twice.
"""

from __future__ import annotations

from typing import Any

import itemloaders

from crawlplatform.spiders.items import Item
from crawlplatform.spiders.response import (
    HtmlResponse,
    JsonResponse,
    Response,
    TextResponse,
    XmlResponse,
)
from crawlplatform.spiders.selector import Selector


class ItemLoader(itemloaders.ItemLoader):
    """Fills an item from a page with ``add_css``, ``add_xpath``, ``add_value`` (and their
    ``replace_`` and ``get_`` forms, ``nested_css``, ``nested_xpath``), then ``load_item()``.
    ``default_item_class``, ``default_input_processor``, ``default_output_processor``,
    ``default_selector_class`` and ``<field>_in``/``<field>_out`` processors are set by a
    subclass, as in Scrapy."""

    default_item_class: type = Item
    default_selector_class: type = Selector

    def __init__(
        self,
        item: Any = None,
        selector: Selector | None = None,
        response: Response | None = None,
        parent: itemloaders.ItemLoader | None = None,
        **context: Any,
    ) -> None:
        if selector is None and response is not None:
            selector = self._selector_of(response)
        context.update(response=response)
        super().__init__(item=item, selector=selector, parent=parent, **context)

    def _selector_of(self, response: Response) -> Any:
        """A selector of ``default_selector_class`` over ``response``, as Scrapy makes it
        (None for a response that is no text), in the response's own tree where that is the
        tree Scrapy's would parse."""
        if self.default_selector_class is Selector:
            if isinstance(response, HtmlResponse | XmlResponse | JsonResponse):
                parsed = response.selector
                selector = Selector(root=parsed.root, type=parsed.type, base_url=response.base)
                selector.response = response
                return selector
            if not isinstance(response, TextResponse):
                return None  # Scrapy's Response has no text to select in
        try:
            return self.default_selector_class(response)
        except AttributeError:
            return None
