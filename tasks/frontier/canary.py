"""Automatic canary analysis: a channel that has part of the weight (the canary) is compared
with the channel that has the most (the stable one) over a sliding window, and rolled back at
once when it does worse by more than a margin; a canary started with ``channel canary`` steps
up through ``CANARY_STEPS`` while it stays healthy, then takes everything.

Workers count each attempt's outcome per channel (:func:`count`): ok, failed (an error, a
5xx, a timeout: whether it will be retried or not), ban-detected, parse error, and its
duration in a histogram; deferrals (politeness, robots) are not attempts and are not
counted, nor are the URLs of jobs pinned to a channel (only the routed share is compared).
The counts are kept in memory and added to Redis at most once a second, in
``CANARY_SLOT_S`` slots, so they cost the hot path one pipelined call a second per process.

The scheduler leader runs :func:`analyse` every few seconds. A canary with at least
``CANARY_MIN_SAMPLES`` attempts in ``CANARY_WINDOW_S`` is rolled back (``channels.rollback``:
its weight to the stable channel, its queued URLs moved) if its failed, ban or parse-error
share exceeds the stable one's by ``CANARY_*_MARGIN``, or its p95 duration exceeds the
stable one's times ``CANARY_LATENCY_FACTOR`` plus a second. Every decision is a
``ChannelEvent`` row; ``/metrics`` exports the last rollback's time for the alert.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from tasks import broker
from tasks.defaults import setting
from tasks.frontier import channels

log = logging.getLogger(__name__)

LATENCY_BOUNDS_S = (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60)  # histogram bin upper bounds
KINDS = ("ok", "failed", "ban", "parse")
BAN_REASONS = frozenset({"banned", "identity_banned"})
WHO = "canary analysis"

_pending: Counter[str] = Counter()
_lock = threading.Lock()
_flushed = 0.0


def _key(channel: str, slot: int) -> str:
    return f"crawl:canary:{channel}:{slot}"


def kind(state: str | None, reason: str) -> str:
    """What one attempt counts as."""
    if reason in BAN_REASONS:
        return "ban"
    if reason == "parse_error":
        return "parse"
    return "ok" if state in ("done", "skipped") else "failed"


def count(
    state: str | None, reason: str, deferred: bool, seconds: float, pinned: bool = False
) -> None:
    """Count one attempt of this worker's channel (a deferral is not an attempt, and a URL of
    a job pinned to the channel is no part of the share the weights route to it: an owner
    cannot feed or starve a canary's analysis by pinning a job to it)."""
    global _flushed
    if deferred or state is None or pinned:
        return
    latency_bin = next((i for i, b in enumerate(LATENCY_BOUNDS_S) if seconds <= b),
                       len(LATENCY_BOUNDS_S))  # fmt: skip
    with _lock:
        _pending[kind(state, reason)] += 1
        _pending[f"lat{latency_bin}"] += 1
        now = time.monotonic()
        if now - _flushed < setting("CANARY_FLUSH_S"):
            return
        counts, _flushed = dict(_pending), now
        _pending.clear()
    _flush(counts)


