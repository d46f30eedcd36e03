"""Who a request says it is: a user agent, a proxy and a session, per job and host.

A job's pools are its ``user_agents`` (default: the platform's honest ``USER_AGENT``) and its
``proxies`` (default: none, direct). Each host of a job presents one identity at a time, kept
in Redis (``crawl:ident:{job}:{host}``) so that every worker agrees: a site sees one user
agent, one address and one cookie jar per visitor, as from a person. A new host starts on an
identity chosen by its name (so hosts spread over the pools) among the proxies not resting.
:func:`rotate` moves a host to the next combination it has not been rotated away from within
``IDENTITY_BURN_S`` (a site's ban outlasts the request that showed it; when all were, the one
left longest ago), on a proxy that is not resting, and a new *generation*, whose cookie jar
starts empty: the ladder does it at level 2, and a host whose proxy went to rest moves on by
itself. Rotation happens only when pools are configured; with one user agent and no proxy
there is one identity. robots.txt is obeyed whatever the identity: its groups are matched
against the job's product token (``ROBOTS_AGENT``, ``crawlplatform``), the same for every
user agent presented.
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

    @property
    def proxy(self) -> str | None:
        """The proxy URL with its credentials (never log it): ``tasks/rules/proxy_urls.py``."""
        return proxy_urls.expand(self.proxy_template) if self.proxy_template else None

    @property
    def proxy_id(self) -> str:
        return proxies.proxy_id(self.proxy_template) if self.proxy_template else ""

    @property
    def key(self) -> str:
        """Names the identity's session (cookie jar): user agent, proxy and generation."""
        agent = zlib.crc32(self.user_agent.encode()) & 0xFFFF
        return f"{agent:04x}.{self.proxy_id or 'direct'}.{self.generation}"


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


def replaced(job, host: str, seen: Identity) -> bool:
    """Has ``host`` moved on from ``seen`` since (another worker rotated after a ban)?"""
    gen = client().hget(_key(job.pk, host), "gen")
    return gen is not None and int(gen) != seen.generation


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


def rotate(job, host: str, seen: Identity) -> Identity:
    """Move ``host`` on from ``seen`` (once, however many workers ask): to the next identity it
    was not rotated away from within ``IDENTITY_BURN_S``, on a proxy that is not resting,
    with a fresh session. When every identity was, the one left longest ago (a site's ban
    wears off with time, if it does)."""
    agents, pool = pools(job)
    if len(agents) == 1 and not pool:
        return seen
    pairs = _combinations(agents, pool)
    here = (agents.index(seen.user_agent) if seen.user_agent in agents else 0,
            pool.index(seen.proxy_template) if seen.proxy_template in pool else -1)  # fmt: skip
    start = pairs.index(here) + 1 if here in pairs else 0
    order = [pairs[(start + i) % len(pairs)] for i in range(len(pairs))]
    resting = proxies.resting(job.pk, [proxies.proxy_id(p) for p in pool]) if pool else set()
    burnt = _burnt_at(job, host)

    def rests(pair: tuple[int, int]) -> bool:
        return pair[1] >= 0 and proxies.proxy_id(pool[pair[1]]) in resting

    fresh = [p for p in order if p != here and p not in burnt]
    choice = next((p for p in fresh if not rests(p)), None) or (fresh[0] if fresh else None)
    if choice is None:
        others = [p for p in order if p != here] or order
        choice = min(others, key=lambda p: (rests(p), burnt.get(p, 0.0)))
    script(_ROTATE)(
        keys=[_key(job.pk, host), _burnt(job.pk, host)],
        args=[seen.generation, choice[0], choice[1], f"{here[0]}.{here[1]}",
              int(setting("IDENTITY_BURN_S", job) * 1000)],
    )  # fmt: skip
    raw = client().hmget(_key(job.pk, host), "ua", "px", "gen")
    return Identity(agents[int(raw[0]) % len(agents)], pool[int(raw[1])] if pool else "",
                    int(raw[2]))  # fmt: skip
