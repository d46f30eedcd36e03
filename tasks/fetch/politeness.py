"""Per-host politeness held across every worker on every machine: the state lives in Redis.

Reads ``HOST_MAX_WAIT_S``, ``FETCH_DEADLINE_S``, ``RETRY_BACKOFF_MAX_S`` and the
``THROTTLE_*`` settings.

Per (job, host) Redis keeps: the time of the next free request slot, the requests in flight
(a sorted set of tokens scored by expiry), the ``Crawl-delay`` floor from robots.txt, an
adaptive delay with the time it was set (named in ``crawl:index:throttled`` while it is in
force, for ``/metrics``), and the host's recent outcome counts. Every change
is one Lua call on Redis server time, so worker clocks do not matter and two workers never
take the same slot.

A host's pace is ``max(job delay, Crawl-delay, adaptive delay)``; the adaptive delay models
what servers mean, apart from what happens to single URLs (those retry on their own backoff,
``tasks/frontier/transitions.py``):

* **Retry-After** on a 429 or 503 holds the host's next slot exactly that long (capped at
  ``RETRY_BACKOFF_MAX_S``); then the normal pace resumes. It is not counted as a signal.
* **Overload signals** (429/503/504 without Retry-After, read timeouts, deadlines, resets,
  responses slower than ``THROTTLE_SLOW_LATENCY_S``) and requests are counted per host with a
  half-life of ``THROTTLE_WINDOW_S``. A host is *struggling* when at least
  ``THROTTLE_MIN_SIGNALS`` recent requests ended in a signal and they are at least
  ``THROTTLE_SIGNAL_RATIO`` of its recent requests. A few broken URLs among many good ones
  never make a host struggle.
* Each signal from a struggling host doubles its adaptive delay, starting at
  ``THROTTLE_START_DELAY_S`` and never below its latency x ``THROTTLE_LATENCY_FACTOR``
  (Heritrix's delay factor; AutoThrottle's latency target), capped at
  ``THROTTLE_MAX_DELAY_S``.
* The adaptive delay decays with time: it halves every ``THROTTLE_HALF_LIFE_S``, whatever the
  number of requests (a slowed host gets few, so decaying per success would take ages).

Host-level failures (refused, DNS, TLS) are neither: the circuit breaker handles those
(``tasks/fetch/circuit.py``).

* :func:`acquire` reserves the host's next slot and an in-flight place, or says how long to
  wait when that is longer than ``HOST_MAX_WAIT_S``: the URL then goes back to the frontier
  with a ``not_before`` instead of a worker sleeping on it. Refused for a cap whose places are
  all taken, it also says when the host's next slot opens (``full_for``; the URL waits at
  least that long): under a cap of one, the request before, if quick, ends by then and holds
  the slot a pace past its answer, so a worker with nothing else to do waits that long, if it
  is within ``HOST_MAX_WAIT_S``, and asks once more (``gates.acquire``).
* :func:`finish` frees the in-flight place and reports an overload signal or a Retry-After;
  an ordinary answer needs no call (requests are counted by :func:`acquire`), but in a job
  with an in-flight cap (``host_concurrency``), whose every request calls it.

The pace spaces the starts of requests, each slot one pace after the one before; a request that
leaves late for its slot holds the next slot a pace from its own start (``gates.leave``, by
:func:`hold`), unless that slot was handed out already. A job with an in-flight cap also spaces
each request from the end of the one before, as Nutch and Heritrix do: :func:`finish` holds the
next slot at least a pace past the answer's arrival. With a cap of one, a request that left
late for its slot (a busy worker, a slow thread) then still arrives at least a pace after the
one before it ended, so the site never sees two requests closer than the pace, however loaded
the crawler or the site is. (Under a larger cap, or none, requests overlap by design and only
their slots are a pace apart.)
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from tasks.broker import INDEX_LUA, client, script
from tasks.defaults import setting
from tasks.fetch import circuit, ladder

OK, OVERLOAD, NEUTRAL = 0, 1, 2  # what one outcome tells the host's throttle
IN_FLIGHT_SPARE_S = 5.0  # an in-flight place lapses this long after its slot's fetch deadline

_DECAYED = """
local function decayed(raw, now, half)
  if not raw then return 0 end
  local sp = string.find(raw, ' ')
  if not sp then return tonumber(raw) or 0 end
  local d, t = tonumber(string.sub(raw, 1, sp - 1)), tonumber(string.sub(raw, sp + 1))
  return d * math.pow(2, -math.max(0, now - t) / half)
