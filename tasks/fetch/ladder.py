"""The anti-bot ladder of a host: what the crawl does when a site starts refusing it.

Reads ``LADDER_CLIMB_BANS``, ``LADDER_DESCEND_SUCCESSES``, ``LADDER_QUIET_S``,
``LADDER_BACKOFF_DELAY_S`` and ``LADDER_MAX_LEVEL``.

Per (job, host), in Redis (``crawl:ladder:{job}:{host}``), shared by every worker:

====  ===================  ===========================================================
0     normal               every ban already rests its identity and moves the host to a
                           rested one (``tasks/fetch/identity.py``, ``antibot.py``)
1     back off             the host's pace is at least ``LADDER_BACKOFF_DELAY_S``
2     rotate identity      bans keep coming after backing off: rotation goes on as at
                           every ban (user agent, proxy, a fresh session)
3     render               its pages are fetched by headless Chromium (``render`` queue),
                           if the job may render; otherwise it acts as level 2
4     top                  every identity and way of asking is refused; its URLs still
                           wait for rested identities and are parked for review after
                           ``BAN_GIVE_UP_S`` of refusals (successes are how a host
                           steps down)
====  ===================  ===========================================================

A host climbs one level after ``LADDER_CLIMB_BANS`` ban signals in a row
(``tasks/fetch/bans.py``; those of requests that ran a level lower are not counted), and
steps down one level after ``LADDER_DESCEND_SUCCESSES`` successes in a row once
``LADDER_QUIET_S`` have passed since its last ban. Every URL records
the level its last attempt ran at (``FrontierURL.ladder_level``); the levels are in
``/metrics`` (``crawlplatform_host_ladder_level``) and the admin.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.broker import client, script
from tasks.defaults import setting

NORMAL, BACK_OFF, ROTATE, RENDER, PARK = 0, 1, 2, 3, 4

_SIGNAL = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', KEYS[1], 'level', 'streak', 'good', 'last_ban')
local level, streak = tonumber(h[1] or '0'), tonumber(h[2] or '0')
local good, last_ban = tonumber(h[3] or '0'), tonumber(h[4] or '0')
local before, run = level, 0
if ARGV[1] == '1' and tonumber(ARGV[6]) < level then
  return {level, level, -1}
end
if ARGV[1] == '1' then
  streak, good, last_ban = streak + 1, 0, now
  run = streak
  if streak >= tonumber(ARGV[2]) and level < tonumber(ARGV[5]) then
    level, streak = level + 1, 0
  end
else
  streak, good = 0, good + 1
  if level > 0 and good >= tonumber(ARGV[3]) and now - last_ban >= tonumber(ARGV[4]) then
    level, good = level - 1, 0
  end
end
if level == 0 and streak == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 'level', level, 'streak', streak, 'good', good,
             'last_ban', last_ban)
  redis.call('PEXPIRE', KEYS[1], 7 * 86400000)
end
return {before, level, run}
"""


def key(job_id: int, host: str) -> str:
    return f"crawl:ladder:{job_id}:{host}"


@dataclass(frozen=True)
class Step:
    before: int  # the host's level before this signal
    after: int  # and after it
    run: int  # bans in a row including this one (0 for a success; -1: not counted, see signal)


def signal(job, host: str, *, banned: bool, ran_at: int = 0) -> Step:
    """Count a ban (or a success) for ``host``; returns how its ladder moved. ``ran_at``: the
    level the request ran at; a ban from below the host's level now is not counted (the host
    climbed while it was in flight: the same news, already acted on)."""
    before, after, run = script(_SIGNAL)(
        keys=[key(job.pk, host)],
        args=[
            "1" if banned else "0",
            setting("LADDER_CLIMB_BANS", job),
            setting("LADDER_DESCEND_SUCCESSES", job),
            int(setting("LADDER_QUIET_S", job) * 1000),
            setting("LADDER_MAX_LEVEL", job),
            ran_at,
        ],
    )
    return Step(int(before), int(after), int(run))


def reset(job_id: int, host: str) -> None:
    """Back to level 0 (a person requeued the host's parked URLs after solving its challenge)."""
    client().delete(key(job_id, host))


def levels(job_id: int) -> dict[str, int]:
    """Every host of a job with ladder state, and its level (the job's admin page)."""
    redis = client()
    prefix = f"crawl:ladder:{job_id}:"
    names = list(redis.scan_iter(match=prefix + "*", count=500))
    pipe = redis.pipeline(transaction=False)
    for name in names:
        pipe.hget(name, "level")
    values = pipe.execute() if names else []
    return {n.decode()[len(prefix) :]: int(v or 0) for n, v in zip(names, values, strict=True)}
