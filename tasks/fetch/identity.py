"""Who a request says it is: a user agent, a proxy and a session, per job and host.

Reads ``USER_AGENT``, ``IDENTITY_BURN_S``, ``IDENTITY_REST_S`` and ``IDENTITY_REST_MAX_S``.

A job's pools are its ``user_agents`` (default: the platform's honest ``USER_AGENT``) and its
``proxies`` (default: none, direct). Each host of a job presents one identity at a time, kept
in Redis (``crawl:ident:{job}:{host}``) so that every worker agrees: a site sees one user
agent, one address and one cookie jar per visitor, as from a person. A new host starts on an
identity chosen by its name (so hosts spread over the pools) among the proxies not resting.
:func:`rotate` moves a host to the next combination that is rested, on a proxy that is not
resting, and that it has not been rotated away from within ``IDENTITY_BURN_S`` (when all were,
the one left longest ago), and a new *generation*, whose cookie jar starts empty: every ban
does it (``tasks/fetch/antibot.py``), and a host whose proxy went to rest moves on by itself.
Rotation happens only when pools are configured; with one user agent and no proxy there is
one identity. robots.txt is obeyed whatever the identity: its groups are matched
against the job's product token (``ROBOTS_AGENT``, ``crawlplatform``), the same for every
user agent presented.

A ban is the identity's: :func:`rest` parks the identity that got it on that host, in Redis
(``crawl:ident:{job}:{host}:rest``), for as long as the site said (``Retry-After``), else for
half the length of the last ban seen to lapse on that host (``IDENTITY_REST_S`` until one was
seen), doubling from the ban's start while it is refused again, at most ``IDENTITY_REST_MAX_S``
at a time. A page let in to it after its park (:func:`answered`) ends its run and tells how
long the ban lasted (at most the time from its first refusal to the end of its last park):
half of that is the next ban's first guess, so a ban's length is found with one refused
request, and found again when the site changes it. Rotation prefers rested identities that
share no part (user agent, proxy) with a parked one, since a site may ban by either; when
every one is parked the host waits for the first to come back (:func:`rest_left`), which
:func:`wait_for_lapse` records for ``job status`` and the dashboard (:func:`lapses`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from tasks.broker import client, script
from tasks.defaults import setting
from tasks.fetch import proxies
from tasks.rules import proxy_urls

_ROTATE = """
local gen = tonumber(redis.call('HGET', KEYS[1], 'gen') or '0')
if gen ~= tonumber(ARGV[1]) then return gen end
redis.call('HSET', KEYS[1], 'gen', gen + 1, 'ua', ARGV[2], 'px', ARGV[3])
redis.call('PEXPIRE', KEYS[1], 30 * 86400000)
local t = redis.call('TIME')
redis.call('ZADD', KEYS[2], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return gen + 1
"""
_ASSIGN = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'gen', 0, 'ua', ARGV[1], 'px', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], 30 * 86400000)
end
return redis.call('HMGET', KEYS[1], 'ua', 'px', 'gen')
"""


@dataclass(frozen=True)
class Identity:
    user_agent: str
    proxy_template: str  # "" for a direct connection
    generation: int
    jar: str = ""  # a spider request's cookie session (its meta's cookiejar); "": the default

    @property
    def proxy(self) -> str | None:
        """The proxy URL with its credentials (never log it): ``tasks/rules/proxy_urls.py``."""
        return proxy_urls.expand(self.proxy_template) if self.proxy_template else None

    @property
    def proxy_id(self) -> str:
        return proxies.proxy_id(self.proxy_template) if self.proxy_template else ""

    @property
    def key(self) -> str:
        """Names the identity's session (cookie jar): user agent, proxy, generation and, for a
        spider's ``cookiejar``, which of its sessions."""
        agent = zlib.crc32(self.user_agent.encode()) & 0xFFFF
        name = f"{agent:04x}.{self.proxy_id or 'direct'}.{self.generation}"
        return f"{name}.jar={self.jar}" if self.jar else name


def pools(job) -> tuple[list[str], list[str]]:
    return list(job.user_agents or [setting("USER_AGENT", job)]), list(job.proxies or [])


def _key(job_id: int, host: str) -> str:
    return f"crawl:ident:{job_id}:{host}"


def _pick(items: list[str], start: int, avoid: set[str] | None = None) -> int:
    """Index of the first item from ``start`` on (cyclically) not in ``avoid``."""
    for step in range(len(items)):
        index = (start + step) % len(items)
        if not avoid or proxies.proxy_id(items[index]) not in avoid:
            return index
    return start % len(items)


def current(job, host: str) -> Identity:
    """The identity ``host`` is visited with now (assigned on first use)."""
    agents, pool = pools(job)
    if len(agents) == 1 and not pool:
        return Identity(agents[0], "", 0)
    seed = zlib.crc32(host.encode())
    resting = proxies.resting(job.pk, [proxies.proxy_id(p) for p in pool])
    ua0 = seed % len(agents)
    px0 = _pick(pool, seed, resting) if pool else -1
    ua, px, gen = script(_ASSIGN)(keys=[_key(job.pk, host)], args=[ua0, px0])
    found = Identity(agents[int(ua) % len(agents)], pool[int(px)] if pool else "", int(gen))
    if pool and found.proxy_id in resting and len(resting) < len(pool):
        return rotate(job, host, found)  # its proxy rests: move on to a healthy one
    return found


def _burnt(job_id: int, host: str) -> str:
    """When the host was last rotated away from each identity ("ua.px" -> milliseconds)."""
    return f"crawl:ident:{job_id}:{host}:burnt"


def _combinations(agents: list[str], pool: list[str]) -> list[tuple[int, int]]:
    """Every (user agent, proxy) pair, the proxy changing first (-1: direct)."""
    n = len(pool) or 1
    return [(k // n % len(agents), k % n if pool else -1) for k in range(len(agents) * n)]


def _burnt_at(job, host: str) -> dict[tuple[int, int], float]:
    """Identities the host was rotated away from within ``IDENTITY_BURN_S``, and when."""
    redis = client()
    now_s, now_us = redis.time()
    since = now_s * 1000 + now_us // 1000 - setting("IDENTITY_BURN_S", job) * 1000
    return {
        tuple(int(i) for i in member.split(b".")): score
        for member, score in redis.zrangebyscore(
            _burnt(job.pk, host), since, "+inf", withscores=True
        )  # fmt: skip
    }


def _pair(job, who: Identity) -> tuple[int, int]:
    """The (user agent, proxy) indexes of ``who`` in the job's pools (-1: direct)."""
    agents, pool = pools(job)
    return (agents.index(who.user_agent) if who.user_agent in agents else 0,
            pool.index(who.proxy_template) if who.proxy_template in pool else -1)  # fmt: skip


def _rests(job_id: int, host: str) -> str:
    """When each identity of the host is parked until ("ua.px" -> ms), its refusals in a row
    ("ua.px#n"), when the first of them came ("ua.px#first"), and how long the last ban seen
    to lapse there lasted ("#len", ms)."""
    return f"crawl:ident:{job_id}:{host}:rest"


_REST = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local till = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if till > now then return {0, till - now} end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1] .. '#n', 1)
local first = tonumber(redis.call('HGET', KEYS[1], ARGV[1] .. '#first') or '0')
if n == 1 or first == 0 then
  first = now
  redis.call('HSET', KEYS[1], ARGV[1] .. '#first', now)
end
local base = tonumber(ARGV[2])
local seen = tonumber(redis.call('HGET', KEYS[1], '#len') or '0')
if seen > 0 then base = math.floor(seen / 2) end
local rest = tonumber(ARGV[4])
if rest <= 0 then
  rest = math.max(first + base * math.pow(2, math.min(n - 1, 20)) - now, base)
  rest = math.floor(math.min(rest, tonumber(ARGV[3])))
end
redis.call('HSET', KEYS[1], ARGV[1], now + rest)
redis.call('PEXPIRE', KEYS[1], 86400000)
return {1, rest}
"""
_ANSWERED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local till = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if till > now then return 0 end
local first = tonumber(redis.call('HGET', KEYS[1], ARGV[1] .. '#first') or '0')
if first > 0 and till > first then redis.call('HSET', KEYS[1], '#len', till - first) end
return redis.call('HDEL', KEYS[1], ARGV[1] .. '#n', ARGV[1] .. '#first')
"""


@dataclass(frozen=True)
class Rest:
    news: bool  # the identity was not parked yet: this ban is news about it
    seconds: float  # how long it is parked from now


def _name(job, who: Identity) -> str:
    ua, px = _pair(job, who)
    return f"{ua}.{px}"


def rest(job, host: str, who: Identity, retry_after: float | None = None) -> Rest:
    """``who`` was refused by ``host``: it is parked there (unless it already is: a request of
    it that was in flight brings no news) for ``retry_after`` seconds if the site said, else
    as the last ban seen there lasted (see the module's docstring)."""
    news, ms = script(_REST)(
        keys=[_rests(job.pk, host)],
        args=[_name(job, who), int(setting("IDENTITY_REST_S", job) * 1000),
              int(setting("IDENTITY_REST_MAX_S", job) * 1000), int((retry_after or 0) * 1000)],
    )  # fmt: skip
    return Rest(bool(news), int(ms) / 1000.0)


def answered(job, host: str, who: Identity) -> None:
    """``host`` let a page in to ``who``: if its park is over, its run of refusals ends and the
    ban's length is learnt (an answer to a request sent before the ban says nothing)."""
    script(_ANSWERED)(keys=[_rests(job.pk, host)], args=[_name(job, who)])


def run_field(job, host: str, who: Identity) -> tuple[str, str] | None:
    """The hash and field that say whether ``who`` is in a run of refusals on ``host``
    (``politeness.acquire`` reads it in the slot's round trip); None for a job of one
    identity, whose runs the host's own record shows."""
    agents, pool = pools(job)
    if len(agents) == 1 and not pool:
        return None
    return _rests(job.pk, host), _name(job, who) + "#n"


def _resting(job, host: str) -> dict[tuple[int, int], float]:
    """Identities parked on ``host`` now, and for how many more seconds."""
    redis = client()
    now_s, now_us = redis.time()
    now = now_s * 1000 + now_us // 1000
    return {
        tuple(int(i) for i in name.split(b".")): (int(till) - now) / 1000.0
        for name, till in redis.hgetall(_rests(job.pk, host)).items()
        if b"#" not in name and int(till) > now
    }


def rest_left(job, host: str, who: Identity) -> float:
    """Seconds until ``who`` may ask ``host`` again (0: it may)."""
    return _resting(job, host).get(_pair(job, who), 0.0)


def _lapses(job_id: int) -> str:
    """Hosts of the job whose every identity is parked, and when the first comes back (ms)."""
    return f"crawl:banwait:{job_id}"


_WAIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local before = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
redis.call('HSET', KEYS[1], ARGV[1], now + tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], 86400000)
if before < now then return 1 end
return 0
"""


def wait_for_lapse(job, host: str, seconds: float) -> bool:
    """Every identity of ``host`` is parked: the host waits ``seconds`` for the first to come
    back. True if it was not waiting already (a new wait, worth a line in the log)."""
    return bool(script(_WAIT)(keys=[_lapses(job.pk)], args=[host, int(seconds * 1000)]))


def stop_waiting(job, host: str) -> None:
    """``host`` waits for no ban any more (its patience ran out)."""
    client().hdel(_lapses(job.pk), host)


def lapses(job_id: int) -> dict[str, float]:
    """Hosts of the job waiting for a ban to lapse, and how many seconds are left."""
    redis = client()
    now_s, now_us = redis.time()
    now = now_s * 1000 + now_us // 1000
    return {
        name.decode(): (int(until) - now) / 1000.0
        for name, until in redis.hgetall(_lapses(job_id)).items()
        if int(until) > now
    }


def rotate(job, host: str, seen: Identity) -> Identity:
    """Move ``host`` on from ``seen`` (once, however many workers ask): to the next identity
    that is not parked, sharing the fewest parts (user agent, proxy) with parked ones, on a
    proxy that is not resting, and not rotated away from within ``IDENTITY_BURN_S`` (else the
    one left longest ago), with a fresh session. When every identity is parked, the one that
    comes back first."""
    agents, pool = pools(job)
    if len(agents) == 1 and not pool:
        return seen
    pairs = _combinations(agents, pool)
    here = _pair(job, seen)
    start = pairs.index(here) + 1 if here in pairs else 0
    order = [pairs[(start + i) % len(pairs)] for i in range(len(pairs))]
    resting = proxies.resting(job.pk, [proxies.proxy_id(p) for p in pool]) if pool else set()
    burnt, asleep = _burnt_at(job, host), _resting(job, host)

    def rank(pair: tuple[int, int]) -> tuple:
        proxy_rests = pair[1] >= 0 and proxies.proxy_id(pool[pair[1]]) in resting
        if pair in asleep:  # every identity is parked: the first back
            return (True, asleep[pair], 0, proxy_rests, burnt.get(pair, 0.0))
        shared = sum((ua == pair[0]) + (px == pair[1]) for ua, px in asleep)
        return (False, 0.0, shared, proxy_rests, burnt.get(pair, 0.0))

    choice = min([p for p in order if p != here] or order, key=rank)  # ties: the next in order
    script(_ROTATE)(
        keys=[_key(job.pk, host), _burnt(job.pk, host)],
        args=[seen.generation, choice[0], choice[1], f"{here[0]}.{here[1]}",
              int(setting("IDENTITY_BURN_S", job) * 1000)],
    )  # fmt: skip
    raw = client().hmget(_key(job.pk, host), "ua", "px", "gen")
    return Identity(agents[int(raw[0]) % len(agents)], pool[int(raw[1])] if pool else "",
                    int(raw[2]))  # fmt: skip
