"""Per-host politeness shared by every process: the state lives in Redis.

``host_slot`` is one atomic Lua call on Redis server time, so worker clocks do not matter:
it grants the host's next request slot if the host's minimum delay has passed since the last
one, and tells how long to wait otherwise.
"""

from __future__ import annotations

from tasks.broker import client

_SLOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local delay = tonumber(ARGV[1])
local nxt = tonumber(redis.call('GET', KEYS[1]) or '0')
if now >= nxt then
  redis.call('SET', KEYS[1], now + delay, 'PX', delay * 2 + 1000)
  return 0
end
return nxt - now
"""
_script = None


def host_slot(job_id: int, host: str, delay_s: float) -> float:
    """0.0 if a request to ``host`` may start now (and the slot is taken), else seconds to wait."""
    global _script
    if _script is None:
        _script = client().register_script(_SLOT)
    wait_ms = _script(keys=[f"crawl:host:{job_id}:{host}"], args=[int(delay_s * 1000)])
    return int(wait_ms) / 1000.0
