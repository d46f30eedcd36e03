"""A circuit breaker per (job, host): a dead host fails its URLs fast instead of retrying each.

Reads ``CIRCUIT_FAILURES``, ``CIRCUIT_MIN_SPAN_S``, ``CIRCUIT_COOLDOWN_S`` and
``CIRCUIT_ANSWERED_S``.

Host-level failures (connection refused or unreachable, DNS failure, TLS handshake failure,
connect timeout: see ``tasks/fetch/outcomes.py``) say nothing about one URL and everything
about its host. ``CIRCUIT_FAILURES`` of them in a row, spread over at least
``CIRCUIT_MIN_SPAN_S`` (a server restarting for a second does not count as dead), open the
host's circuit: its URLs then fail at once as ``host_unreachable`` with the last failure's
summary (``connection refused``), without a request. The scheduler fails the queued ones in
bulk; a worker that claims one fails it before fetching. After ``CIRCUIT_COOLDOWN_S`` the
circuit is half-open: one URL goes through as a probe while the others wait a moment; the
probe's success closes the circuit, a host-level failure opens it again. Any answer from the
server (even a 404 or a 503) is a success here: the host is reachable.

A host that has not answered once in this job gets no such patience: the first *definitive*
failure (connection refused, no route, a name that does not exist; ``outcomes.definitive``)
opens its circuit at once, robots.txt's included, so a dead link's host ends its URLs within
a scheduler pass or two instead of a retry schedule. A host that has answered (any HTTP
response, robots.txt's included) is remembered for ``CIRCUIT_ANSWERED_S`` after its last
answer: its refusals are a restart or a deploy, and wait out the rule above.

State lives in Redis (``crawl:host:{job}:{host}:circuit`` and ``...:answered``; an open
circuit is named in ``crawl:index:circuits`` until its cooldown ends or it closes, for
``/metrics``), changed by one Lua call on Redis server time, shared by every worker and the
scheduler, and kept across worker restarts. A worker marks a host answered once per
``CIRCUIT_ANSWERED_S / 10`` at most (``JobCache.answered``), so the hot path pays one write
per host, not one per page. If Redis loses its data, hosts count as not yet answered until
they answer again.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.broker import INDEX_LUA, client, script
from tasks.defaults import setting

CLOSED, OPEN, PROBE, WAIT = "closed", "open", "probe", "wait"
OPENED = "crawl:index:circuits"  # the circuits open now, until they close (broker.indexed)

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_CHECK = (
    _NOW
    + """
local until_ = tonumber(redis.call('HGET', KEYS[1], 'open_until') or '0')
if until_ == 0 then return {'closed', '', 0} end
local reason = redis.call('HGET', KEYS[1], 'reason') or ''
if now < until_ then return {'open', reason, until_ - now} end
local probe = tonumber(redis.call('HGET', KEYS[1], 'probe_until') or '0')
if ARGV[2] == '0' or now < probe then return {'wait', reason, 0} end
redis.call('HSET', KEYS[1], 'probe_until', now + tonumber(ARGV[1]))
return {'probe', reason, 0}
"""
)

_RECORD = (
    _NOW
    + INDEX_LUA
    + """
if ARGV[1] == '0' then
  if redis.call('DEL', KEYS[1]) == 1 then redis.call('ZREM', KEYS[3], KEYS[1]) end
  if ARGV[7] ~= '0' then redis.call('SET', KEYS[2], '1', 'PX', ARGV[7]) end
  return 0
end
local h = redis.call('HMGET', KEYS[1], 'fails', 'first', 'open_until')
local fails = tonumber(h[1] or '0') + 1
local first = tonumber(h[2] or now)
if fails == 1 then first = now end
local opened = 0
local cooldown = tonumber(ARGV[5])
if tonumber(h[3] or '0') > 0 then
  opened = 1  -- the half-open probe failed, or a late failure: open again
elseif ARGV[6] == '1' and redis.call('EXISTS', KEYS[2]) == 0 then
  opened = 1  -- a definitive failure of a host that never answered in this job
