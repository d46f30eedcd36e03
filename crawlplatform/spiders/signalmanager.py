"""``crawler.signals``: Scrapy's ``SignalManager`` (``connect``, ``disconnect``,
``disconnect_all``, ``send_catch_log``, ``send_catch_log_async``) for one spider in one
process.

As Scrapy's, through pydispatcher's ``robustApply``: a receiver is given the keyword arguments
it accepts among those sent (all of them if it takes ``**kwargs``), ``signal`` and ``sender``
included; an exception in a receiver is logged ("Error caught on signal handler") and returned
in its place, never raised, so that no handler takes a page down. A receiver connected twice
is called once. A receiver's coroutine is awaited (``async def`` handlers work on every signal
the platform sends, where Scrapy awaits them on some). Receivers are held strongly (Scrapy's
pydispatcher holds them weakly by default: a receiver whose object is gone is dropped there).
Connecting to a signal the platform never sends raises ``NotSupported``, saying why
(``signals.NOT_SENT``).
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from crawlplatform.spiders import loop
from crawlplatform.spiders.errors import NotSupported
from crawlplatform.spiders.signals import NOT_SENT

log = logging.getLogger(__name__)
_ALL = None  # a receiver that takes **kwargs is given every argument sent


def _accepted(receiver: Callable) -> frozenset[str] | None:
    """The keyword arguments ``receiver`` takes (None: any)."""
    try:
        parameters = inspect.signature(receiver).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: given everything
        return _ALL
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return _ALL
    return frozenset(p.name for p in parameters
                     if p.kind is not inspect.Parameter.VAR_POSITIONAL)  # fmt: skip


class SignalManager:
    """The signals of one crawler (``crawler.signals``)."""

    def __init__(self, sender: Any = None) -> None:
        self.sender = sender
        self._receivers: dict[Any, list[tuple[Callable, frozenset[str] | None]]] = {}
        self._lock = threading.Lock()  # the worker's threads connect and send at once

    def connect(self, receiver: Callable, signal: Any, **kwargs: Any) -> None:
        """Call ``receiver`` each time ``signal`` is sent (``sender`` and ``weak`` are
        accepted and have no effect: every signal comes from this crawler)."""
        if signal in NOT_SENT:
            raise NotSupported(f"signal {signal.name} is never sent on this platform: "
                               f"{NOT_SENT[signal]} (docs/spiders.md, Signals)")  # fmt: skip
        with self._lock:
            connected = self._receivers.setdefault(signal, [])
            if all(known != receiver for known, _ in connected):
                connected.append((receiver, _accepted(receiver)))

    def disconnect(self, receiver: Callable, signal: Any, **kwargs: Any) -> None:
        with self._lock:
            connected = self._receivers.get(signal, [])
            connected[:] = [(known, takes) for known, takes in connected if known != receiver]

    def disconnect_all(self, signal: Any, **kwargs: Any) -> None:
        with self._lock:
            self._receivers.pop(signal, None)

    def heard(self, signal: Any) -> bool:
        """Whether a receiver is connected to ``signal`` (a dict's read, no lock: what a
        sender asks first, for every request and item)."""
        return bool(self._receivers.get(signal))

    def receivers(self, signal: Any) -> list[Callable]:
        """The receivers connected to ``signal``, in the order they are called."""
        with self._lock:
            return [known for known, _ in self._receivers.get(signal, [])]

    def send_catch_log(self, signal: Any, **kwargs: Any) -> list[tuple[Any, Any]]:
        """Send ``signal`` with ``kwargs`` to each receiver in the order they connected: (the
        receiver, what it returned or the exception it raised) for each. ``dont_log``: an
        exception class (or a sequence of them) raised by a receiver and not logged."""
        if not self.heard(signal):
            return []  # the usual case, sent for every request and item: at once
        dont_log, named = self._prepared(signal, kwargs)
        out = []
        for receiver, takes in self._connected(signal):
            try:
                result = receiver(**self._given(named, takes))
                if inspect.isawaitable(result):
                    result = _settle(result)
            except dont_log as exc:
                result = exc
            except Exception as exc:  # a receiver's error is logged, never raised
                log.error("Error caught on signal handler: %r", receiver, exc_info=True)
                result = exc
            out.append((receiver, result))
        return out

    async def send_catch_log_async(self, signal: Any, **kwargs: Any) -> list[tuple[Any, Any]]:
        """``send_catch_log`` from a coroutine: a receiver's coroutine is awaited in it."""
        dont_log, named = self._prepared(signal, kwargs)
        out = []
        for receiver, takes in self._connected(signal):
            try:
                result = receiver(**self._given(named, takes))
                if inspect.isawaitable(result):
                    result = await result
            except dont_log as exc:
                result = exc
            except Exception as exc:
                log.error("Error caught on signal handler: %r", receiver, exc_info=True)
                result = exc
            out.append((receiver, result))
        return out

    def _prepared(self, signal: Any, kwargs: dict) -> tuple[tuple[type, ...], dict]:
        dont_log = kwargs.pop("dont_log", ())
        dont_log = tuple(dont_log) if isinstance(dont_log, Sequence) else (dont_log,)
        kwargs.setdefault("sender", self.sender)
        return dont_log, {"signal": signal, **kwargs}

    def _connected(self, signal: Any) -> tuple[tuple[Callable, frozenset[str] | None], ...]:
        with self._lock:
            return tuple(self._receivers.get(signal, ()))

    @staticmethod
    def _given(named: dict, takes: frozenset[str] | None) -> dict:
        return named if takes is _ALL else {k: v for k, v in named.items() if k in takes}


def _settle(result: Any) -> Any:
    """A receiver's coroutine, awaited on the process's loop (``loop.py``: the platform sends
    from the worker's threads, where none runs)."""
    return loop.run(result)
