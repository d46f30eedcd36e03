"""robots.txt, fetched once per host and shared by every worker through Redis.

Reads ``ROBOTS_TTL_S``, ``ROBOTS_ERROR_TTL_S`` and ``ROBOTS_MAX_BYTES``.

RFC 9309: a 2xx body is parsed (protego); 4xx means no restrictions; 5xx or an unreachable
server means "disallow everything for a while": the URL waits in the frontier and robots.txt
is asked for again after ``ROBOTS_ERROR_TTL_S``. The job's user agent is matched, and
``Crawl-delay`` for it becomes the host's politeness floor. One worker fetches a host's
robots.txt (a Redis lock); the others wait for its result in the frontier, not in a loop.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from protego import Protego

from tasks.broker import client
from tasks.defaults import setting
from tasks.fetch import fetching, outcomes

_parsed: dict[str, tuple[float, dict, Protego | None]] = {}  # per process, a minute at most
_LOCAL_S = 60.0


@dataclass
class Decision:
    allowed: bool = True
    retry_in: float | None = None  # robots.txt not known yet or unavailable: wait this long
    crawl_delay: float | None = None
    sitemaps: list[str] = field(default_factory=list)
    reason: str = ""


def robots_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/robots.txt"


def _fetch(url: str, user_agent: str, job) -> dict:
    limits = fetching.FetchLimits(
        connect_timeout=setting("FETCH_CONNECT_TIMEOUT_S", job),
        read_timeout=setting("FETCH_READ_TIMEOUT_S", job),
        deadline=min(30.0, setting("FETCH_DEADLINE_S", job)),
        max_bytes=setting("ROBOTS_MAX_BYTES", job),
        max_redirects=5,
    )
    try:
        resp = fetching.fetch(url, user_agent=user_agent, limits=limits)
    except outcomes.ClientError as exc:
        return {"status": exc.status or 404, "body": ""}
    except outcomes.CrawlOutcome as exc:
        return {"status": exc.status or 0, "body": "", "error": exc.reason}
    return {"status": resp.status, "body": resp.body.decode("utf-8", "replace")}


def _entry(key: str, url: str, user_agent: str, job) -> dict | None:
    """The cached robots.txt record, fetching it if this worker wins the lock; None: wait."""
    redis = client()
    raw = redis.get(key)
    if raw is not None:
        return json.loads(raw)
    if not redis.set(key + ":lock", "1", nx=True, ex=60):
        return None
    try:
        entry = _fetch(url, user_agent, job)
        ok = entry["status"] < 500 and entry["status"] != 0
        ttl = setting("ROBOTS_TTL_S", job) if ok else setting("ROBOTS_ERROR_TTL_S", job)
        entry["until"] = time.time() + ttl
        redis.set(key, json.dumps(entry), ex=int(ttl))
        return entry
    finally:
        redis.delete(key + ":lock")


def check(job, url: str, user_agent: str) -> Decision:
    """May ``url`` be fetched under its host's robots.txt for this user agent?"""
    rurl = robots_url(url)
    key = f"crawl:robots:{rurl}"
    now = time.monotonic()
    hit = _parsed.get(key)
    if hit is None or now - hit[0] > _LOCAL_S or time.time() > hit[1].get("until", 0):
        entry = _entry(key, rurl, user_agent, job)
        if entry is None:
            return Decision(allowed=False, retry_in=1.0, reason="robots_pending")
        parser = Protego.parse(entry["body"]) if 200 <= entry["status"] < 300 else None
        hit = _parsed[key] = (now, entry, parser)
    _, entry, parser = hit
    status = entry["status"]
    if status >= 500 or status == 0:
        wait = max(1.0, entry.get("until", 0) - time.time())
        return Decision(allowed=False, retry_in=wait, reason="robots_unavailable")
    if parser is None:  # 3xx left over after redirects, 4xx: no restrictions
        return Decision()
    return Decision(
        allowed=parser.can_fetch(url, user_agent),
        crawl_delay=parser.crawl_delay(user_agent),
        sitemaps=list(parser.sitemaps),
        reason="robots",
    )


def forget() -> None:
    """Drop this process's parsed copies (tests, or after a job's robots changed)."""
    _parsed.clear()
