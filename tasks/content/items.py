"""Items: what a spider yields, made JSON, passed through the item pipelines, and fed out; and
the extensions, made with the pipelines.

Reads ``ITEM_PIPELINES`` and ``EXTENSIONS`` (the operator's pipelines and extensions: dotted
class paths, comma-separated, each with an optional ``:ORDER``; 1000 when not given),
``ITEM_MAX_BYTES`` and the spider's ``custom_settings["ITEM_PIPELINES"]`` and
``["EXTENSIONS"]`` (Scrapy's ``{path: order}``, ``None`` as an order turns one off; or a
list, in order). Pipelines run by ascending order, the operator's and the spider's together,
then the built-in schema check (order ``SCHEMA_ORDER``) when the spider has an
``item_schema``. Extensions are made first, in their order, as Scrapy makes them before the
pipelines; either may raise ``NotConfigured`` to stay off.

A pipeline's ``process_item(item, spider)`` takes the item as the callback yielded it (a dict,
a dataclass, an ``Item``, ...) or as the pipeline before returned it, and returns the item
(changed or not) or raises ``DropItem(reason)``; any other exception drops the item as
``pipeline_error`` with its traceback in the log; an item that is not JSON after the last
pipeline is dropped as ``not_serialisable``. Then ``item_scraped``, ``item_dropped`` or
(``pipeline_error``) ``item_error`` is sent, with Scrapy's arguments. ``open_spider(spider)``
is called when a worker process first uses the job's pipelines (then ``spider_opened`` is
sent), ``close_spider(spider)`` when the process lets them go (the job's run ended, or the
process leaves), after the last page using them, in the reverse order (then the spider's
``closed(reason)`` and ``spider_closed``, when the run ended). As in Scrapy 2.14 and later,
the spider is passed only to a method that requires it, so ``process_item(item)``,
``open_spider()`` and ``close_spider()`` work too. A dropped item is stored with its reason,
so drops are counted exactly once. The pipelines of a process see one item at a time (a
lock), as in Scrapy's single thread, so a pipeline may keep state (a set of seen keys) without
locks of its own; the signal handlers run under the same lock.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import importlib
import inspect
import json
import logging
import threading
import types
from collections.abc import Callable
from contextlib import nullcontext
from functools import cache
from typing import Any

from crawlplatform.spiders import (
    DropItem,
    Failure,
    IgnoreRequest,
    Item,
    NotConfigured,
    Spider,
    loop,
)
from crawlplatform.spiders import signals as sent
from crawlplatform.spiders.settings import Crawler, Settings
from tasks.defaults import setting

log = logging.getLogger(__name__)
OPERATOR_ORDER = 1000  # an operator's pipeline or extension given without an order runs here
SCHEMA_ORDER = 900  # the schema check: after the spider's cleaning, before the operator's
PIPELINE_ERROR = "pipeline_error"
SCHEMA = "schema"
TOO_LARGE = "too_large"
NOT_JSON = "not_serialisable"
NOT_ITEM = "not_an_item"  # a string, say, that the pipelines did not make an item


class PipelineProblem(Exception):
    """A pipeline or extension that cannot be loaded (a wrong path, an import error, its
    ``from_crawler`` failed)."""


@cache
def _adapter() -> Any:
    """itemadapter's ``ItemAdapter``, imported when a spider first yields an item that is not
    a dict: importing it imports every item library it supports that is installed (a tenth
    of a second with pydantic, more than half a second with Scrapy), which a crawl without
    such items would pay in every worker."""
    from itemadapter import ItemAdapter

    return ItemAdapter


def is_item(obj: Any) -> bool:
    if isinstance(obj, dict):
        return True
    if isinstance(obj, _NEVER_ITEMS):  # a callback's generator, say: no need for itemadapter
        return False
    return _adapter().is_item(obj)


_NEVER_ITEMS = (types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType, list, tuple,
                str, bytes, type(None))  # fmt: skip


def _plain(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if dataclasses.is_dataclass(value) or _adapter().is_item(value):
        return _adapter()(value).asdict()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def field_names(item: Any, data: dict) -> list:
    """The item's fields as feeds write them (``tasks/content/exporters.py``), in order: its
    field names as Scrapy's exporters take them (``ItemAdapter.field_names``: an ``Item``'s or
    a dataclass's declared fields, in their order, set or not; a dict's keys), then any other
    key ``data`` (the item as JSON) has. A field whose value holds objects of several keys is
    ``[name, their order]`` (``order_of``): PostgreSQL's jsonb keeps no key order."""
    if isinstance(item, Item):
        declared = list(type(item).fields)
    elif isinstance(item, dict):
        declared = []
    else:
        declared = [str(name) for name in _adapter()(item).field_names()]
    return [_entry(name, data.get(name)) for name in dict.fromkeys([*declared, *data])]


