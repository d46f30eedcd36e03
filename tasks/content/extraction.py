"""Extraction: a job's rules (``tasks/rules/selectors.py``) evaluated on its HTML pages
(beautifulsoup4 with soupsieve), results in ``Page.data``.

A field whose selector matches nothing is ``null`` (``[]`` for ``all``). Text is the
element's text with runs of white space made one space. Attribute values are as the page
wrote them (relative URLs stay relative). The soup is built only for jobs with rules.
"""

from __future__ import annotations

import re
from typing import Any

from tasks.rules.selectors import Rule, compiled

_SPACES = re.compile(r"\s+")


def _value(element, attr: str) -> str | None:
    if attr:
        value = element.get(attr)
        return " ".join(value) if isinstance(value, list) else value  # class is a list
    return _SPACES.sub(" ", element.get_text(" ")).strip()


def extract(rules: list[Rule], html: str) -> dict[str, Any]:
    """Every rule's result on one page (``html`` already decoded)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "lxml")
    data: dict[str, Any] = {}
    for rule in rules:
        selector = compiled(rule.selector)
        if rule.all:
            values = (_value(e, rule.attr) for e in selector.select(soup))
            data[rule.name] = [v for v in values if v is not None]
        else:
            first = selector.select_one(soup)
            data[rule.name] = None if first is None else _value(first, rule.attr)
    return data
