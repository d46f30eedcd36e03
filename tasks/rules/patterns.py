"""User patterns: every regex a job states (include and exclude patterns, path caps, an
extraction rule's ``pattern``, and any added later) is compiled by RE2 (``google-re2``), whose
matching time is linear in the text. No pattern can make a process spin: ``(a+)+$`` against a
long URL takes microseconds, where Python's ``re`` takes seconds for every two characters more
(``benchmarks/user_patterns.py``), holding the GIL, so heartbeats and lease renewals stop.

Reads ``PATTERN_MAX_LENGTH``.

RE2's syntax is Python's for everything a URL pattern needs (classes, groups, alternation,
anchors, repetition, ``(?i)``), without backreferences and lookaround; a pattern RE2 cannot
compile, or longer than ``PATTERN_MAX_LENGTH``, is refused when the job is saved, with RE2's
words. Several patterns are searched together in one pass (an RE2 set), which is also what
makes a single pattern cheap here: about 2.5 µs per URL.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import re2

from tasks.defaults import setting


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is reported to the job's owner, not to stderr
    return options


class Patterns:
    """Patterns searched in a text together: which of them match, in one linear pass."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(patterns)
        self._set = re2.Set.SearchSet(_options()) if self.patterns else None
        for pattern in self.patterns:
            self._set.Add(pattern)  # re2.error for a pattern that was never checked
        if self._set is not None:
            self._set.Compile()

    def matching(self, text: str) -> list[int]:
        """Indices of the patterns found in ``text``."""
        found = self._set.Match(text) if self._set is not None else None
        return found or []  # RE2 answers None when nothing matches

    def any(self, text: str) -> bool:
        return bool(self._set is not None and self._set.Match(text))

    def __bool__(self) -> bool:
        return bool(self.patterns)


@lru_cache(maxsize=1024)
def compiled(patterns: tuple[str, ...]) -> Patterns:
    """The patterns compiled once per process."""
    return Patterns(patterns)


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` is found in ``text``."""
    return compiled((pattern,)).any(text)


def problem(pattern: object) -> str:
    """Why ``pattern`` cannot be used ("" if it can)."""
    if not isinstance(pattern, str):
        return f"{pattern!r} is not a string"
    most = setting("PATTERN_MAX_LENGTH")
    if len(pattern) > most:
        return f"{pattern[:40]!r}...: a pattern is {most} characters at most"
    try:
        re2.compile(pattern, _options())
    except re2.error as exc:
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(
            exc.args[0], bytes) else str(exc)  # fmt: skip
        rule = "RE2: no backreferences or lookaround"
        return f"{pattern!r} is not a valid regular expression ({rule}): {why}"
    return ""