def _entry(name: str, value: Any) -> str | list:
    order = order_of(value)
    return name if order is None else [name, order]


def order_of(value: Any) -> list | dict | None:
    """The key order of the objects in a JSON ``value``: an object's, a list of its keys (a
    key whose value holds objects as ``[key, their order]``); a list's, ``{"list": [the order
    of each element]}``; None where there is no order to keep."""
    if isinstance(value, dict):
        entries = [_entry(key, each) for key, each in value.items()]
        return entries if len(entries) > 1 or any(isinstance(e, list) for e in entries) else None
    if isinstance(value, list):
        each = [order_of(element) for element in value]
        return {"list": each} if any(order is not None for order in each) else None
    return None


def as_json(item: Any) -> dict:
    """The item as a JSON object (dates as ISO text, decimals as text)."""
    fields = item if isinstance(item, dict) else _adapter()(item).asdict()
    return json.loads(json.dumps(fields, default=_plain, allow_nan=False))


def as_stored(item: Any) -> dict:
    """The item as it is kept and written (``as_json``), each field whose declaration names
    a ``serializer`` (``Field(serializer=str)``, a dataclass field's ``metadata``) as that
    made it, as Scrapy's exporters write it; a serializer that raises makes it no JSON."""
    data = as_json(item)
    if type(item) is dict:
        return data
    for name, serializer in _serializers(type(item)).items():
        if name in data:
            value = item[name] if isinstance(item, dict) else _adapter()(item)[name]
            try:
                made = serializer(value)
            except Exception as exc:  # noqa: BLE001 (the spider's code: the item says why)
                raise ValueError(f"the serializer of {name} raised {type(exc).__name__}: "
                                 f"{exc}") from None  # fmt: skip
            data[name] = json.loads(json.dumps(made, default=_plain, allow_nan=False))
    return data


@cache
def _serializers(cls: type) -> dict[str, Callable[[Any], Any]]:
    """The ``serializer`` each field of an item class declares, by field name."""
    if issubclass(cls, Item):
        declared = {name: dict(field) for name, field in cls.fields.items()}
    else:
        names = _adapter().get_field_names_from_class(cls) or []
        declared = {name: dict(_adapter().get_field_meta_from_class(cls, name)) for name in names}
    return {name: meta["serializer"] for name, meta in declared.items()
            if callable(meta.get("serializer"))}  # fmt: skip


def _ordered(spider: Spider, name: str) -> list[tuple[float, str | type]]:
    """The components of setting ``name`` (``ITEM_PIPELINES``, ``EXTENSIONS``), the operator's
    and the spider's, by order; those of one order as they were given (Scrapy's stable sort).
    A spider's may name a component by its path or be the class itself."""
    chosen: dict[str | type, float | None] = {}
    for entry in filter(None, (e.strip() for e in setting(name).split(","))):
        path, _, order = entry.partition(":")
        chosen[path] = float(order) if order else OPERATOR_ORDER
    own = (getattr(spider, "custom_settings", None) or {}).get(name) or {}
    if isinstance(own, dict):
        chosen.update(own)
    else:
        chosen.update({path: n for n, path in enumerate(own)})
    given = [(order, path) for path, order in chosen.items() if order is not None]
    return sorted(given, key=lambda entry: entry[0])


def _made(crawler: Crawler, name: str, kind: str) -> list[tuple[float, Any]]:
    """The components of setting ``name``, made, by order (those ``NotConfigured`` left out)."""
    made = [(order, _load(path, crawler, kind)) for order, path in _ordered(crawler.spider, name)]
    return [(order, component) for order, component in made if component is not None]


def _load(path: str | type, crawler: Crawler, kind: str) -> Any:
    """The component at ``path`` (or the class itself): made by its ``from_crawler(crawler)``
    (or the older ``from_settings(settings)``) if it has one, as Scrapy makes it, else by its
    class; None if it raised ``NotConfigured`` (it stays off)."""
    if isinstance(path, str):
        module, _, name = path.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except Exception as exc:
            raise PipelineProblem(f"{kind} {path!r} cannot be loaded: "
                                  f"{type(exc).__name__}: {exc}") from exc  # fmt: skip
    else:
        cls, path = path, f"{path.__module__}.{path.__qualname__}"
    if not inspect.isclass(cls):
        return cls
    try:
        if hasattr(cls, "from_crawler"):
            return cls.from_crawler(crawler)
        if hasattr(cls, "from_settings"):
            return cls.from_settings(crawler.settings)
        return cls()
    except NotConfigured as exc:
        if exc.args:
            log.warning("spider=%s: %s %s is off: %s", crawler.spider.name, kind, path, exc)
        return None
    except Exception as exc:
        raise PipelineProblem(f"{kind} {path!r}: from_crawler failed: "
                              f"{type(exc).__name__}: {exc}") from exc  # fmt: skip


