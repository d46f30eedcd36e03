"""Release channels: groups of workers (``blue``, ``green``, ``canary``, ...) that each
consume their own queue, so that a new worker version can take a share of the crawl, grow,
take all of it, or be rolled back, without stopping anything.

A worker belongs to the channel of its ``CRAWL_CHANNEL`` (default ``main``) and consumes
its queue: ``CRAWL_QUEUE`` (``crawl``) for ``main``, ``crawl.NAME`` for the others. It
reports its version (``CRAWL_VERSION``, default the release) in the worker registry and on
every page it stores.

The scheduler routes each URL it releases: to the job's own channel if the job is pinned to
one (pinning needs the ``web.pin_crawl_channel`` permission, and a channel whose queue an
online worker consumes), otherwise by the weights (``web.models.Channel``, percentages that
add up to 100; none set: all to ``main``). A host's URLs go to one channel while the
weights stay the same: the host's hash picks a bucket of 100, and the channels, in name
order, own consecutive ranges of buckets as wide as their weights; so a canary at 10%
takes the hosts of 10 buckets, and raising it to 30% keeps those hosts and adds others.

Nothing is sent to a channel no online worker consumes (:func:`served`) while another can
take it: a weighted channel's share goes to the heaviest served channel of the split
meanwhile (while none is served, a fleet is starting and the weights stand), a pinned job's
URLs wait in the frontier, and reconcile puts URLs of a channel other than ``main`` without
workers back in the frontier instead of publishing them again, so that channel's queue does
not grow.

Changing the weights (``manage.py channel``, the admin) affects what is released from then
on. What a channel's queue already holds is served by its workers (``promote``: the old
channel drains warm, then its workers stop) or, on ``rollback``, moved: the rolled-back
channel's queued messages are taken out of its queue and their URLs go back to the frontier,
to be released again to the channels that have weight (the claim makes any copy left behind
harmless). One scheduler leader serves every channel.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zlib
from typing import NamedTuple

from django.conf import settings
from django.db import transaction

from crawlplatform.release import VERSION
from tasks import broker, live
from tasks.defaults import setting
from tasks.rules.channels import name_problem
from tasks.worker import registry

log = logging.getLogger(__name__)

DEFAULT = "main"
_cache: tuple[float, dict[str, int]] | None = None
_served: tuple[float, frozenset[str]] | None = None


def mine() -> str:
    """This process's channel."""
    return settings.CRAWL_CHANNEL


def version() -> str:
    """The version this process's workers report and mark their pages with."""
    return os.environ.get("CRAWL_VERSION") or VERSION


def queue(name: str) -> str:
    """The Celery queue of channel ``name``."""
    return settings.CRAWL_QUEUE if name == DEFAULT else f"{settings.CRAWL_QUEUE}.{name}"


def of_queue(queue_name: str) -> str:
    """The channel a crawl queue belongs to."""
    base = settings.CRAWL_QUEUE
    return DEFAULT if queue_name == base else queue_name.removeprefix(base + ".")


def weights(cached: bool = True) -> dict[str, int]:
    """Channel -> weight (percent, summing to 100); ``{main: 100}`` when none is set."""
    global _cache
    now = time.monotonic()
    if cached and _cache is not None and now - _cache[0] < setting("CHANNEL_WEIGHTS_CACHE_S"):
        return _cache[1]
    from web.models import Channel

    found = dict(Channel.objects.filter(weight__gt=0).values_list("name", "weight"))
    _cache = (now, found or {DEFAULT: 100})
    return _cache[1]


def forget() -> None:
    """Read the weights again at the next routing (they were changed)."""
    global _cache
    _cache = None


live.on_announce("channels", forget)


def served(cached: bool = True) -> frozenset[str]:
    """Channels whose queue an online crawl worker consumes."""
    global _served
    now = time.monotonic()
    if cached and _served is not None and now - _served[0] < setting("CHANNEL_SERVED_CACHE_S"):
        return _served[1]
    wall, base = time.time(), settings.CRAWL_QUEUE
    consumed = {
        of_queue(name)
        for w in registry.workers()
        if registry.online(w, wall)
        for name in str(w["queues"]).split(",")
        if name == base or name.startswith(base + ".")
    }
    _served = (now, frozenset(consumed))
    return _served[1]


def unserved_problem(name: str) -> str:
    """Why a job cannot be pinned to channel ``name`` now ("" if it can)."""
    if not name or name in served(cached=False):
        return ""
    return (f"no online worker consumes channel {name!r} (queue {queue(name)}): start its "
            f"workers (CRAWL_CHANNEL={name}) first")  # fmt: skip


def bucket(host: str) -> int:
    return zlib.crc32(host.encode()) % 100


def route(job_channel: str, host: str, split: dict[str, int]) -> str:
    """The queue a URL of ``host`` goes to (the job's channel if it is pinned to one): by the
    host's bucket among the weights, or, while that channel has no online worker, the
    heaviest channel that has."""
    if job_channel:
        return queue(job_channel)
    point, edge, chosen = bucket(host), 0, sorted(split)[-1]
    for name in sorted(split):
        edge += split[name]
        if point < edge:
            chosen = name
            break
    live = served()
    if chosen not in live:
        chosen = max((n for n in split if n in live), key=split.get, default=chosen)
    return queue(chosen)


