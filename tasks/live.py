"""Live configuration: crawl settings (``tasks/defaults.py``) changed while the platform runs,
in force in every worker and scheduler within a second, without restarts.

The database holds them (``web.models.LiveSetting``, one row per setting changed, and a
``SettingChange`` audit row per change: who, when, old, new). A change is validated first
(the setting's type, and the settings that a process reads only when it starts are refused),
committed, then announced on the Redis channel ``crawl:config``. Each process that called
:func:`start` keeps the live values in memory (``defaults.live``, read by ``defaults.setting``
between a job's own override and the environment) and a thread subscribed to the channel
that loads them again from the database at each announcement, each reconnect, and every
``LIVE_RESYNC_S`` (an announcement lost while Redis was away is caught up then). A job edited
while it runs is announced the same way, and workers drop their cached copy of it; so are
new channel weights (``tasks/frontier/channels.py``).

Precedence (``defaults.setting``): the job's ``settings``, then live, then ``CRAWL_<NAME>``
in the environment, then the default.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections, connection, transaction
from redis.exceptions import RedisError

from tasks import defaults
from tasks.broker import client
from tasks.defaults import setting

log = logging.getLogger(__name__)

CHANNEL = "crawl:config"
loaded_at = 0.0  # when ``values`` were last read (monotonic), 0: never
_listener: threading.Thread | None = None
_lock = threading.Lock()
_first_load = threading.Event()
_handlers: dict[str, Callable[..., None]] = {}  # announcement kind -> what it runs here


class Refused(ValueError):
    """A live change that cannot be made; the message says why."""


def parse(name: str, text: str) -> Any:
    """A value typed on a command line, as the setting's type (JSON also accepted)."""
    if name not in defaults.names():
        raise Refused(f"{name}: no such setting (see tasks/defaults.py)")
    default = getattr(defaults, name)
    if isinstance(default, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        raise Refused(f"{name}: {text!r} is not a {defaults.KIND[type(default)]}") from None


def check(name: str, value: Any) -> None:
    """Refused unless ``value`` can be ``name``'s live value."""
    if name in defaults.RESTART_ONLY:
        raise Refused(
            f"{name} is read when a process starts: set CRAWL_{name} in the environment and "
            "restart (a rolling restart of the workers keeps every page)"
        )
    if problems := defaults.problems({name: value}):
        raise Refused("; ".join(problems))


def change(name: str, value: Any, who: str) -> tuple[Any, Any]:
    """Set (``value`` not None) or clear a live setting; returns (old, new). Announced to
    every process once committed."""
    from web.models import LiveSetting, SettingChange

    if value is not None:
        check(name, value)
    elif name not in defaults.names():
        raise Refused(f"{name}: no such setting (see tasks/defaults.py)")
    with transaction.atomic():
        row = LiveSetting.objects.select_for_update().filter(name=name).first()
        old = row.value if row else None
        if value is None:
            LiveSetting.objects.filter(name=name).delete()
        else:
            LiveSetting.objects.update_or_create(
                name=name, defaults={"value": value, "updated_by": who}
            )
        SettingChange.objects.create(name=name, old=old, new=value, who=who)
        transaction.on_commit(lambda: announce(f"setting {name}"))
    log.info("live setting %s: %r -> %r by %s", name, old, value, who)
    return old, value


def announce(what: str) -> None:
    """Tell every process that live values (or a job, ``job ID``) changed."""
    try:
        client().publish(CHANNEL, what)
    except RedisError as exc:  # processes read the database again within LIVE_RESYNC_S anyway
        log.warning(
            "live change not announced (%s): in force within %.0f s", exc, setting("LIVE_RESYNC_S")
        )


def load() -> dict[str, Any]:
    """Read the live values from the database; they are in force in this process from now."""
    from web.models import LiveSetting

    global loaded_at
    known = set(defaults.names())
    found = {n: v for n, v in LiveSetting.objects.values_list("name", "value") if n in known}
    defaults.live = found  # one assignment: readers see the old values or the new, whole
    loaded_at = time.monotonic()
    return found


def _reload() -> None:
    close_old_connections()
    try:
        load()
    except Exception as exc:  # noqa: BLE001 (the database may be away: keep what we have)
        log.warning("live settings not reloaded (%s); keeping the last ones", exc)
    finally:
        connection.close()  # this thread wakes rarely: no connection kept for it
        _first_load.set()


def on_announce(kind: str, handler: Callable[..., None]) -> None:
    """Run ``handler(*words)`` in this process at each announcement ``KIND WORDS...`` (``job
    12``: a job changed; ``channels``: the weights did), so that a module that caches what
    changed drops its copy; the module registers itself when it is imported."""
    _handlers[kind] = handler


def _handle(data: bytes) -> None:
    """One announcement: a job, the channel weights, or the live settings changed. Anything
    else on the channel reloads the settings (never stops the listener)."""
    kind, *words = data.decode(errors="replace").split() or [""]
    handler = _handlers.get(kind)
    try:
        if handler is not None:
            handler(*words)
            return
    except (TypeError, ValueError):
        pass  # not an announcement this process knows: read everything again
    _reload()


def _listen() -> None:
    while True:
        pubsub = None
        try:
            pubsub = client().pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(CHANNEL)
            _reload()  # what changed while this process was not subscribed
            while True:
                message = pubsub.get_message(timeout=setting("LIVE_RESYNC_S"))
                if message is None:
                    if time.monotonic() - loaded_at >= setting("LIVE_RESYNC_S"):
                        _reload()
                    continue
                _handle(message["data"])
        except (RedisError, OSError) as exc:
            log.debug("live settings channel lost (%s); subscribing again", exc)
            time.sleep(1)
        finally:
            if pubsub is not None:
                try:
                    pubsub.close()
                except (RedisError, OSError):
                    pass


def start() -> None:
    """Load the live values and follow their changes in this process (idempotent). The
    loading is the listener thread's (it holds no database connection between loads), and
    this waits for its first load, briefly."""
    global _listener
    with _lock:
        if _listener is not None and _listener.is_alive():
            return
        _listener = threading.Thread(target=_listen, name="live-settings", daemon=True)
        _listener.start()
    _first_load.wait(setting("LIVE_FIRST_LOAD_WAIT_S"))