end
local function counts(key, now, window)
  local h = redis.call('HMGET', key, 'req', 'bad', 't')
  if not h[3] then return 0, 0 end
  local f = math.pow(2, -math.max(0, now - tonumber(h[3])) / window)
  return tonumber(h[1]) * f, tonumber(h[2]) * f
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_ACQUIRE = (
    _DECAYED
    + """
local floor = tonumber(ARGV[1])
local conc = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local adaptive = decayed(redis.call('GET', KEYS[3]), now, tonumber(ARGV[6]))
local circuit = redis.call('EXISTS', KEYS[6])
local ladder = redis.call('HMGET', KEYS[7], 'level', 'streak', 'since')
local level, streak = tonumber(ladder[1] or '0'), tonumber(ladder[2] or '0')
if ladder[3] and ladder[3] ~= '0' then streak = streak + 1 end
local jar = 0
if KEYS[8] and KEYS[8] ~= '' then jar = redis.call('EXISTS', KEYS[8]) end
if KEYS[9] then streak = streak + redis.call('HEXISTS', KEYS[9], ARGV[8]) end
local delay = math.max(floor, adaptive, tonumber(redis.call('GET', KEYS[4]) or '0'))
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= conc then
    local soon = math.max(0, tonumber(redis.call('GET', KEYS[1]) or '0') - now)
    return {0, math.max(delay, 250, soon), circuit, level, streak, jar, delay, soon}
  end
end
local slot = math.max(now, tonumber(redis.call('GET', KEYS[1]) or '0'))
local wait = slot - now
if wait > max_wait then
  return {0, wait, circuit, level, streak, jar, delay, 0}
end
local window = tonumber(ARGV[7])
local req, bad = counts(KEYS[5], now, window)
redis.call('HSET', KEYS[5], 'req', tostring(req + 1), 'bad', tostring(bad), 't', now)
redis.call('PEXPIRE', KEYS[5], math.floor(window * 10))
if delay > 0 then
  redis.call('SET', KEYS[1], math.floor(slot + delay), 'PX', math.floor(wait + delay + 60000))
end
if conc > 0 then
  redis.call('ZADD', KEYS[2], slot + lease, ARGV[5])
  redis.call('PEXPIRE', KEYS[2], wait + lease + 60000)
end
return {1, wait, circuit, level, streak, jar, delay, 0}
"""
)

_FINISH = (
    _DECAYED
    + INDEX_LUA
    + """
redis.call('ZREM', KEYS[2], ARGV[1])
local signal = tonumber(ARGV[2])
local retry_after = tonumber(ARGV[3])
local latency = tonumber(ARGV[4])
local half, window = tonumber(ARGV[5]), tonumber(ARGV[6])
local adaptive = decayed(redis.call('GET', KEYS[3]), now, half)
if signal == 1 then
  local req, bad = counts(KEYS[5], now, window)
  bad = bad + 1
  redis.call('HSET', KEYS[5], 'req', tostring(math.max(req, bad)), 'bad', tostring(bad), 't', now)
  redis.call('PEXPIRE', KEYS[5], math.floor(window * 10))
  if bad + 0.01 >= tonumber(ARGV[7]) and bad >= tonumber(ARGV[8]) * math.max(req, bad) then
    adaptive = math.max(adaptive * 2, tonumber(ARGV[9]), latency * tonumber(ARGV[11]))
  end
end
adaptive = math.min(adaptive, tonumber(ARGV[10]))
if adaptive < 10 then
  if redis.call('DEL', KEYS[3]) == 1 then redis.call('ZREM', KEYS[6], KEYS[3]) end
else
  redis.call('SET', KEYS[3], math.floor(adaptive) .. ' ' .. now, 'PX', math.floor(half * 12))
  index(KEYS[6], KEYS[3], now + math.floor(half * 12), now)
end
local hold = retry_after
local pace = tonumber(ARGV[12])
if pace >= 0 then
  hold = math.max(hold, pace, adaptive, tonumber(redis.call('GET', KEYS[4]) or '0'))
end
if hold > 0 then
  local nxt = tonumber(redis.call('GET', KEYS[1]) or '0')
  if now + hold > nxt then
    redis.call('SET', KEYS[1], math.floor(now + hold), 'PX', math.floor(hold + 60000))
  end
end
return math.floor(adaptive)
"""
)


