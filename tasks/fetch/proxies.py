"""Proxies of a job and their health, shared by every worker through Redis.

Reads ``PROXY_REST_S`` and ``PROXY_FAILURES``.

A job's proxies are URL templates (``http://${CRAWL_PROXY_USER}:${CRAWL_PROXY_PASSWORD}@
proxy1:3128``): ``${CRAWL_PROXY_*}`` is filled from the worker's environment when the proxy is
used (``tasks/rules/proxy_urls.py``; no other variable), so a password lives in a Secret, not in
the job; logs and the admin show a proxy by its id (a hash of the template) and host, never
its credentials. Per (job, proxy) Redis counts successes, bans, errors and a
latency average; a proxy that was banned or could not be reached ``PROXY_FAILURES`` times in a
row (on any host of the job: one CAPTCHA page among successes is the page's, not the proxy's)
*rests* for ``PROXY_REST_S`` (doubling for each rest in a row) and gets no requests meanwhile.
"""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

from tasks.broker import client, script
from tasks.defaults import setting
from tasks.fetch import outcomes
from tasks.rules import proxy_urls

_RECORD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kind = ARGV[1]
redis.call('HINCRBY', KEYS[1], kind, 1)
if kind == 'ok' then
  redis.call('HSET', KEYS[1], 'streak', 0, 'rests', 0)
  local lat = tonumber(redis.call('HGET', KEYS[1], 'latency') or ARGV[2])
  redis.call('HSET', KEYS[1], 'latency', lat + 0.2 * (tonumber(ARGV[2]) - lat))
else
  local streak = redis.call('HINCRBY', KEYS[1], 'streak', 1)
  if streak >= tonumber(ARGV[4]) then
    local rests = redis.call('HINCRBY', KEYS[1], 'rests', 1)
    local rest = tonumber(ARGV[3]) * math.pow(2, math.min(rests - 1, 6))
    redis.call('HSET', KEYS[1], 'rest_until', now + rest, 'streak', 0)
  end
end
redis.call('PEXPIRE', KEYS[1], 7 * 86400000)
return 1
"""


def proxy_id(template: str) -> str:
    """A short stable name for a proxy, safe to log."""
    return hashlib.sha1(template.encode(), usedforsecurity=False).hexdigest()[:10]


def label(template: str) -> str:
    """How logs and the admin show a proxy: scheme, host and id, no credentials."""
    parts = urlsplit(template)
    return f"{parts.scheme}://{parts.hostname}:{parts.port or ''} ({proxy_id(template)})"


def key(job_id: int, pid: str) -> str:
    return f"crawl:proxy:{job_id}:{pid}"


def record(job_id: int, pid: str, kind: str, latency: float = 0.0, job=None) -> None:
    """Count an outcome of a request through proxy ``pid``: ``ok``, ``bans`` or ``errors``."""
    script(_RECORD)(
        keys=[key(job_id, pid)],
        args=[
            kind,
            latency,
            int(setting("PROXY_REST_S", job) * 1000),
            setting("PROXY_FAILURES", job),
        ],
    )


def resting(job_id: int, pids: list[str]) -> set[str]:
    """Of ``pids``, those resting now (banned or failing lately)."""
    if not pids:
        return set()
    redis = client()
    now_s, now_us = redis.time()
    now_ms = now_s * 1000 + now_us // 1000
    pipe = redis.pipeline(transaction=False)
    for pid in pids:
        pipe.hget(key(job_id, pid), "rest_until")
    return {
        pid for pid, until in zip(pids, pipe.execute(), strict=True) if int(until or 0) > now_ms
    }


def health(job_id: int, pids: list[str]) -> dict[str, dict[str, float]]:
    """Counters of each proxy, for metrics and the admin."""
    pipe = client().pipeline(transaction=False)
    for pid in pids:
        pipe.hgetall(key(job_id, pid))
    return {
        pid: {k.decode(): float(v) for k, v in fields.items()}
        for pid, fields in zip(pids, pipe.execute(), strict=True)
    }


_PORTS = {"http": 80, "https": 443, "socks4": 1080, "socks4a": 1080, "socks5": 1080,
          "socks5h": 1080}  # fmt: skip


def _where(url: str) -> tuple[str, str, int | None] | None:
    """A proxy URL's scheme, host and port (None if it is no URL of a proxy)."""
    try:
        parts = urlsplit(url)
        return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port or _PORTS.get(
            parts.scheme.lower())  # fmt: skip
    except ValueError:
        return None


def requested(asked: str | None, pool: list[str]) -> str:
    """The job's proxy a spider request names in its ``meta["proxy"]`` (Scrapy's key): the
    template of the job's proxy with the same scheme, host and port (its credentials are the
    job's, whatever the request's URL holds), or "" for ``None`` (no proxy) when the job has
    none. A request may not leave the job's proxies, nor go direct when the job has them:
    ``BlockedAddress`` says so, and the URL ends with it."""
    if asked is None:
        if pool:
            raise outcomes.BlockedAddress("the request's meta asks for no proxy, but the job's "
                                          "requests go through its proxies")  # fmt: skip
        return ""
    wanted = _where(str(asked))
    for template in pool:
        try:
            where = _where(template if "${" not in (urlsplit(template).hostname or "")
                           else proxy_urls.expand(template))  # fmt: skip
        except (KeyError, proxy_urls.Unusable):
            continue
        if wanted is not None and where == wanted:
            return template
    scheme, _, rest = str(asked).partition("://")
    shown = proxy_urls.redact(f"{scheme}://{rest.rpartition('@')[2]}" if rest else scheme)
    raise outcomes.BlockedAddress(f"proxy {shown[:200]} in the request's meta is not one of "
                                  "the job's proxies")  # fmt: skip