class _Schema:
    """The built-in check of ``item_schema`` (JSON Schema, with formats)."""

    def __init__(self, schema: dict) -> None:
        import jsonschema

        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        self.validator = cls(schema, format_checker=cls.FORMAT_CHECKER)

    def process_item(self, item: Any, spider: Spider) -> Any:
        try:
            data = as_json(item)
        except (TypeError, ValueError):
            return item  # dropped as not serialisable after the pipelines
        error = next(iter(self.validator.iter_errors(data)), None)
        if error is not None:
            where = "/".join(map(str, error.absolute_path)) or "item"
            raise DropItem(f"{SCHEMA}: {where}: {error.message}"[:200])
        return item


class Pipelines:
    """One spider's extensions and pipelines in one worker process, opened on creation, and
    the signals they hear (``crawler.signals``)."""

    def __init__(self, spider: Spider) -> None:
        self.spider = spider
        self.crawler = getattr(spider, "crawler", None) or Crawler(
            Settings(spider.custom_settings), spider)  # fmt: skip
        self.signals = self.crawler.signals
        self.lock = threading.Lock()
        before = {signal: self.signals.receivers(signal) for signal in sent.SENT}
        with self._outside():
            self.extensions = [ext for _, ext in _made(self.crawler, "EXTENSIONS", "extension")]
            stages = _made(self.crawler, "ITEM_PIPELINES", "item pipeline")
            if getattr(spider, "item_schema", None):
                stages.append((SCHEMA_ORDER, _Schema(spider.item_schema)))
            self.stages = [stage for _, stage in sorted(stages, key=lambda s: s[0])]
            self.processors = [(stage, _takes_spider(stage.process_item, 1))
                               for stage in self.stages]  # fmt: skip
            for stage in self.stages:
                if hasattr(stage, "open_spider"):
                    _settle(self._call(stage.open_spider))
            self._send(sent.spider_opened, spider=spider)
        self.connected = [(signal, receiver) for signal in sent.SENT
                          for receiver in self.signals.receivers(signal)
                          if receiver not in before[signal]]  # fmt: skip

    def process(self, item: Any, response: Any = None) -> tuple[dict, str]:
        """The item as the pipelines leave it, and the reason it was dropped ("" if kept);
        ``response``: the one whose callback yielded it, as its signal is told."""
        return self.keep(item, response)[:2]

    def keep(self, item: Any, response: Any = None) -> tuple[dict, str, list | None]:
        """What ``process`` gives, and the kept item's fields in the order feeds write them
        (``field_names``; None for a dropped one)."""
        with self.lock:
            return self._process(item, response)

    def _process(self, item: Any, response: Any) -> tuple[dict, str, list | None]:
        yielded = item
        for stage, takes_spider in self.processors:
            try:
                if takes_spider:
                    item = _settle(stage.process_item(item, self.spider))
                else:
                    item = _settle(stage.process_item(item))
            except DropItem as exc:
                return self._dropped(yielded, item, response, exc)
            except Exception as exc:
                log.exception("spider=%s: pipeline %s failed on an item", self.spider.name,
                              type(stage).__name__)  # fmt: skip
                request = getattr(response, "request", None)
                self._send(sent.item_error, item=yielded, response=response,
                           spider=self.spider, failure=Failure(exc, request, response))  # fmt: skip
                return _kept(item), PIPELINE_ERROR, None
        if not is_item(item):  # Scrapy's pipelines get anything: none made this an item
            return self._dropped(yielded, item, response, DropItem(NOT_ITEM))
        try:
            data = as_stored(item)
        except (TypeError, ValueError) as exc:
            return self._dropped(yielded, item, response, DropItem(f"{NOT_JSON}: {exc}"[:200]))
        if len(json.dumps(data)) > setting("ITEM_MAX_BYTES"):
            self._send(sent.item_dropped, item=yielded, response=response,
                       exception=DropItem(TOO_LARGE), spider=self.spider)  # fmt: skip
            return {"size": len(json.dumps(data))}, TOO_LARGE, None
        if self.signals.heard(sent.item_scraped):
            self._send(sent.item_scraped, item=item, response=response, spider=self.spider)
            data = _after_handlers(item, data)
        return data, "", field_names(item, data)

    def _dropped(self, yielded: Any, item: Any, response: Any,
                 exc: DropItem) -> tuple[dict, str, None]:  # fmt: skip
        self._send(sent.item_dropped, item=yielded, response=response, exception=exc,
                   spider=self.spider)  # fmt: skip
        return _kept(item), _drop_reason(exc), None

    def received(self, response: Any) -> None:
        """``response_received``: the answer that goes to a callback or errback now (a
        callable that makes it: an answer that goes to neither, made only if heard)."""
        if self.signals.heard(sent.response_received):
            response = response() if callable(response) else response
            with self.lock:
                self._send(sent.response_received, response=response,
                           request=response.request, spider=self.spider)  # fmt: skip

    def scheduled(self, request: Any) -> bool:
        """``request_scheduled`` for a request a callback yielded; False if a handler raised
        ``IgnoreRequest`` (the request is left out, as in Scrapy)."""
        if not self.signals.heard(sent.request_scheduled):
            return True  # the usual case, for every request a page yields: at once
        with self.lock:
            results = self._send(sent.request_scheduled, request=request, spider=self.spider,
                                 dont_log=IgnoreRequest)  # fmt: skip
        return not any(isinstance(result, IgnoreRequest) for _, result in results)

    def close(self, reason: str | None = None) -> None:
        """Every pipeline's ``close_spider``; then, when the run ended for ``reason``
        (``finished``, ``cancelled``, ``failed``, ``shutdown``), the spider's ``closed`` and
        ``spider_closed``; then what the extensions and pipelines connected is let go."""
        with self.lock, self._outside():  # after the item in progress
            for stage in (s for s in reversed(self.stages) if hasattr(s, "close_spider")):
                try:
                    _settle(self._call(stage.close_spider))
                except Exception:
                    log.exception("spider=%s: close_spider of %s failed", self.spider.name,
                                  type(stage).__name__)  # fmt: skip
            closed = getattr(self.spider, "closed", None)
            if reason is not None and callable(closed):
                try:
                    _settle(closed(reason))
                except Exception:
                    log.exception("spider=%s: closed(%r) failed", self.spider.name, reason)
            if reason is not None:
                self._send(sent.spider_closed, spider=self.spider, reason=reason)
        for signal, receiver in self.connected:
            self.signals.disconnect(receiver, signal)

    def _send(self, signal: Any, **kwargs: Any) -> list[tuple[Any, Any]]:
        return self.signals.send_catch_log(signal, **kwargs)

    def _outside(self) -> Any:
        """A step outside a page: the job's stats it changes commit when it ends."""
        outside = getattr(self.crawler.stats, "outside", None)
        return outside() if outside is not None else nullcontext()

    def _call(self, method: Any) -> Any:
        """``open_spider`` or ``close_spider``, given the spider if it takes one."""
        return method(self.spider) if _takes_spider(method, 0) else method()


