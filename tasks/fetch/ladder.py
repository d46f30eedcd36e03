"""The anti-bot ladder of a host: what the crawl does when rotating identities does not help.

Reads ``LADDER_CLIMB_BANS``, ``LADDER_DESCEND_SUCCESSES``, ``LADDER_QUIET_S``,
``LADDER_BACKOFF_DELAY_S`` and ``LADDER_MAX_LEVEL``.

Per (job, host), in Redis (``crawl:ladder:{job}:{host}``, named in ``crawl:index:ladders``
while it exists, for ``/metrics`` and the admin), shared by every worker:

====  ===================  ===========================================================
0     normal               every ban parks the identity that got it and moves the host to
                           a rested one (``tasks/fetch/identity.py``, ``refusals.py``)
1     back off             while every identity is parked, the host's pace is at least
                           ``LADDER_BACKOFF_DELAY_S`` once one is back
2     rotate identity      bans keep coming after backing off: rotation goes on as at
                           every ban (user agent, proxy, a fresh session)
3     render               its pages are fetched by headless Chromium (``render`` queue),
                           if the job may render; otherwise it acts as level 2
4     top                  every identity and way of asking is refused; its URLs still
                           wait for identities whose bans lapse, up to ``BAN_PATIENCE_S``
                           (pages let in are how a host steps down)
====  ===================  ===========================================================

A host climbs one level after ``LADDER_CLIMB_BANS`` identity bans in a row with no page let in
between (``tasks/fetch/bans.py``): a ban counts when it is news, the first of an identity not
parked yet, and did not come from a request that ran a level lower. So a host climbs only
while fresh identities are refused one after another: rotation that works keeps it at 0. It
steps down one level after ``LADDER_DESCEND_SUCCESSES`` pages let in in a row once
``LADDER_QUIET_S`` have passed since its last ban. The same record keeps when the host last
let a page in, so how long it has refused every identity is known. Every URL records the
level its last attempt ran at (``FrontierURL.ladder_level``); the levels are in ``/metrics``
(``crawlplatform_host_ladder_level``) and the admin.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tasks.broker import INDEX_LUA, client, indexed, script
from tasks.defaults import setting

NORMAL, BACK_OFF, ROTATE, RENDER, PARK = 0, 1, 2, 3, 4
LADDERS = "crawl:index:ladders"  # the hosts with ladder state (broker.indexed)

_SIGNAL = INDEX_LUA + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', KEYS[1], 'level', 'streak', 'good', 'last_ban', 'since')
local level, streak = tonumber(h[1] or '0'), tonumber(h[2] or '0')
local good, last_ban = tonumber(h[3] or '0'), tonumber(h[4] or '0')
local since = tonumber(h[5] or '0')
local kind = ARGV[1]
local before, run = level, 0
if kind == '1' and tonumber(ARGV[6]) < level then kind = '2' end
if kind ~= '0' then
  good, last_ban, run = 0, now, -1
  if since == 0 then since = now end
  if kind == '1' then
    streak = streak + 1
    run = streak
    if streak >= tonumber(ARGV[2]) and level < tonumber(ARGV[5]) then
      level, streak = level + 1, 0
    end
  end
else
  streak, good, since = 0, good + 1, 0
  if level > 0 and good >= tonumber(ARGV[3]) and now - last_ban >= tonumber(ARGV[4]) then
    level, good = level - 1, 0
  end
end
if level == 0 and streak == 0 and since == 0 then
  if redis.call('DEL', KEYS[1]) == 1 then redis.call('ZREM', KEYS[2], KEYS[1]) end
else
  redis.call('HSET', KEYS[1], 'level', level, 'streak', streak, 'good', good,
             'last_ban', last_ban, 'since', since)
  redis.call('PEXPIRE', KEYS[1], 7 * 86400000)
  index(KEYS[2], KEYS[1], now + 7 * 86400000, now)
end
local refused = 0
if since > 0 then refused = now - since end
return {before, level, run, refused}
"""


def key(job_id: int, host: str) -> str:
    return f"crawl:ladder:{job_id}:{host}"


@dataclass(frozen=True)
class Step:
    before: int  # the host's level before this signal
    after: int  # and after it
    run: int  # counted bans in a row including this one (0 for a success; -1: not counted)
    refused_s: float = field(default=0.0, compare=False)  # how long it has let no page in


def signal(job, host: str, *, banned: bool, ran_at: int = 0, counted: bool = True) -> Step:
    """Count a refusal (or a page let in) for ``host``; returns how its ladder moved.
    ``ran_at``: the level the request ran at; ``counted``: the refusal is news (an identity
    that was not parked yet). A refusal that is not news, or from below the host's level now
    (the host climbed while it was in flight: the same news, already acted on), climbs nothing,
    but the host's run of refusals goes on: the time since it last let a page in (``since``)
    is how long it has refused, which ``tasks/fetch/refusals.py`` holds to ``BAN_PATIENCE_S``."""
    kind = "0" if not banned else "1" if counted else "2"
    before, after, run, refused_ms = script(_SIGNAL)(
        keys=[key(job.pk, host), LADDERS],
        args=[
            kind,
            setting("LADDER_CLIMB_BANS", job),
            setting("LADDER_DESCEND_SUCCESSES", job),
            int(setting("LADDER_QUIET_S", job) * 1000),
            setting("LADDER_MAX_LEVEL", job),
            ran_at,
        ],
    )
    return Step(int(before), int(after), int(run), int(refused_ms) / 1000.0)


def reset(job_id: int, host: str) -> None:
    """Back to level 0 (a person requeued the host's parked URLs after solving its challenge)."""
    pipe = client().pipeline(transaction=False)
    pipe.delete(key(job_id, host))
    pipe.zrem(LADDERS, key(job_id, host))
    pipe.execute()


def levels(job_id: int) -> dict[str, int]:
    """Every host of a job with ladder state, and its level (the job's admin page)."""
    redis = client()
    prefix = f"crawl:ladder:{job_id}:"
    names = [name for name in indexed(LADDERS) if name.decode().startswith(prefix)]
    pipe = redis.pipeline(transaction=False)
    for name in names:
        pipe.hget(name, "level")
    values = pipe.execute() if names else []
    return {
        n.decode()[len(prefix) :]: int(v)
        for n, v in zip(names, values, strict=True)
        if v is not None  # its key went since it was indexed
    }
