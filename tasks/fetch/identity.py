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

A ban is the identity's: :func:`rest` sends the identity that got it to rest on that host for
``IDENTITY_REST_S``, doubling with each ban in a row of that identity there (a success ends
the run, :func:`answered`), capped at ``IDENTITY_REST_MAX_S``, in Redis
(``crawl:ident:{job}:{host}:rest``); rotation prefers rested identities, and when every one
rests the host waits for the first to wake (:func:`rest_left`).
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
    """When each identity of the host rests until ("ua.px" -> ms) and its bans in a row
    ("ua.px#n")."""
    return f"crawl:ident:{job_id}:{host}:rest"


_REST = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local till = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if till > now then return {0, till - now} end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1] .. '#n', 1)
local rest = math.min(tonumber(ARGV[2]) * math.pow(2, math.min(n - 1, 20)), tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], ARGV[1], now + rest)
redis.call('PEXPIRE', KEYS[1], 86400000)
return {1, rest}
"""


@dataclass(frozen=True)
class Rest:
    news: bool  # the identity was not resting yet: this ban is news about it
    seconds: float  # how long it rests from now


def rest(job, host: str, who: Identity) -> Rest:
    """``who`` was refused by ``host``: it rests there (unless it already does: a request of
    it that was in flight brings no news), ``IDENTITY_REST_S`` doubling per ban in a row,
    capped at ``IDENTITY_REST_MAX_S``."""
    ua, px = _pair(job, who)
    news, ms = script(_REST)(
        keys=[_rests(job.pk, host)],
        args=[f"{ua}.{px}", int(setting("IDENTITY_REST_S", job) * 1000),
              int(setting("IDENTITY_REST_MAX_S", job) * 1000)],
    )  # fmt: skip
    return Rest(bool(news), int(ms) / 1000.0)


def answered(job, host: str, who: Identity) -> None:
    """``host`` answered ``who``: its next ban starts a new run of rests."""
    ua, px = _pair(job, who)
    client().hdel(_rests(job.pk, host), f"{ua}.{px}#n")


def _resting(job, host: str) -> dict[tuple[int, int], float]:
    """Identities resting on ``host`` now, and for how many more seconds."""
    redis = client()
    now_s, now_us = redis.time()
    now = now_s * 1000 + now_us // 1000
    return {
        tuple(int(i) for i in name.split(b".")): (int(till) - now) / 1000.0
        for name, till in redis.hgetall(_rests(job.pk, host)).items()
        if b"#" not in name and int(till) > now
    }


def rest_left(job, host: str, who: Identity) -> float:
    """Seconds until ``who`` is rested on ``host`` (0: it is)."""
    return _resting(job, host).get(_pair(job, who), 0.0)


def rotate(job, host: str, seen: Identity) -> Identity:
    """Move ``host`` on from ``seen`` (once, however many workers ask): to the next identity
    that is rested, on a proxy that is not resting, and was not rotated away from within
    ``IDENTITY_BURN_S`` (else the one left longest ago), with a fresh session. When every
    identity rests, the one that wakes first."""
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
        return (pair in asleep, asleep.get(pair, 0.0), proxy_rests, burnt.get(pair, 0.0))

    choice = min([p for p in order if p != here] or order, key=rank)  # ties: the next in order
    script(_ROTATE)(
        keys=[_key(job.pk, host), _burnt(job.pk, host)],
        args=[seen.generation, choice[0], choice[1], f"{here[0]}.{here[1]}",
              int(setting("IDENTITY_BURN_S", job) * 1000)],
    )  # fmt: skip
    raw = client().hmget(_key(job.pk, host), "ua", "px", "gen")
    return Identity(agents[int(raw[0]) % len(agents)], pool[int(raw[1])] if pool else "",
                    int(raw[2]))  # fmt: skip