THROTTLED = "crawl:index:throttled"  # the adaptive delay keys in force (broker.indexed)


def keys(job_id: int, host: str) -> list[str]:
    """next-slot, in-flight, adaptive delay, Crawl-delay floor, recent outcome counts."""
    base = f"crawl:host:{job_id}:{host}"
    return [f"{base}:next", f"{base}:inflight", f"{base}:delay", f"{base}:floor", f"{base}:health"]


def decayed_delay(raw: bytes | str | None, now_ms: int, half_life_s: float) -> float:
    """Seconds of adaptive delay in force now, from the stored "milliseconds set-at" value."""
    if not raw:
        return 0.0
    text = raw.decode() if isinstance(raw, bytes) else raw
    value, _, at = text.partition(" ")
    age = max(0, now_ms - int(at or now_ms))
    return float(value) * 2 ** (-age / (half_life_s * 1000)) / 1000


@dataclass
class Slot:
    granted: bool
    wait: float  # seconds until the slot (granted) or until it is worth asking again
    token: str
    circuit: bool  # the host has circuit-breaker state: ask tasks/fetch/circuit.py first
    ladder: int = 0  # the host's anti-bot ladder level (tasks/fetch/ladder.py)
    ban_streak: bool = False  # refusals since it last let a page in: report successes too
    jar: bool = True  # the cookie jar named to acquire() exists (False: no need to read it)
    opens: float = 0.0  # when the slot opens (granted), time.monotonic()
    pace: float = 0.0  # the host's pace when it was granted, seconds
    full_for: float = 0.0  # refused for its in-flight cap: seconds until its next slot, if set


def acquire(
    job_id: int, host: str, delay_s: float, concurrency: int, job=None, jar_key: str = "",
    run: tuple[str, str] | None = None,
) -> Slot:  # fmt: skip
    """Reserve the host's next request slot for this worker, or say how long to wait.
    ``jar_key``: a cookie jar (``tasks/fetch/sessions.py``) whose existence the same round
    trip reports, so that a host that never set a cookie costs no read of its jar. ``run``:
    the hash and field of the identity's run of bans there (``identity.run_field``): if it has
    one, the slot says so too (``ban_streak``: its next page let in ends it)."""
    token = uuid.uuid4().hex
    granted, wait_ms, circuit_state, level, streak, jar, pace_ms, full_ms = script(_ACQUIRE)(
        keys=[
            *keys(job_id, host),
            circuit.key(job_id, host),
            ladder.key(job_id, host),
            jar_key,
            *([run[0]] if run else []),
        ],  # fmt: skip
        args=[
            int(delay_s * 1000),
            concurrency,
            int(setting("HOST_MAX_WAIT_S", job) * 1000),
            int((setting("FETCH_DEADLINE_S", job) + IN_FLIGHT_SPARE_S) * 1000),
            token,
            int(setting("THROTTLE_HALF_LIFE_S", job) * 1000),
            int(setting("THROTTLE_WINDOW_S", job) * 1000),
            *([run[1]] if run else []),
        ],
    )
    wait = int(wait_ms) / 1000.0
    return Slot(bool(granted), wait, token, bool(circuit_state), int(level), int(streak) > 0,
                bool(jar) or not jar_key, time.monotonic() + wait, int(pace_ms) / 1000.0,
                int(full_ms) / 1000.0)  # fmt: skip


