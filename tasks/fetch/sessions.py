"""Cookie jars shared by every worker: one per (job, host, identity), in Redis; a spider's
request may name one of several sessions (Scrapy's ``cookiejar`` meta key), a jar of its own
per host and identity.

A site that sets a cookie expects it back on the next request, whichever worker sends it. The
jar lives in Redis (``crawl:jar:{job}:{host}:{identity}``) as a version and a list of cookies;
a worker reads it before a request and writes back what the response set with a versioned
compare-and-set: if another worker wrote in between, it reads the newer jar, applies its own
changes on top and tries again, so two workers updating one jar never lose an update (the
versioned session snapshots of the design). A job's jars are saved with its checkpoints and
restored when it resumes on a Redis that lost them. Expired cookies are dropped on write.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field

import requests

from tasks.broker import client, script

_WRITE = """
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if v ~= tonumber(ARGV[1]) then return {0, v, redis.call('HGET', KEYS[1], 'c') or '[]'} end
redis.call('HSET', KEYS[1], 'v', v + 1, 'c', ARGV[2])
redis.call('PEXPIRE', KEYS[1], 30 * 86400000)
redis.call('SADD', KEYS[2], KEYS[1])
redis.call('PEXPIRE', KEYS[2], 30 * 86400000)
return {1, v + 1, ''}
"""
CAS_TRIES = 100  # each failed try means another write won: progress is made


@dataclass
class Jar:
    version: int = 0
    cookies: list[dict] = field(default_factory=list)  # name, value, domain, path, expires, secure

    def for_requests(self) -> requests.cookies.RequestsCookieJar:
        jar = requests.cookies.RequestsCookieJar()
        for c in self.cookies:
            jar.set(c["name"], c["value"], domain=c.get("domain", ""), path=c.get("path", "/"),
                    expires=c.get("expires"), secure=c.get("secure", False))  # fmt: skip
        return jar


def key(job_id: int, host: str, identity: str) -> str:
    return f"crawl:jar:{job_id}:{host}:{identity}"


def jar_of(kept: dict | None) -> str:
    """Which of the job's cookie sessions a spider request (its stored row) uses: its
    ``meta["cookiejar"]``, as Scrapy's cookie middleware keys its jars ("": the default jar;
    a long one by its hash, so that it names a Redis key of a sensible size)."""
    value = ((kept or {}).get("meta") or {}).get("cookiejar")
    if value is None:
        return ""
    name = json.dumps(value, sort_keys=True, separators=(",", ":"))
    if len(name) > 64:
        return hashlib.sha1(name.encode(), usedforsecurity=False).hexdigest()
    return name


def _index(job_id: int) -> str:
    """The set of a job's jar keys (for its checkpoints, without scanning Redis)."""
    return f"crawl:jars:{job_id}"


def load(job_id: int, host: str, identity: str) -> Jar:
    version, raw = client().hmget(key(job_id, host, identity), "v", "c")
    return Jar(int(version or 0), json.loads(raw) if raw else [])


def _as_dicts(cookies: requests.cookies.RequestsCookieJar) -> list[dict]:
    return [
        {"name": c.name, "value": c.value or "", "domain": c.domain, "path": c.path,
         "expires": c.expires, "secure": bool(c.secure)}
        for c in cookies
    ]  # fmt: skip


def merge(cookies: list[dict], changes: list[dict]) -> list[dict]:
    """``cookies`` with ``changes`` applied (same name, domain and path: replaced); expired
    cookies are dropped, as a browser does."""
    now = time.time()
    merged = {(c["name"], c.get("domain", ""), c.get("path", "/")): c for c in cookies}
    for c in changes:
        merged[(c["name"], c.get("domain", ""), c.get("path", "/"))] = c
    return [c for c in merged.values() if not c.get("expires") or c["expires"] > now]


def save(
    job_id: int,
    host: str,
    identity: str,
    jar: Jar,
    changes: requests.cookies.RequestsCookieJar,
    mark: bool = False,
) -> int:
    """Write the cookies a response set; returns the jar's new version (no change: no write,
    unless ``mark``: a session that was warmed up has a version even without cookies)."""
    new = _as_dicts(changes)
    if not new and not mark:
        return jar.version
    version, base = jar.version, jar.cookies
    for _ in range(CAS_TRIES):
        payload = json.dumps(merge(base, new), separators=(",", ":"))
        won, version, current = script(_WRITE)(
            keys=[key(job_id, host, identity), _index(job_id)], args=[version, payload]
        )
        if won:
            return int(version)
        base = json.loads(current)  # another worker wrote first: apply ours to its jar
    raise RuntimeError(f"cookie jar of {host} kept changing under {CAS_TRIES} writes")


def snapshot(job_id: int) -> dict[str, dict]:
    """Every jar of a job (for its checkpoint): identity key suffix -> version and cookies."""
    redis = client()
    prefix = f"crawl:jar:{job_id}:"
    names = sorted(redis.smembers(_index(job_id)))
    pipe = redis.pipeline(transaction=False)
    for name in names:
        pipe.hmget(name, "v", "c")
    out = {}
    for name, (version, raw) in zip(names, pipe.execute() if names else [], strict=True):
        if raw:
            out[name.decode()[len(prefix) :]] = {"v": int(version or 0), "c": json.loads(raw)}
    return out


def restore(job_id: int, jars: dict[str, dict]) -> int:
    """Put a checkpoint's jars back where Redis has none (a resumed job); returns how many."""
    redis = client()
    restored = 0
    for suffix, jar in jars.items():
        name = f"crawl:jar:{job_id}:{suffix}"
        if redis.hsetnx(name, "v", jar["v"]):
            redis.hset(name, "c", json.dumps(jar["c"], separators=(",", ":")))
            redis.sadd(_index(job_id), name)
            restored += 1
    return restored