def _takes_spider(method: Any, given: int) -> bool:
    """Whether a pipeline's ``method`` takes the spider after its ``given`` arguments: it
    requires another positional argument (Scrapy before 2.14 always passed the spider, under
    whatever name the method gives it), or takes any number."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: as Scrapy did before
        return True
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in parameters if p.kind in kinds and p.default is p.empty]
    variadic = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)
    return len(required) > given or variadic


def _after_handlers(item: Any, data: dict) -> dict:
    """The item as ``item_scraped``'s handlers left it (Scrapy's feeds write it after the
    handlers connected before theirs), or as it was if they made it no JSON or too large."""
    try:
        changed = as_stored(item)
    except (TypeError, ValueError) as exc:
        log.warning("an item_scraped handler made an item no JSON (%s): kept as it was", exc)
        return data
    if len(json.dumps(changed)) > setting("ITEM_MAX_BYTES"):
        log.warning("an item_scraped handler made an item too large: kept as it was")
        return data
    return changed


def _kept(item: Any) -> dict:
    """What is stored of a dropped item: its JSON, or its ``repr`` if it has none."""
    try:
        return as_json(item)
    except (TypeError, ValueError):
        return {"repr": repr(item)[:1000]}


def _drop_reason(exc: DropItem) -> str:
    """The reason an item is counted under: the DropItem's message, or its class's name."""
    return (str(exc).strip() or type(exc).__name__)[:200]


def _settle(result: Any) -> Any:
    """A pipeline method's result, awaited if it is a coroutine (``async def``), on the
    process's loop (``crawlplatform/spiders/loop.py``)."""
    if inspect.isawaitable(result):
        return loop.run(result, setting("SPIDER_CALLBACK_TIMEOUT_S"))
    return result
