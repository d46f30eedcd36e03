"""Extraction rules as a job states them: named CSS selectors, checked when a job is saved.

A rule is ``{"name", "selector", "attr", "all", "pattern"}``: the text of the first match (or
its ``attr`` attribute), every match with ``all``, only on URLs that match ``pattern`` (a
regex, searched) when one is given. On the command line a rule is written
``NAME=SELECTOR``, ``NAME=SELECTOR@ATTR``, ``NAME=SELECTOR[]`` or ``NAME=SELECTOR[]@ATTR``.
``tasks/content/extraction.py`` evaluates them on pages, on lexbor's tree when lexbor's CSS
parser (selectolax, the page parser's own) takes the selector. A selector is valid if
soupsieve's stricter parser takes it (lexbor's also takes some it refuses, such as ``a[href``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tasks.rules import patterns

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,99}$")
# A trailing "[]" (every match) and "@attr", in either order: "[]" is never CSS by itself.
_SUFFIX = re.compile(
    r"^(?P<selector>.+?)(?P<all>\[\])?(?:@(?P<attr>[A-Za-z_:][-\w:.]*))?(?P<all2>\[\])?$", re.S
)
_KEYS = {"name", "selector", "attr", "all", "pattern"}
MAX_RULES = 100


@dataclass(frozen=True)
class Rule:
    name: str
    selector: str
    attr: str = ""
    all: bool = False
    pattern: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "selector": self.selector, "attr": self.attr,
                "all": self.all, "pattern": self.pattern}  # fmt: skip


def parse_rule(text: str, pattern: str = "") -> dict[str, Any]:
    """``NAME=SELECTOR[[]][@ATTR]`` as a rule dict; ValueError with a message if malformed
    (the selector itself is checked by :func:`problems`)."""
    name, sep, rest = text.partition("=")
    name, rest = name.strip(), rest.strip()
    if not sep or not name or not rest:
        raise ValueError(f"{text!r} is not NAME=SELECTOR (e.g. title=h1, links=a[]@href)")
    found = _SUFFIX.match(rest)
    selector = found["selector"].strip() if found else rest
    return Rule(
        name=name,
        selector=selector,
        attr=(found["attr"] or "") if found else "",
        all=bool(found and (found["all"] or found["all2"])),
        pattern=pattern,
    ).as_dict()


@lru_cache(maxsize=512)
def on_lexbor(selector: str) -> bool:
    """Does lexbor's CSS parser take ``selector``? (else soupsieve must, on a soup)"""
    from selectolax.lexbor import LexborHTMLParser, SelectolaxError

    try:
        LexborHTMLParser("").css(selector)
    except SelectolaxError:
        return False
    return True


@lru_cache(maxsize=512)
def compiled(selector: str):
    import soupsieve  # imported on first use: most processes never need it (60 ms)

    return soupsieve.compile(selector)


def _syntax_error() -> tuple[type[Exception], ...]:
    import soupsieve

    # soupsieve refuses pseudo-elements (h1::before) with NotImplementedError
    return soupsieve.SelectorSyntaxError, NotImplementedError


def problems(rules: Any) -> list[str]:
    """Why ``rules`` cannot be used, one message each (a bad selector with soupsieve's words)."""
    if not isinstance(rules, list):
        return ["must be a list of rules"]
    if len(rules) > MAX_RULES:
        return [f"at most {MAX_RULES} rules"]
    found, names = [], set()
    for rule in rules:
        if not isinstance(rule, dict) or not {"name", "selector"} <= rule.keys():
            found.append(f"{rule!r}: a rule needs a name and a selector")
            continue
        if unknown := rule.keys() - _KEYS:
            found.append(f"{rule['name']!r}: unknown keys {', '.join(sorted(map(str, unknown)))}")
        name, selector = rule["name"], rule["selector"]
        if not isinstance(name, str) or not _NAME.match(name):
            found.append(f"{name!r} is not a field name (letters, digits, _ . -)")
        elif name in names:
            found.append(f"{name!r} is given twice")
        else:
            names.add(name)
        if not isinstance(selector, str) or not selector.strip():
            found.append(f"{name!r}: the selector is empty")
        else:
            try:
                compiled(selector)
            except _syntax_error() as exc:
                first = str(exc).splitlines()[0]
                found.append(f"{name!r}: {selector!r} is not a valid CSS selector: {first}")
        attr, every = rule.get("attr", ""), rule.get("all", False)
        if not isinstance(attr, str) or not isinstance(every, bool):
            found.append(f"{name!r}: attr must be a string and all true or false")
        pattern = rule.get("pattern", "")
        if not isinstance(pattern, str):
            found.append(f"{name!r}: the pattern must be a string")
        elif pattern and (problem := patterns.problem(pattern)):
            found.append(f"{name!r}: {problem}")
    return found


def rules_of(raw: list[dict[str, Any]]) -> list[Rule]:
    return [Rule(**{k: v for k, v in r.items() if k in _KEYS}) for r in raw]


def applies(rules: list[Rule], url: str) -> list[Rule]:
    """The rules whose pattern (if any) the URL matches."""
    return [r for r in rules if not r.pattern or patterns.search(r.pattern, url)]