def queues() -> list[str]:
    """Every channel's queue (weight or not: a channel without weight may still drain)."""
    return [queue(name) for name in sorted(_rows())]


def _rows() -> set[str]:
    from web.models import Channel

    return set(Channel.objects.values_list("name", flat=True)) | {DEFAULT}


def known() -> list[str]:
    """Channels with a weight row, or with workers, or ``main``."""
    return sorted(_rows() | {str(w["channel"]) for w in registry.workers() if w["channel"]})


def depth() -> dict[str, int]:
    """Crawl messages ready in every channel's queue, and unacked (in flight) in all."""
    found = [broker.depth(q) for q in queues()]
    return {"ready": sum(d["ready"] for d in found), "unacked": found[0]["unacked"]}


class Refused(ValueError):
    """A change of channel weights that cannot be made."""


def record(channel: str, kind: str, detail: str) -> None:
    """A ``ChannelEvent``: a canary started, stepped up, promoted or rolled back, and why."""
    from web.models import ChannelEvent

    ChannelEvent.objects.create(channel=channel, kind=kind, detail=detail[:500])
    log.warning("channel %s %s: %s", channel, kind, detail)


def set_weights(wanted: dict[str, int], who: str) -> dict[str, int]:
    """Make ``wanted`` the split (every channel not named gets 0); they must add up to 100."""
    from web.models import Channel

    for name, weight in wanted.items():
        if problem := name_problem(name):
            raise Refused(problem)
        if not 0 <= weight <= 100:
            raise Refused(f"{name}: {weight} is not a weight between 0 and 100")
    if sum(wanted.values()) != 100:
        raise Refused(f"the weights add up to {sum(wanted.values())}, not 100")
    with transaction.atomic():
        Channel.objects.exclude(name__in=list(wanted)).update(weight=0, updated_by=who)
        for name, weight in wanted.items():
            Channel.objects.update_or_create(
                name=name, defaults={"weight": weight, "updated_by": who}
            )
        # A canary that stepping up brought to all, or that lost its weight, is done stepping.
        Channel.objects.filter(weight__in=[0, 100]).update(auto_step=False)
        transaction.on_commit(lambda: live.announce("channels"))
    forget()
    log.info("channel weights now %s (by %s)", wanted, who)
    return weights(cached=False)


def promote(name: str, who: str, why: str = "") -> dict[str, int]:
    """All weight to ``name``; the other channels' queued URLs are served by their workers."""
    new = set_weights({name: 100}, who)
    record(name, "promoted", why or f"by {who}")
    return new


def rollback(name: str, who: str, to: str = "", why: str = "") -> tuple[dict[str, int], int]:
    """Take ``name``'s weight away at once and give it to ``to`` (default: the channel with
    the most weight besides it, else ``main``); its queued URLs move. Returns the new split
    and how many URLs moved."""
    split = dict(weights(cached=False))
    freed = split.pop(name, 0)
    target = to or max(split, key=split.get, default=DEFAULT)
    split[target] = split.get(target, 0) + freed
    new = set_weights(split, who)
    moved = move_queued(name)
    record(name, "rolled_back", why or f"by {who}")
    return new, moved


def move_queued(name: str) -> int:
    """Take every message out of channel ``name``'s queue and put its URLs back in the
    frontier, where the scheduler releases them again to the channels with weight."""
    from tasks.frontier import requeue, wakeup

    ids = [url.url_id for url in take_messages(queue(name))]
    moved = requeue.requeue_scheduled(ids)
    if moved:
        wakeup.nudge()
    log.info("channel %s: %d queued URLs moved back to the frontier", name, moved)
    return moved


class Carried(NamedTuple):
    """A URL a crawl message carries."""

    url_id: int
    job_id: int


def take_messages(queue_name: str) -> list[Carried]:
    """Remove every ready message of ``queue_name`` from the broker: every URL they carried."""
    return [url for body in broker.take(queue_name) for url in task_urls(body)]


def waiting(queue_names: list[str]) -> set[int] | None:
    """Ids of the URLs that ready messages of ``queue_names`` carry, read in place; None where
    the broker cannot be read so (RabbitMQ)."""
    ids: set[int] = set()
    for name in queue_names:
        bodies = broker.peek(name)
        if bodies is None:
            return None
        ids.update(url.url_id for body in bodies for url in task_urls(body))
    return ids


def task_urls(body: bytes) -> list[Carried]:
    """Each URL a crawl task's body carries. Celery's protocol 2 body is
    ``[args, kwargs, ...]``; args are ``[url_ids, job_id]`` (``fetch_urls``) or
    ``[url_id, job_id]`` (``fetch_url``, ``render_url``)."""
    try:
        first, job_id = json.loads(body)[0][:2]
        ids = first if isinstance(first, list) else [first]
        return [Carried(int(i), int(job_id)) for i in ids]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        log.warning("a message that is not a crawl task left out: %s", exc)
        return []
