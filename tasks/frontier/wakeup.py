"""Wake the scheduler when work appears, so that an idle scheduler can sleep instead of poll.

Before a pass that may end in a sleep, the scheduler sets ``SLEEPING``; whoever adds work (a
page with new links, a retry, a job started or resumed) or ends URLs (a worker after each
message: the job's last URL may be among them, and the job then finishes at the next pass
rather than at the scheduler's timer) calls :func:`nudge`, which pushes to
``WAKE`` only if that flag is set (one Redis call, nothing else when the scheduler is busy).
The scheduler sleeps in a ``BLPOP`` on ``WAKE`` until a nudge or its next due time. A nudge
that finds Redis away is dropped: the scheduler's own timer still comes round.
"""

from __future__ import annotations

import logging

from redis.exceptions import RedisError

from tasks.broker import client, script

log = logging.getLogger(__name__)

SLEEPING = "crawl:scheduler:sleeping"
WAKE = "crawl:scheduler:wake"
_NUDGE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[1])
  redis.call('LPUSH', KEYS[2], '1')
  redis.call('LTRIM', KEYS[2], 0, 0)
end
return 0
"""


def nudge() -> None:
    """Wake a sleeping scheduler (cheap when it is awake)."""
    try:
        script(_NUDGE)(keys=[SLEEPING, WAKE])
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
