"""robots.txt, fetched once per host and shared by every worker through Redis.

Reads ``ROBOTS_TTL_S``, ``ROBOTS_ERROR_TTL_S``, ``ROBOTS_MAX_BYTES``, ``ROBOTS_AGENT``,
``ROBOTS_LOCAL_S``, ``ROBOTS_LOCAL_MAX``, and for its fetch ``FETCH_CONNECT_TIMEOUT_S``,
``FETCH_READ_TIMEOUT_S`` and ``FETCH_DEADLINE_S`` (at most 30 s).

RFC 9309: a 2xx body is parsed (protego); 4xx, and a robots.txt that cannot be followed
(invalid or looping redirects, too many of them, a broken response), means no restrictions;
5xx or a server that stops answering means "disallow everything for now": the URL is retried
on its own backoff (``robots_unavailable``) and robots.txt is asked for again after
``ROBOTS_ERROR_TTL_S``. A host that cannot be reached at all (refused, DNS, TLS) is the
host's failure, not robots.txt's: the URL gets that outcome and it counts toward the host's
circuit breaker, which is asked before robots.txt is fetched (a refusal or a missing name from
a host that has not answered in this job opens it at once, and the URL fails as
``host_unreachable``); an answer to robots.txt marks the host answered; a host whose address the
guard refuses fails its URLs as ``blocked_address`` (``tasks/rules/guard.py``; a redirect of
robots.txt to a refused address only makes robots.txt unfollowable). robots.txt is fetched
with the platform's ``USER_AGENT`` and its groups are matched against the product token
``ROBOTS_AGENT``, whatever user agents a job presents to pages (``tasks/fetch/identity.py``);
``Crawl-delay`` for that token becomes the host's politeness floor. It goes out through the
proxy of the host's identity, as the job's pages do, under the same guard; a job with proxies,
or its own ``ALLOWED_NETWORKS`` or ``TLS_VERIFY``, keeps its hosts' robots.txt to itself (what
it was answered, or refused, is not what another job would be). One worker fetches a host's
robots.txt (a Redis lock); the others wait for its result in the frontier, not in a loop.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from protego import Protego

from tasks.broker import script
from tasks.defaults import setting
from tasks.fetch import circuit, fetching, identity, outcomes, trust
from tasks.rules import guard, proxy_urls
from tasks.rules.urls import host_of

log = logging.getLogger(__name__)
_parsed: dict[str, tuple[float, dict, Protego | None]] = {}  # per process, ROBOTS_LOCAL_S old
_keeping = threading.Lock()  # held while _parsed drops its old copies and takes a new one


@dataclass
class Decision:
    allowed: bool = True
    retry_in: float | None = None  # robots.txt is being fetched by another worker: wait this
    crawl_delay: float | None = None
    sitemaps: list[str] = field(default_factory=list)
    reason: str = ""
    failure: outcomes.CrawlOutcome | None = None  # robots.txt could not be had: the URL's outcome
    fetched: bool = False  # this call requested robots.txt from the host (the job's delay applies)


def robots_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/robots.txt"


# A job's own settings that change how its robots.txt is fetched (its answer, or its refusal).
_OWN_FETCH = ("ALLOWED_NETWORKS", "TLS_VERIFY")


def _key(job, rurl: str) -> str:
    """Where a robots.txt is kept: one copy for the jobs that fetch it as the platform does,
    one per job that does not (through proxies, its own networks or certificate checks)."""
    own = job.proxies or any(name in (job.settings or {}) for name in _OWN_FETCH)
    return f"crawl:robots:{job.pk}:{rurl}" if own else f"crawl:robots:{rurl}"


def _fetch(url: str, user_agent: str, job) -> dict:
    limits = fetching.FetchLimits(
        connect_timeout=setting("FETCH_CONNECT_TIMEOUT_S", job),
        read_timeout=setting("FETCH_READ_TIMEOUT_S", job),
        deadline=min(30.0, setting("FETCH_DEADLINE_S", job)),
        max_bytes=setting("ROBOTS_MAX_BYTES", job),
        max_redirects=5,
        verify=trust.verifies(job),
    )
    try:
        proxy = identity.current(job, host_of(url)).proxy
    except (KeyError, proxy_urls.Unusable) as exc:  # its ${VAR} is not in this worker's reach
        return {"status": 0, "body": "", "error": "proxy_error", "message": str(exc)[:200]}
    try:
        resp = fetching.fetch(url, user_agent=user_agent, limits=limits, allow=guard.allowed(job),
                              visitor=fetching.Visitor(proxy=proxy))  # fmt: skip
    except outcomes.ClientError as exc:
        return {"status": exc.status or 404, "body": ""}
    except outcomes.CrawlOutcome as exc:
        entry = {"status": exc.status or 0, "body": "", "error": exc.reason}
        if exc.host_level:
            entry.update(unreachable=True, summary=exc.summary, message=str(exc)[:500],
                         definitive=exc.definitive)  # fmt: skip
        elif isinstance(exc, outcomes.BlockedAddress) and exc.url in (None, url):
            entry.update(blocked=True, message=str(exc)[:500])  # the host itself is refused
        elif isinstance(exc, outcomes.Permanent):  # cannot be followed: no restrictions
            entry["status"] = 404
        return entry
    return {"status": resp.status, "body": resp.body.decode("utf-8", "replace")}


def _fetch_through_circuit(url: str, user_agent: str, job) -> dict | None:
    """Fetch robots.txt unless the host's circuit says no; None: a probe runs, wait."""
    host = host_of(url)
    state = circuit.check(job.pk, host, job)
    if state.state == circuit.OPEN:
        return {"status": 0, "body": "", "unreachable": True, "open": True,
                "summary": state.reason, "message": f"circuit open: {state.reason}"}  # fmt: skip
    if state.state == circuit.WAIT:
        return None
    entry = _fetch(url, user_agent, job)
    if entry.get("unreachable"):
        if circuit.record(job.pk, host, failed=True, reason=entry["summary"],
                          definitive=entry["definitive"], job=job):  # fmt: skip
            entry.update(open=True, message=f"circuit opened: robots.txt: {entry['message']}")
        return entry
    # the host answered: any failures in a row are over (robots.txt is fetched rarely)
    circuit.record(job.pk, host, failed=False, http_answer=bool(entry["status"]), job=job)
    return entry


