"""Wake the scheduler when work appears, so that an idle scheduler can sleep instead of poll.

Before a pass that may end in a sleep, the scheduler sets ``SLEEPING``; whoever adds work (a
page with new links, a retry, a job started or resumed) or ends URLs (a worker after each
message: the job's last URL may be among them, and the job then finishes at the next pass
rather than at the scheduler's timer) calls :func:`nudge`, which pushes to
``WAKE`` only if that flag is set (one Redis call, nothing else when the scheduler is busy).
A worker's nudge after a message also adds the seconds its slot spent on the message's URLs to
the job's totals (``PACE``), which the scheduler reads to size the job's next messages
(``pacing.SlotTime``): the same call, no round trip of its own; the totals expire
``SLOT_TIME_KEEP_S`` after the last message. The scheduler sleeps in a ``BLPOP`` on ``WAKE``
until a nudge or its next due time. A nudge that finds Redis away is dropped: the scheduler's
own timer still comes round.
"""

from __future__ import annotations

import logging

from redis.exceptions import RedisError

from tasks.broker import client, script
from tasks.defaults import setting

log = logging.getLogger(__name__)

SLEEPING = "crawl:scheduler:sleeping"
WAKE = "crawl:scheduler:wake"
PACE = "crawl:pace:{job}"  # a job's worker slot seconds ('s') over its URLs ('n'), summed
_NUDGE = """
if ARGV[2] and tonumber(ARGV[2]) > 0 then
  redis.call('HINCRBYFLOAT', KEYS[3], 's', ARGV[1])
  redis.call('HINCRBY', KEYS[3], 'n', ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[1])
  redis.call('LPUSH', KEYS[2], '1')
  redis.call('LTRIM', KEYS[2], 0, 0)
end
return 0
"""


def nudge(job_id: int | None = None, seconds: float = 0.0, urls: int = 0) -> None:
    """Wake a sleeping scheduler (cheap when it is awake); after a message of ``job_id``, add
    the ``seconds`` a worker slot spent on its ``urls`` URLs to the job's totals."""
    keys, args = [SLEEPING, WAKE], []
    if job_id is not None and urls > 0:
        keys.append(PACE.format(job=job_id))
        args = [repr(max(0.0, seconds)), urls, int(setting("SLOT_TIME_KEEP_S") * 1000)]
    try:
        script(_NUDGE)(keys=keys, args=args)
    except RedisError as exc:
        log.debug("scheduler nudge dropped: %s", exc)


def listen(seconds: float) -> None:
    """Ask to be nudged for work added from now on (before the pass that may end in sleep)."""
    pipe = client().pipeline(transaction=False)
    pipe.delete(WAKE)  # nudges from before are for work the coming pass sees anyway
    pipe.set(SLEEPING, "1", px=max(1, int(seconds * 1000)))
    pipe.execute()


def wait(seconds: float) -> bool:
    """Sleep until a nudge or ``seconds``; True if nudged."""
    if seconds <= 0:
        return False
    return client().blpop([WAKE], timeout=seconds) is not None


def interrupt() -> None:
    """End a sleep now (shutdown)."""
    client().lpush(WAKE, "1")
