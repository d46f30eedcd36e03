"""Release channel names: a channel's name becomes part of its Celery queue's name."""

from __future__ import annotations

import re

_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")


def name_problem(name: str) -> str:
    """Why ``name`` cannot name a channel ("" if it can): it becomes part of a queue's name."""
    ok = isinstance(name, str) and _NAME.fullmatch(name)
    return "" if ok else f"{name!r} is not a channel name (letters, digits, - and _)"