# A host's robots.txt record in one round trip: the record if it is stored; else the fetch
# lock, taken for this caller ('': fetch it) unless another worker holds it (nil: wait). The
# read and the lock are one step: no record stored between them is fetched twice.
_READ_OR_LOCK = """
local raw = redis.call('GET', KEYS[1])
if raw then return raw end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'EX', 60) then return '' end
return false
"""
# The record stored (when there is one) and the lock let go, by its holder only: one whose lock
# ran out (a stalled process) must not end the lock another worker has taken since.
_STORE_AND_UNLOCK = """
if ARGV[2] ~= '' then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 0
"""


def _entry(key: str, url: str, user_agent: str, job) -> tuple[dict | None, bool]:
    """The stored robots.txt record, fetching it if this worker wins the lock (None: wait),
    and whether a request went to the host for it."""
    token, lock = os.urandom(8).hex(), key + ":lock"
    raw = script(_READ_OR_LOCK)(keys=[key, lock], args=[token])
    if raw is None:
        return None, False
    if raw:
        return json.loads(raw), False
    stored, ttl_ms = "", 0
    try:
        entry = _fetch_through_circuit(url, user_agent, job)
        if entry is None:
            return None, False
        ok = 0 < entry["status"] < 500
        ttl = setting("ROBOTS_TTL_S", job) if ok else setting("ROBOTS_ERROR_TTL_S", job)
        entry["until"] = time.time() + ttl
        stored, ttl_ms = json.dumps(entry), max(1, int(ttl * 1000))
        return entry, not entry.get("open")  # an open circuit: nothing was sent
    finally:
        script(_STORE_AND_UNLOCK)(keys=[key, lock], args=[token, stored, ttl_ms])


def _parse(body: str, url: str) -> Protego:
    try:
        return Protego.parse(body)
    except Exception:  # a robots.txt that breaks the parser restricts nothing
        log.warning("robots.txt at %s could not be parsed; no restrictions applied", url)
        return Protego.parse("")


