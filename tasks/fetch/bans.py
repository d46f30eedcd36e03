"""Is this answer a block page? Ban detection on what a fetch brought back.

Reads ``BAN_MARKERS``, ``BAN_URL_MARKERS``, ``BAN_WORDS``, ``BAN_SCAN_BYTES``,
``BAN_TINY_MAX_BYTES``, ``BAN_TEXT_MAX_CHARS`` and ``BAN_TINY_RATIO``.

A site that refuses a crawler rarely says so with a clean status code. Signs, in order:

* CAPTCHA and challenge markers in the body, whatever the status: reCAPTCHA, hCaptcha,
  Cloudflare Turnstile and challenge pages, "verify you are human", and the job's own list
  (``BAN_MARKERS``, comma-separated, case-insensitive);
* a redirect that ended on a challenge page (``BAN_URL_MARKERS`` in the final URL);
* a JavaScript challenge, whatever the status (a 503 too): a small page that says next to
  nothing and whose script sets a cookie and loads the page again;
* a 403; a 429, with or without ``Retry-After`` (a refusal of this visitor for a while: how
  long, when it says); a 503 that says when to come back (a plain 503 may be the page's own
  trouble: ``tasks/fetch/refusals.py`` asks the host another page before it decides);
* a 2xx page under ``BAN_TINY_MAX_BYTES`` whose only words are a ``<noscript>`` notice, with
  no script to show anything else (a placeholder a site answers instead of its pages);
* a *soft block*: a 2xx page under ``BAN_TINY_MAX_BYTES`` that speaks of being blocked
  (``BAN_WORDS``) and is nothing else: its visible text is under ``BAN_TEXT_MAX_CHARS``, or
  its title or a main heading (``h1``) says it, or it is under ``BAN_TINY_RATIO`` of the
  host's usual page size.

The decision depends on the answer and the job's settings alone, but for the last sign, whose
usual size is learnt from the pages stored (each worker process keeps its own and shares it
through Redis, ``crawl:size:{job}:{host}``, so a process that has stored nothing of a host yet
knows it too). A soft block is therefore told from content the same way by every worker, on
every run, before anything is stored.

A ban is an outcome (``tasks/fetch/outcomes.py``: ``Banned``): the block page is never stored
as a page; whose refusal it is (the identity's, which is parked while the URL keeps its
attempt, or the page's own) is ``tasks/fetch/refusals.py``'s.
"""

from __future__ import annotations

import math
import re
import time
from functools import lru_cache

from ahocorasick_rs import BytesAhoCorasick, MatchKind

from tasks.broker import client
from tasks.defaults import setting

_sizes: dict[tuple[int, str], float] = {}  # (job, host) -> average log of stored page sizes
_learnt: dict[tuple[int, str], int] = {}  # (job, host) -> pages learnt here since last shared
_asked: dict[tuple[int, str], float] = {}  # (job, host) -> when Redis was last asked (a miss)
_SHARE_EVERY = 16  # pages a process learns before it shares its usual size again
_ASK_AGAIN_S = 5.0  # a host whose usual size Redis did not know is asked again after this
_HOSTS_MAX = 10_000  # hosts a process keeps sizes or misses of (Redis keeps every host's)
_SCRIPT_OR_STYLE = re.compile(rb"<(script|style)\b.*?</\1\s*>", re.S | re.I)
_TAG = re.compile(rb"<[^>]*>")
_SPACE = re.compile(rb"\s+")
_HEADINGS = re.compile(rb"<title[^>]*>(.*?)</title|<h1[^>]*>(.*?)</h1", re.S | re.I)


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


def _size_key(job_id: int, host: str) -> str:
    return f"crawl:size:{job_id}:{host}"


def _bound() -> None:
    """Forget every host once any map holds ``_HOSTS_MAX``: a broad crawl passes through
    more hosts than a process should remember, and Redis has the shared sizes."""
    if max(len(_sizes), len(_learnt), len(_asked)) >= _HOSTS_MAX:
        _sizes.clear()
        _learnt.clear()
        _asked.clear()


def usual_size(job_id: int, host: str) -> float | None:
    """The host's usual page size in bytes (None until a page of it was stored): this
    process's, else the one another process shared."""
    log_size = _sizes.get((job_id, host))
    if log_size is None and time.monotonic() - _asked.get((job_id, host), -_ASK_AGAIN_S) >= (
        _ASK_AGAIN_S
    ):
        _bound()
        _asked[(job_id, host)] = time.monotonic()
        shared = client().get(_size_key(job_id, host))
        if shared is not None:
            log_size = _sizes[(job_id, host)] = float(shared)
    return None if log_size is None else math.exp(log_size)


