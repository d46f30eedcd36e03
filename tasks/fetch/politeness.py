"""Per-host politeness held across every worker on every machine: the state lives in Redis.

Reads ``HOST_MAX_WAIT_S``, ``THROTTLE_MAX_DELAY_S``, ``THROTTLE_DECAY`` and
``THROTTLE_SLOW_LATENCY_S``.

Per (job, host) Redis keeps: the time of the next free request slot, the requests in flight
(a sorted set of tokens scored by expiry), an adaptive delay, and the ``Crawl-delay`` floor
from robots.txt. Every change is one Lua call on Redis server time, so worker clocks do not
matter and two workers never take the same slot.

* :func:`acquire` reserves the host's next slot (delay = max(job delay, Crawl-delay, adaptive
  delay)) and an in-flight place, or says how long to wait when that is longer than
  ``HOST_MAX_WAIT_S``: the URL then goes back to the frontier with a ``not_before`` instead of
  a worker sleeping on it.
* :func:`finish` frees the in-flight place and adapts the delay: 429, 503, timeouts and slow
  responses double it (capped); successes shrink it back toward the floor; ``Retry-After``
  pushes the host's next slot out.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from tasks.broker import client
from tasks.defaults import setting

_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local floor = tonumber(ARGV[1])
local conc = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local adaptive = tonumber(redis.call('GET', KEYS[3]) or '0')
local delay = math.max(floor, adaptive, tonumber(redis.call('GET', KEYS[4]) or '0'))
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= conc then
    return {0, math.max(delay, 250), adaptive}
  end
end
local slot = math.max(now, tonumber(redis.call('GET', KEYS[1]) or '0'))
local wait = slot - now
if wait > max_wait then
  return {0, wait, adaptive}
end
if delay > 0 then
  redis.call('SET', KEYS[1], slot + delay, 'PX', wait + delay + 60000)
end
if conc > 0 then
  redis.call('ZADD', KEYS[2], slot + lease, ARGV[5])
  redis.call('PEXPIRE', KEYS[2], wait + lease + 60000)
end
return {1, wait, adaptive}
"""

_FINISH = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[2], ARGV[1])
local adaptive = tonumber(redis.call('GET', KEYS[3]) or '0')
local slows = tonumber(ARGV[2])
local retry_after = tonumber(ARGV[3])
local floor = tonumber(ARGV[4])
if slows == 1 then
  adaptive = math.min(math.max(adaptive * 2, floor * 2, 250), tonumber(ARGV[5]))
  redis.call('SET', KEYS[3], adaptive, 'PX', 3600000)
elseif adaptive > 0 then
  adaptive = adaptive * tonumber(ARGV[6])
  if adaptive <= floor or adaptive < 10 then
    redis.call('DEL', KEYS[3])
  else
    redis.call('SET', KEYS[3], math.floor(adaptive), 'PX', 3600000)
  end
end
if retry_after > 0 then
  local nxt = tonumber(redis.call('GET', KEYS[1]) or '0')
  if now + retry_after > nxt then
    redis.call('SET', KEYS[1], now + retry_after, 'PX', retry_after + 60000)
  end
end
return adaptive
"""

_scripts: dict[str, object] = {}


def _script(source: str):
    found = _scripts.get(source)
    if found is None:
        found = _scripts[source] = client().register_script(source)
    return found


def keys(job_id: int, host: str) -> list[str]:
    """next-slot, in-flight, adaptive delay, Crawl-delay floor."""
    base = f"crawl:host:{job_id}:{host}"
    return [f"{base}:next", f"{base}:inflight", f"{base}:delay", f"{base}:floor"]


@dataclass
class Slot:
    granted: bool
    wait: float  # seconds until the slot (granted) or until it is worth asking again
    token: str
    adaptive: bool  # an adaptive delay is in force: report the outcome with finish()


def acquire(job_id: int, host: str, delay_s: float, concurrency: int, job=None) -> Slot:
    """Reserve the host's next request slot for this worker, or say how long to wait."""
    token = uuid.uuid4().hex
    granted, wait_ms, adaptive = _script(_ACQUIRE)(
        keys=keys(job_id, host),
        args=[
            int(delay_s * 1000),
            concurrency,
            int(setting("HOST_MAX_WAIT_S", job) * 1000),
            int(setting("FETCH_DEADLINE_S", job) * 1000) + 5000,
            token,
        ],
    )
    return Slot(bool(granted), int(wait_ms) / 1000.0, token, int(adaptive) > 0)


def finish(
    job_id: int,
    host: str,
    slot: Slot,
    *,
    delay_s: float,
    slows: bool,
    retry_after: float | None,
    job=None,
) -> None:
    """Free the slot's in-flight place and adapt the host's delay to the outcome."""
    _script(_FINISH)(
        keys=keys(job_id, host),
        args=[
            slot.token,
            1 if slows else 0,
            int((retry_after or 0) * 1000),
            int(delay_s * 1000),
            int(setting("THROTTLE_MAX_DELAY_S", job) * 1000),
            setting("THROTTLE_DECAY", job),
        ],
    )


def set_floor(job_id: int, host: str, crawl_delay_s: float | None) -> None:
    """Record robots.txt's Crawl-delay for the host (None: no floor beyond the job's delay)."""
    key = keys(job_id, host)[3]
    if crawl_delay_s:
        client().set(key, int(crawl_delay_s * 1000), ex=86400)
    else:
        client().delete(key)


def host_delays(job_id: int, hosts: list[str], delay_s: float) -> dict[str, tuple[float, float]]:
    """For the scheduler: each host's (effective delay, seconds until its next free slot)."""
    if not hosts:
        return {}
    redis = client()
    now_s, now_us = redis.time()
    now_ms = now_s * 1000 + now_us // 1000
    names = [k for h in hosts for k in (keys(job_id, h)[0], keys(job_id, h)[2], keys(job_id, h)[3])]
    values = redis.mget(names)
    out = {}
    for i, host in enumerate(hosts):
        nxt, adaptive, floor = (int(v or 0) for v in values[3 * i : 3 * i + 3])
        delay = max(delay_s * 1000, adaptive, floor) / 1000.0
        out[host] = (delay, max(0, nxt - now_ms) / 1000.0)
    return out
