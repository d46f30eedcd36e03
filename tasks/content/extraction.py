"""Extraction: a job's rules (``tasks/rules/selectors.py``) evaluated on its HTML pages,
results in ``Page.data``.

Rules run on the lexbor tree the page's parse already built (``parsing.parse_html``), so a
rule costs its selector's match and nothing more: no second parse. A selector lexbor cannot
parse but soupsieve can (its extensions, such as ``:-soup-contains()``, ``:lang()``,
``:dir()``) runs on a beautifulsoup4 tree of the page instead, built only when a page has
such a rule.

A field whose selector matches nothing is ``null`` (``[]`` for ``all``). Text is the
element's text with runs of white space made one space, without the text of the scripts,
styles and templates inside it (an element that is one of them gives its own). Attribute
values are as the page wrote them (relative URLs stay relative); the attributes HTML defines
as space-separated lists (``class``, ``rel``, ...) come with single spaces.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from selectolax.lexbor import LexborHTMLParser, LexborNode

from tasks.rules.selectors import Rule, compiled, on_lexbor

_SPACES = re.compile(r"\s+")
_HIDDEN = frozenset({"script", "style", "template"})  # their text is not the element's text
_HIDDEN_CSS = ", ".join(sorted(_HIDDEN))
# Attributes whose value HTML defines as a list of tokens (as beautifulsoup4 treats them).
_LISTS = {"class", "accesskey", "dropzone"}
_LISTS_OF = {"a": {"rel", "rev"}, "link": {"rel", "rev"}, "area": {"rel"}, "td": {"headers"},
             "th": {"headers"}, "form": {"accept-charset"}, "object": {"archive"},
             "icon": {"sizes"}, "iframe": {"sandbox"}, "output": {"for"}}  # fmt: skip


def _strings(node: LexborNode) -> Iterator[str]:
    """The text nodes under ``node`` in document order, less those of hidden elements."""
    child = node.child
    while child is not None:
        tag = child.tag
        if tag == "-text":
            yield child.text_content or ""
        elif tag not in _HIDDEN and not tag.startswith("-"):
            yield from _strings(child)
        child = child.next


def _text(node: LexborNode) -> str:
    if node.tag in _HIDDEN or node.css_first(_HIDDEN_CSS) is None:
        raw = node.text(separator=" ")  # in C: the common case, nothing to leave out
    else:
        raw = " ".join(_strings(node))
    return _SPACES.sub(" ", raw).strip()


def _value(node: LexborNode, attr: str) -> str | None:
    if not attr:
        return _text(node)
    value = node.attributes.get(attr)
    if value is not None and (attr in _LISTS or attr in _LISTS_OF.get(node.tag, ())):
        return " ".join(value.split())
    return value


def _soup_value(element, attr: str) -> str | None:
    if attr:
        value = element.get(attr)
        return " ".join(value) if isinstance(value, list) else value  # class is a list
    return _SPACES.sub(" ", element.get_text(" ")).strip()


def _on_soup(rule: Rule, soup) -> Any:
    selector = compiled(rule.selector)
    if rule.all:
        values = (_soup_value(e, rule.attr) for e in selector.select(soup))
        return [v for v in values if v is not None]
    first = selector.select_one(soup)
    return None if first is None else _soup_value(first, rule.attr)


def extract(rules: list[Rule], html: str, tree: LexborHTMLParser | None = None) -> dict[str, Any]:
    """Every rule's result on one page (``html`` already decoded; ``tree``: its lexbor
    document, when the parse built one)."""
    if tree is None:
        tree = LexborHTMLParser(html)
    soup = None
    data: dict[str, Any] = {}
    for rule in rules:
        if not on_lexbor(rule.selector):
            if soup is None:
                from bs4 import BeautifulSoup  # imported on first use: rare selectors only

                soup = BeautifulSoup(html, "lxml")
            data[rule.name] = _on_soup(rule, soup)
        elif rule.all:
            values = (_value(node, rule.attr) for node in tree.css(rule.selector))
            data[rule.name] = [v for v in values if v is not None]
        else:
            first = tree.css_first(rule.selector)
            data[rule.name] = None if first is None else _value(first, rule.attr)
    return data
