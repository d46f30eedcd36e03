"""Scheduler leadership and fencing: one scheduler is active at a time.

Leadership is a Redis key with a short expiry (``LEADER_TTL_S``) that the leader renews each
pass; if the leader dies, another takes over within that time. A new leader also raises the
fencing epoch in the database (``SchedulerFence``), and every release checks, in its own
transaction, that the epoch is still its leader's (:func:`check_fence`): a leader whose
lease ran out during a slow pass writes nothing.

For ``/metrics``: who leads now (:func:`leader`) and how many passes leaders have made
(:func:`count_pass`, a Redis counter: ``crawlplatform_scheduler_passes_total``).

Reads no setting of ``tasks/defaults.py``.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F

from tasks import broker
from tasks.defaults import setting
from tasks.frontier import db
from web.models import SchedulerFence

LEADER_KEY = "crawl:scheduler:leader"
PASSES_KEY = "crawl:scheduler:passes"  # passes made by leaders, for /metrics
FENCE = "scheduler"

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 2 end
return 0
"""


class NotLeader(Exception):
    """A newer leader raised the fencing epoch: this scheduler must write nothing more."""


def renew(identity: str) -> int:
    """Take or renew the leader key for ``identity``: 0 another leads, 1 renewed, 2 won."""
    ttl_ms = int(setting("LEADER_TTL_S") * 1000)
    return int(broker.script(_RENEW)(keys=[LEADER_KEY], args=[identity, ttl_ms]))


def advance_epoch() -> int:
    """Raise the fencing epoch in the database; returns the new leader's epoch."""
    with transaction.atomic():
        SchedulerFence.objects.get_or_create(name=FENCE)
        SchedulerFence.objects.filter(name=FENCE).update(epoch=F("epoch") + 1)
        return SchedulerFence.objects.get(name=FENCE).epoch


def leader() -> str | None:
    """The identity of the scheduler that leads now, or None."""
    found = broker.client().get(LEADER_KEY)
    return found.decode() if found is not None else None


def count_pass() -> None:
    """Count one leader's pass (a counter in Redis: it restarts at 0 if Redis loses it)."""
    broker.client().incr(PASSES_KEY)


def passes() -> int:
    """Passes counted since Redis last lost its data."""
    return int(broker.client().get(PASSES_KEY) or 0)


def resign(identity: str) -> None:
    """Give the leader key up, if ``identity`` holds it."""
    client = broker.client()
    if client.get(LEADER_KEY) == identity.encode():
        client.delete(LEADER_KEY)


_FENCE_SQL = f"""
UPDATE {SchedulerFence._meta.db_table} SET epoch = epoch WHERE name = %s AND epoch = %s
"""  # noqa: S608 (the model's table name; every value a bound parameter)


def check_fence(epoch: int | None) -> None:
    """Inside a release's transaction: the epoch is still ours (and stays so until commit)."""
    if epoch is None:
        return
    with db.prepared_cursor() as cursor:
        cursor.execute(_FENCE_SQL, [FENCE, epoch])
        ours = cursor.rowcount
    if not ours:
        raise NotLeader(f"a newer scheduler leads (this one had epoch {epoch})")
