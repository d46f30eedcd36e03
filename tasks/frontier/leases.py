"""Leases that live as long as their worker: renewed while it works, expired soon after it dies.

Reads ``LEASE_S``, ``LEASE_RENEW_S`` and ``TASK_TIME_LIMIT_S``.

A claim starts a lease of ``LEASE_S``. While the worker process works on the URL it *holds*
the claim, and a thread of that process renews every held lease every ``LEASE_RENEW_S`` in one
``UPDATE``. A killed worker renews nothing: its leases run out ``LEASE_S`` later and the lease
sweep returns its URLs to the queue within ``SWEEP_INTERVAL_S`` of that, so a killed worker's
pages are fetched again in seconds, whatever the longest page may take. A page still running
after ``TASK_TIME_LIMIT_S`` is no longer renewed: a thread stuck in it cannot hold its URL
forever (the sweep counts the attempt, and the stuck thread's late commit is refused by the
lease token).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import timedelta
from functools import reduce
from operator import or_

from django.db import DatabaseError, connection
from django.db.models import Q
from django.utils import timezone

from tasks.defaults import setting
from tasks.frontier import db
from web.models import FrontierURL, URLState

log = logging.getLogger(__name__)

_lock = threading.Lock()
_held: dict[int, tuple[int, float]] = {}  # url id -> (attempt, when claimed, monotonic)
_renewer_pid: int | None = None


def hold(url_id: int, attempt: int) -> None:
    """This process works on the URL from now on: keep its lease alive."""
    global _renewer_pid
    with _lock:
        _held[url_id] = (attempt, time.monotonic())
        if _renewer_pid != os.getpid():  # first claim in this process (or a forked child)
            _renewer_pid = os.getpid()
            threading.Thread(target=_renew_forever, name="lease-renewer", daemon=True).start()


def let_go(url_id: int) -> None:
    """The URL's work ended (committed, deferred or abandoned)."""
    with _lock:
        _held.pop(url_id, None)


def renew() -> int:
    """Extend the lease of every URL this process holds; returns how many were extended."""
    limit = setting("TASK_TIME_LIMIT_S")
    now = time.monotonic()
    with _lock:
        for url_id in [u for u, (_, since) in _held.items() if now - since > limit]:
            del _held[url_id]  # stuck past the time limit: let the lease run out
        held = list(_held.items())
    until = timezone.now() + timedelta(seconds=setting("LEASE_S"))
    renewed = 0
    for start in range(
        0, len(held), setting("LEASE_RENEW_CHUNK")
    ):  # SQLite caps an expression's depth
        chunk = held[start : start + setting("LEASE_RENEW_CHUNK")]
        mine = reduce(or_, (Q(pk=url_id, attempts=attempt) for url_id, (attempt, _) in chunk))
        leased = FrontierURL.objects.filter(mine, db.in_state(URLState.LEASED))
        renewed += leased.update(lease_until=until)
    return renewed


def _renew_forever() -> None:
    failing = False
    while True:
        time.sleep(setting("LEASE_RENEW_S"))
        try:
            renew()
            if failing:
                log.warning("lease renewal works again")
            failing = False
            if not _held:  # an idle process keeps no connection open for this thread
                connection.close()
        except DatabaseError as exc:
            if not failing:  # one line per outage
                log.warning("lease renewal failed (retrying every %s s): %s",
                            setting("LEASE_RENEW_S"), exc)  # fmt: skip
            failing = True
            connection.close()  # the next try gets a fresh connection
        except Exception:  # the thread must outlive any surprise, or leases would lapse
            log.exception("lease renewal failed")
