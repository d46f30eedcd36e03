"""Is this answer a block page? Ban detection on what a fetch brought back.

Reads ``BAN_MARKERS``, ``BAN_URL_MARKERS``, ``BAN_WORDS``, ``BAN_TINY_RATIO`` and
``BAN_TINY_MAX_BYTES``.

A site that refuses a crawler rarely says so with a clean status code. Signs, in order:

* a 403, or a 429 without ``Retry-After`` (a site that refuses a visitor rather than asks it
  to come back at a given time), or a 503 that carries a challenge (a 429 that says when to
  come back, and a plain 503, are the throttle's business);
* CAPTCHA and challenge markers in the body, whatever the status: reCAPTCHA, hCaptcha,
  Cloudflare Turnstile and challenge pages, "verify you are human", and the job's own list
  (``BAN_MARKERS``, comma-separated, case-insensitive);
* a redirect that ended on a challenge page (``BAN_URL_MARKERS`` in the final URL);
* a 200 whose body is under ``BAN_TINY_RATIO`` of the host's usual page size (and under
  ``BAN_TINY_MAX_BYTES``) and speaks of being blocked (``BAN_WORDS``).

A ban is an outcome (``tasks/fetch/outcomes.py``: ``Banned``): the block page is never stored
as a page, the host's ladder counts it (``tasks/fetch/ladder.py``), and the URL is tried again
by a rested identity, its attempt given back (``tasks/fetch/antibot.py``), or parked for
review. The host's usual page size is learnt by each
worker process from the pages it stores (no shared state needed for a ratio).
"""

from __future__ import annotations

import math
from functools import lru_cache

from ahocorasick_rs import BytesAhoCorasick, MatchKind

from tasks.defaults import setting

_sizes: dict[tuple[int, str], float] = {}  # (job, host) -> average log of stored page sizes


@lru_cache(maxsize=32)
def _terms(raw: str) -> tuple[bytes, ...]:
    return tuple(t.strip().lower().encode() for t in raw.split(",") if t.strip())


@lru_cache(maxsize=32)
def _automaton(raw: str) -> BytesAhoCorasick | None:
    terms = _terms(raw)
    return BytesAhoCorasick(list(terms), matchkind=MatchKind.LeftmostFirst) if terms else None


def _first_term(raw: str, lowered: bytes) -> bytes | None:
    """The term of the comma-separated list ``raw`` found first in ``lowered``, if any: one
    pass over the text for all the terms (Aho-Corasick), not one pass per term."""
    automaton = _automaton(raw)
    found = automaton.find_matches_as_indexes(lowered) if automaton else None
    return _terms(raw)[found[0][0]] if found else None


def usual_size(job_id: int, host: str) -> float | None:
    """The host's usual page size in bytes (None until a page of it was stored here)."""
    log_size = _sizes.get((job_id, host))
    return None if log_size is None else math.exp(log_size)


def learn_size(job_id: int, host: str, size: int) -> None:
    """A stored page of ``host``: its size moves the host's usual size (a moving average of
    the logarithm: one huge page among small ones does not make them all look tiny)."""
    if len(_sizes) > 50_000:
        _sizes.clear()
    log_size = math.log(max(size, 1))
    old = _sizes.get((job_id, host))
    _sizes[(job_id, host)] = log_size if old is None else old + 0.1 * (log_size - old)


def challenge(
    job, status: int, final_url: str, body: bytes, retry_after: float | None = None
) -> str:
    """Why this answer is a challenge or a refusal by its content, address or status alone
    ('' if it is not); ``job`` may be None (the platform's markers). ``retry_after``: the
    answer's ``Retry-After`` in seconds, if it had one."""
    head = body[: setting("BAN_SCAN_BYTES")].lower()
    marker = _first_term(setting("BAN_MARKERS", job), head)
    if marker:
        return f"challenge: {marker.decode()}"
    url = final_url.lower()
    for marker in _terms(setting("BAN_URL_MARKERS", job)):
        if marker.decode() in url:
            return f"redirected to a challenge ({marker.decode()})"
    if status == 403:
        return "http_403"
    if status == 429 and retry_after is None:
        return "http_429 without Retry-After"
    return ""


def detect(
    job, host: str, status: int, final_url: str, body: bytes, retry_after: float | None = None
) -> str:
    """Why this answer is a block page ('' if it is not). ``retry_after``: the answer's
    ``Retry-After`` in seconds, if it had one."""
    reason = challenge(job, status, final_url, body, retry_after)
    if reason:
        return reason
    head = body[: setting("BAN_SCAN_BYTES")].lower()
    usual = usual_size(job.pk, host)
    tiny = (
        usual is not None
        and len(body) < setting("BAN_TINY_RATIO", job) * usual
        and len(body) < setting("BAN_TINY_MAX_BYTES", job)
    )
    if tiny and status == 200:
        word = _first_term(setting("BAN_WORDS", job), head)
        if word:
            return f"block page ({word.decode()!r} in {len(body)} bytes)"
    return ""