def finish(
    job_id: int,
    host: str,
    slot: Slot,
    *,
    signal: int,
    retry_after: float | None = None,
    latency: float = 0.0,
    pace: float | None = None,
    job=None,
) -> float:
    """Free the slot's in-flight place and report the outcome; returns the adaptive delay.
    ``pace``: the job's delay, to space the host's next request from this one's end (a job
    with an in-flight cap; see the module's docstring), None not to."""
    hold = min(retry_after or 0.0, setting("RETRY_BACKOFF_MAX_S", job))
    adaptive_ms = script(_FINISH)(
        keys=[*keys(job_id, host), THROTTLED],
        args=[
            slot.token,
            signal,
            int(hold * 1000),
            int(latency * 1000),
            int(setting("THROTTLE_HALF_LIFE_S", job) * 1000),
            int(setting("THROTTLE_WINDOW_S", job) * 1000),
            setting("THROTTLE_MIN_SIGNALS", job),
            setting("THROTTLE_SIGNAL_RATIO", job),
            int(setting("THROTTLE_START_DELAY_S", job) * 1000),
            int(setting("THROTTLE_MAX_DELAY_S", job) * 1000),
            setting("THROTTLE_LATENCY_FACTOR", job),
            -1 if pace is None else int(pace * 1000),
        ],
    )
    return int(adaptive_ms) / 1000.0


_SLOW_DOWN = (
    _DECAYED
    + INDEX_LUA
    + """
local adaptive = decayed(redis.call('GET', KEYS[1]), now, tonumber(ARGV[2]))
if adaptive < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. now, 'PX', math.floor(tonumber(ARGV[2]) * 12))
  index(KEYS[2], KEYS[1], now + math.floor(tonumber(ARGV[2]) * 12), now)
end
return 1
"""
)


def slow_down(job_id: int, host: str, seconds: float, job=None) -> None:
    """Make the host's adaptive delay at least ``seconds`` now (it decays from there)."""
    script(_SLOW_DOWN)(
        keys=[keys(job_id, host)[2], THROTTLED],
        args=[int(seconds * 1000), int(setting("THROTTLE_HALF_LIFE_S", job) * 1000)],
    )


_HOLD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local hold = tonumber(ARGV[1])
if now + hold > tonumber(redis.call('GET', KEYS[1]) or '0') then
  redis.call('SET', KEYS[1], now + hold, 'PX', hold + 60000)
end
return 1
"""


def hold(job_id: int, host: str, seconds: float) -> None:
    """Keep the host's next slot at least ``seconds`` away: every identity of it rests (its
    URLs wait in the frontier meanwhile, as after a Retry-After), or a request that leaves
    late for its slot keeps a pace before the next (``gates.leave``)."""
    script(_HOLD)(keys=[keys(job_id, host)[0]], args=[int(seconds * 1000)])


def set_floor(job_id: int, host: str, crawl_delay_s: float | None) -> None:
    """Record robots.txt's Crawl-delay for the host (None: no floor beyond the job's delay)."""
    key = keys(job_id, host)[3]
    if crawl_delay_s:
        client().set(key, int(crawl_delay_s * 1000), ex=86400)
    else:
        client().delete(key)


def host_delays(
    job_id: int, hosts: list[str], delay_s: float, job=None
) -> dict[str, tuple[float, float]]:
    """For the scheduler: each host's (effective delay, seconds until its next free slot)."""
    if not hosts:
        return {}
    redis = client()
    now_s, now_us = redis.time()
    now_ms = now_s * 1000 + now_us // 1000
    half_life = setting("THROTTLE_HALF_LIFE_S", job)
    names = []
    for h in hosts:
        k = keys(job_id, h)
        names += [k[0], k[2], k[3]]
    values = redis.mget(names)
    out = {}
    for i, host in enumerate(hosts):
        nxt, adaptive, floor = values[3 * i : 3 * i + 3]
        delay = max(delay_s, decayed_delay(adaptive, now_ms, half_life), int(floor or 0) / 1000)
        out[host] = (delay, max(0, int(nxt or 0) - now_ms) / 1000.0)
    return out