def _flush(counts: dict[str, int]) -> None:
    key = _key(channels.mine(), int(time.time() // setting("CANARY_SLOT_S")))
    try:
        pipe = broker.client().pipeline(transaction=False)
        for field, n in counts.items():
            pipe.hincrby(key, field, n)
        pipe.expire(key, int(setting("CANARY_WINDOW_S")) * 2 + setting("CANARY_SLOT_S"))
        pipe.execute()
    except Exception as exc:  # noqa: BLE001 (analysis has a window: a lost second is noise)
        log.debug("canary counts not added: %s", exc)


def window(channel: str) -> Counter[str]:
    """A channel's counts over the last ``CANARY_WINDOW_S``."""
    now_slot = int(time.time() // setting("CANARY_SLOT_S"))
    slots = max(1, int(setting("CANARY_WINDOW_S") // setting("CANARY_SLOT_S")))
    pipe = broker.client().pipeline(transaction=False)
    for slot in range(now_slot - slots + 1, now_slot + 1):
        pipe.hgetall(_key(channel, slot))
    total: Counter[str] = Counter()
    for fields in pipe.execute():
        total.update({k.decode(): int(v) for k, v in fields.items()})
    return total


def p95(counts: Counter[str]) -> float:
    """The upper bound of the bin that holds the 95th percentile of the attempts' durations."""
    n = sum(counts[f"lat{i}"] for i in range(len(LATENCY_BOUNDS_S) + 1))
    if not n:
        return 0.0
    seen = 0
    for i in range(len(LATENCY_BOUNDS_S) + 1):
        seen += counts[f"lat{i}"]
        if seen >= 0.95 * n:
            return LATENCY_BOUNDS_S[i] if i < len(LATENCY_BOUNDS_S) else float("inf")
    return float("inf")


def _share(counts: Counter[str], what: str) -> float:
    n = sum(counts[k] for k in KINDS)
    return counts[what] / n if n else 0.0


def verdict(canary: Counter[str], stable: Counter[str]) -> str:
    """Why the canary must go back ("" if it is healthy, or has too few attempts to say)."""
    if sum(canary[k] for k in KINDS) < setting("CANARY_MIN_SAMPLES"):
        return ""
    for what, margin in (("failed", "CANARY_FAIL_MARGIN"), ("ban", "CANARY_BAN_MARGIN"),
                         ("parse", "CANARY_PARSE_MARGIN")):  # fmt: skip
        mine, theirs = _share(canary, what), _share(stable, what)
        if mine > theirs + setting(margin):
            return f"{what} share {mine:.0%} against the stable channel's {theirs:.0%}"
    mine, theirs = p95(canary), p95(stable)
    if theirs and mine > theirs * setting("CANARY_LATENCY_FACTOR") + 1:
        return f"p95 duration {mine:g} s against the stable channel's {theirs:g} s"
    return ""


def steps() -> list[int]:
    return sorted({int(s) for s in str(setting("CANARY_STEPS")).split(",") if s.strip()})


def start(name: str, who: str) -> dict[str, int]:
    """Make ``name`` a canary at the first step, stepping up on its own while healthy."""
    from web.models import Channel

    split = dict(channels.weights(cached=False))
    split.pop(name, None)
    stable = max(split, key=split.get, default=channels.DEFAULT)
    first = steps()[0]
    new = channels.set_weights({**_rest(split, stable, first), name: first}, who)
    Channel.objects.filter(name=name).update(auto_step=True, step_since=timezone.now())
    channels.record(name, "started", f"at {first}% ({who})")
    return new


def _rest(split: dict[str, int], stable: str, taken: int) -> dict[str, int]:
    """The other channels' weights once the canary holds ``taken``: the stable one gives it."""
    rest = {n: w for n, w in split.items() if n != stable}
    rest[stable] = max(0, 100 - taken - sum(rest.values()))
    return rest


def analyse() -> list[str]:
    """Judge every canary once; returns what was done (rolled back or stepped up)."""
    from web.models import Channel

    split = channels.weights(cached=False)
    if len(split) < 2:
        return []
    stable = max(split, key=lambda n: (split[n], n))
    baseline = window(stable)
    done = []
    for name, weight in split.items():
        if name == stable:
            continue
        mine = window(name)
        if why := verdict(mine, baseline):
            channels.rollback(name, WHO, stable, why)
            done.append(f"{name} rolled back: {why}")
        elif (row := Channel.objects.filter(name=name, auto_step=True).first()) is not None:
            if _soaked(row, mine):
                done.append(_step_up(row, weight, split, stable))
    return done


def _soaked(row, counts: Counter[str]) -> bool:
    enough = sum(counts[k] for k in KINDS) >= setting("CANARY_MIN_SAMPLES")
    since = timezone.now() - timedelta(seconds=setting("CANARY_STEP_MIN_S"))
    return enough and row.step_since is not None and row.step_since <= since


def _step_up(row, weight: int, split: dict[str, int], stable: str) -> str:
    from web.models import Channel

    later = [s for s in steps() if s > weight]
    if not later or later[0] >= 100:
        channels.promote(row.name, WHO, "healthy through every step")
        return f"{row.name} promoted"
    others = {n: w for n, w in split.items() if n != row.name}
    with transaction.atomic():
        channels.set_weights({**_rest(others, stable, later[0]), row.name: later[0]}, WHO)
        Channel.objects.filter(name=row.name).update(step_since=timezone.now())
    channels.record(row.name, "stepped_up", f"{weight}% -> {later[0]}%")
    return f"{row.name} stepped up to {later[0]}%"
