"""Waiting for a condition, shared by the test suite and the chaos suite."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], timeout: float, what: str, every: float = 0.2):
    """Poll ``predicate`` until truthy and return its value; TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