def _failure(entry: dict) -> outcomes.CrawlOutcome:
    if entry.get("blocked"):
        return outcomes.BlockedAddress(f"robots.txt: {entry['message']}")
    if entry.get("open"):  # open when robots.txt was asked for, or opened by its failure
        return outcomes.HostUnreachable.because(
            entry["summary"], f"{entry['summary'] or 'host unreachable'} ({entry['message']})"
        )
    if entry.get("unreachable"):
        kind = {
            "dns": outcomes.DNSFailure,
            "tls": outcomes.TLSError,
            "connect_timeout": outcomes.ConnectTimeout,
        }.get(entry.get("error", ""), outcomes.ConnectFailed)
        failure = kind(f"robots.txt: {entry.get('message', '')}")
        failure.summary = entry.get("summary") or failure.summary
        return failure
    return outcomes.RobotsUnavailable(
        f"robots.txt unavailable ({entry.get('error') or 'HTTP ' + str(entry['status'])})"
    )


def _held(key: str, fresh_s: float) -> tuple[float, dict, Protego | None] | None:
    """This process's parsed copy of a robots.txt, while it is fresh (``ROBOTS_LOCAL_S``)."""
    hit = _parsed.get(key)
    if hit is None or time.monotonic() - hit[0] > fresh_s or time.time() > hit[1].get("until", 0):
        return None
    return hit


def forbidden(job, urls: Iterable[str]) -> set[str]:
    """Those of ``urls`` that the robots.txt this process holds for their hosts forbids (a
    page's links, before they enter the frontier). A URL whose host's copy is not held, is
    stale or could not be had is not among them: the fetch decides then, as for any URL. Each
    host's copy is looked up once, however many of its URLs there are."""
    token, fresh_s = setting("ROBOTS_AGENT", job), setting("ROBOTS_LOCAL_S")
    parsers: dict[str, Protego | None] = {}
    found = set()
    for url in urls:
        rurl = robots_url(url)
        if rurl not in parsers:
            hit = _held(_key(job, rurl), fresh_s)
            usable = hit is not None and hit[2] is not None and 200 <= hit[1]["status"] < 300
            parsers[rurl] = hit[2] if usable else None
        parser = parsers[rurl]
        if parser is not None and not parser.can_fetch(url, token):
            found.add(url)
    return found


def _keep(key: str, hit: tuple[float, dict, Protego | None]) -> tuple[float, dict, Protego | None]:
    """Hold a parsed copy, after dropping the copies older than ``ROBOTS_LOCAL_S`` (the oldest
    come first: a key is put back at the end), so that a broad crawl holds the hosts of the
    last minute, not every host it passed through; at most ``ROBOTS_LOCAL_MAX`` all the same."""
    oldest = hit[0] - setting("ROBOTS_LOCAL_S")
    with _keeping:  # a worker's threads share the copies
        _parsed.pop(key, None)
        while _parsed and next(iter(_parsed.values()))[0] < oldest:
            del _parsed[next(iter(_parsed))]
        if len(_parsed) >= setting("ROBOTS_LOCAL_MAX"):
            _parsed.clear()
        _parsed[key] = hit
    return hit


def check(job, url: str, user_agent: str) -> Decision:
    """May ``url`` be fetched under its host's robots.txt? (fetched as ``user_agent``, matched
    for the job's product token ``ROBOTS_AGENT``)"""
    rurl = robots_url(url)
    key = _key(job, rurl)
    hit = _held(key, setting("ROBOTS_LOCAL_S"))
    fetched = False
    if hit is None:
        now = time.monotonic()
        entry, fetched = _entry(key, rurl, user_agent, job)
        if entry is None:
            return Decision(allowed=False, retry_in=1.0, reason="robots_pending")
        ok = 200 <= entry["status"] < 300
        parser = _parse(entry["body"], rurl) if ok else None
        hit = _keep(key, (now, entry, parser))
    _, entry, parser = hit
    status = entry["status"]
    if status >= 500 or status == 0:
        failure = _failure(entry)
        return Decision(allowed=False, reason=failure.reason, failure=failure, fetched=fetched)
    if parser is None:  # 3xx left over after redirects, 4xx: no restrictions
        return Decision(fetched=fetched)
    token = setting("ROBOTS_AGENT", job)
    return Decision(
        allowed=parser.can_fetch(url, token),
        crawl_delay=parser.crawl_delay(token),
        sitemaps=list(parser.sitemaps),
        reason="robots",
        fetched=fetched,
    )


def forget() -> None:
    """Drop this process's parsed copies (tests, or after a job's robots changed)."""
    _parsed.clear()