def learn_size(job_id: int, host: str, size: int) -> None:
    """A stored page of ``host``: its size moves the host's usual size (a moving average of
    the logarithm: one huge page among small ones does not make them all look tiny), shared
    with the other processes now and then."""
    _bound()
    key = (job_id, host)
    log_size = math.log(max(size, 1))
    old = _sizes.get(key)
    usual = _sizes[key] = log_size if old is None else old + 0.1 * (log_size - old)
    learnt = _learnt.get(key, 0) + 1  # (locals: another thread may clear the maps meanwhile)
    if old is None or learnt >= _SHARE_EVERY:
        learnt = 0
        client().set(_size_key(job_id, host), repr(usual), ex=86400)
    _learnt[key] = learnt


def challenge(
    job, status: int, final_url: str, body: bytes, retry_after: float | None = None
) -> str:
    """Why this answer is a challenge or a refusal by its content, address or status alone
    ('' if it is not); ``job`` may be None (the platform's markers). ``retry_after``: the
    answer's ``Retry-After`` in seconds, if it had one."""
    head = body[: setting("BAN_SCAN_BYTES")].lower()
    if _script_challenge(job, head):
        return "challenge: a page whose script sets a cookie and reloads"
    marker = _first_term(setting("BAN_MARKERS", job), head)
    if marker:
        return f"challenge: {marker.decode()}"
    url = final_url.lower()
    for marker in _terms(setting("BAN_URL_MARKERS", job)):
        if marker.decode() in url:
            return f"redirected to a challenge ({marker.decode()})"
    if status == 403:
        return "http_403"
    if status == 429:
        return "http_429 without Retry-After" if retry_after is None else (
            f"http_429, Retry-After {retry_after:g} s"
        )
    if status == 503 and retry_after is not None:
        return f"http_503, Retry-After {retry_after:g} s"
    return ""


_SETS_COOKIE = re.compile(rb"document\.cookie\s*=")
_RELOADS = re.compile(rb"location\.(?:reload|replace|assign)\s*\(|(?<![\w.-])"
                      rb"(?:(?:window|document|self|top)\.)?location(?:\.href)?\s*=[^=]")


def script_challenge(job, body: bytes) -> bool:
    """Is ``body`` a JavaScript challenge, which a browser passes (``_script_challenge``)?"""
    return _script_challenge(job, body[: setting("BAN_SCAN_BYTES")].lower())


def _script_challenge(job, lowered: bytes) -> bool:
    """A JavaScript challenge, whatever its status: a small page that says next to nothing
    and whose script sets a cookie and loads the page again (a browser passes it, a plain
    fetch never does)."""
    return (len(lowered) < setting("BAN_TINY_MAX_BYTES", job) and b"<script" in lowered
            and _SETS_COOKIE.search(lowered) is not None and _RELOADS.search(lowered) is not None
            and len(visible_text(lowered)) <= setting("BAN_TEXT_MAX_CHARS", job))  # fmt: skip


def visible_text(body: bytes) -> bytes:
    """What a person reads of an HTML body: no tags, scripts or styles, spaces collapsed."""
    return _SPACE.sub(b" ", _TAG.sub(b" ", _SCRIPT_OR_STYLE.sub(b" ", body))).strip()


_NOSCRIPT = re.compile(rb"<noscript\b.*?</noscript\s*>", re.S | re.I)


def soft_block(job, host: str, status: int, body: bytes) -> str:
    """Why a 2xx answer is a block page that looks like content ('' if it is not)."""
    if not 200 <= status < 300 or len(body) >= setting("BAN_TINY_MAX_BYTES", job):
        return ""
    lowered = body.lower()
    if b"<noscript" in lowered and b"<script" not in lowered and not visible_text(
            _NOSCRIPT.sub(b" ", body)):  # fmt: skip
        return f"block page (a <noscript> notice and nothing else in {len(body)} bytes)"
    words = setting("BAN_WORDS", job)
    word = _first_term(words, body.lower())
    if not word:
        return ""
    why = f"block page ({word.decode()!r} in {len(body)} bytes)"
    if len(visible_text(body)) <= setting("BAN_TEXT_MAX_CHARS", job):
        return why
    for heading in _HEADINGS.finditer(body):  # the title, or a page's heading, says it
        if _first_term(words, (heading.group(1) or heading.group(2)).lower()):
            return why
    usual = usual_size(job.pk, host)
    if usual is not None and len(body) < setting("BAN_TINY_RATIO", job) * usual:
        return why
    return ""


def detect(
    job, host: str, status: int, final_url: str, body: bytes, retry_after: float | None = None
) -> str:
    """Why this answer is a block page ('' if it is not). ``retry_after``: the answer's
    ``Retry-After`` in seconds, if it had one."""
    return challenge(job, status, final_url, body, retry_after) or soft_block(
        job, host, status, body
    )
