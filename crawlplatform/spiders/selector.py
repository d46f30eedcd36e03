"""Scrapy's ``Selector`` and ``SelectorList``: parsel's, made as Scrapy 2.19's
``scrapy/selector/unified.py`` makes them, so that ``Selector(response)`` (or
``response=response``) and ``Selector(text=...)`` select what they select under Scrapy.

From a response: its text, its base URL (``<base href>``, else its URL) and a type by its
class (``XmlResponse`` xml, ``JsonResponse`` json, ``HtmlResponse`` html; any other, the type
parsel finds in the body). From a text (str, or bytes in UTF-8): as the body of a response at
``about:blank`` (a byte order mark dropped), html unless ``type`` says otherwise. A selector's
queries give selectors of the same class, in a ``SelectorList``.

A response's own selector (``response.css``, ``response.xpath``) stays parsel's, of which these
are a subclass: its queries make a selector for every node they find, and this class's
constructor would double what each costs, on every page.
"""

from __future__ import annotations

from typing import Any

import parsel
from w3lib.encoding import html_to_unicode
from w3lib.html import get_base_url

_NOT_SET = object()  # no root given (as Scrapy's: a root of None is passed on)
_BASE_WITHIN = 4096  # characters of a text where Scrapy looks for <base href>


class SelectorList(parsel.SelectorList):
    """A list of ``Selector``, with parsel's methods (``get``, ``getall``, ``re``, ...)."""


class Selector(parsel.Selector):
    """A selector over a response (``Selector(response)``) or a text (``Selector(text=...)``);
    ``response`` is the response it was made from (None for a text)."""

    __slots__ = ["response"]
    selectorlist_cls = SelectorList

    def __init__(self, response: Any = None, text: str | bytes | None = None,
                 type: str | None = None, root: Any = _NOT_SET,  # noqa: A002 (Scrapy's name)
                 **kwargs: Any) -> None:  # fmt: skip
        if response is not None and text is not None:
            raise ValueError(f"{self.__class__.__name__}.__init__() received both response and "
                             "text")  # fmt: skip
        if type is None and root is _NOT_SET:
            type = _type_of(response)  # noqa: A001
        if text is not None:  # as the UTF-8 body of a response at about:blank, as Scrapy reads it
            body = text if isinstance(text, bytes) else text.encode("utf-8")
            text = html_to_unicode("charset=utf-8", body)[1]
            kwargs.setdefault("base_url", get_base_url(text[:_BASE_WITHIN], "about:blank"))
        elif response is not None:
            text = response.text
            kwargs.setdefault("base_url", response.base)
        self.response = response
        if root is not _NOT_SET:
            kwargs["root"] = root
        super().__init__(text=text, type=type, **kwargs)


def _type_of(response: Any) -> str | None:
    """The selector type Scrapy gives a response of this class: html for none (a text)."""
    if response is None:
        return "html"
    return getattr(type(response), "_kind", None)  # set by HtmlResponse, XmlResponse, JsonResponse