elseif fails >= tonumber(ARGV[3]) and now - first >= tonumber(ARGV[4]) then
  opened = 1
end
redis.call('HSET', KEYS[1], 'fails', fails, 'first', first, 'reason', ARGV[2])
if opened == 1 then
  redis.call('HSET', KEYS[1], 'open_until', now + cooldown, 'probe_until', 0)
end
redis.call('PEXPIRE', KEYS[1], cooldown * 20 + 3600000)
if opened == 1 then
  index(KEYS[3], KEYS[1], now + cooldown, now)
end
return opened
"""
)


def key(job_id: int, host: str) -> str:
    return f"crawl:host:{job_id}:{host}:circuit"


def answered_key(job_id: int, host: str) -> str:
    return f"crawl:host:{job_id}:{host}:answered"


@dataclass
class State:
    state: str  # closed, open (fail the URL), probe (this caller probes), wait (a probe runs)
    reason: str = ""  # the last host-level failure, e.g. "connection refused"
    retry_in: float = 0.0  # seconds until an open circuit lets a probe through


def check(job_id: int, host: str, job=None, *, probe: bool = True) -> State:
    """May a request go to ``host`` now? ``probe=False`` only looks (the scheduler)."""
    lease_ms = int((setting("FETCH_DEADLINE_S", job) + 5) * 1000)
    state, reason, retry_ms = script(_CHECK)(
        keys=[key(job_id, host)], args=[lease_ms, "1" if probe else "0"]
    )
    text = reason.decode() if isinstance(reason, bytes) else reason
    return State(state.decode() if isinstance(state, bytes) else state, text, int(retry_ms) / 1000)


def _answered_ms(job) -> int:
    return max(1, int(setting("CIRCUIT_ANSWERED_S", job) * 1000))


def record(
    job_id: int,
    host: str,
    *,
    failed: bool,
    reason: str = "",
    definitive: bool = False,
    http_answer: bool = False,
    job=None,
) -> bool:
    """Report a request's result for the host; True if this failure opened its circuit.
    ``definitive``: the failure says the host is not there (it opens a never-answered host's
    circuit at once). ``http_answer``: a success that was an HTTP answer, which marks the host
    answered (``answered``) in the same round trip."""
    answered_ms = _answered_ms(job) if http_answer and not failed else 0
    return bool(
        script(_RECORD)(
            keys=[key(job_id, host), answered_key(job_id, host), OPENED],
            args=[
                "1" if failed else "0",
                reason[:200],
                setting("CIRCUIT_FAILURES", job),
                int(setting("CIRCUIT_MIN_SPAN_S", job) * 1000),
                int(setting("CIRCUIT_COOLDOWN_S", job) * 1000),
                "1" if definitive else "0",
                answered_ms,
            ],
        )
    )


def answered(job_id: int, host: str, job=None) -> None:
    """The host gave an HTTP response in this job: its later refusals get the patience above."""
    client().set(answered_key(job_id, host), "1", px=_answered_ms(job))


_OPEN_OF = (
    _NOW
    + """
local out = {}
for i, k in ipairs(KEYS) do
  local h = redis.call('HMGET', k, 'open_until', 'reason')
  if tonumber(h[1] or '0') > now then
    out[#out + 1] = i
    out[#out + 1] = h[2] or ''
  end
end
return out
"""
)


def open_hosts(job_id: int, hosts: list[str]) -> dict[str, str]:
    """Of ``hosts``, those whose circuit is open now, with the failure that opened it: one
    round trip, whose answer names only those (the scheduler asks this of every host it looks
    at, and in a broad crawl nearly every circuit is closed)."""
    if not hosts:
        return {}
    found = script(_OPEN_OF)(keys=[key(job_id, host) for host in hosts])
    pairs = zip(found[::2], found[1::2], strict=True)
    return {hosts[int(i) - 1]: reason.decode() for i, reason in pairs}
