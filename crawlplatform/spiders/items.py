"""``Item`` and ``Field``, as Scrapy's: an item class that declares its fields, so that a
typo in a field's name is an error, not a silent new key.

An ``Item`` here is a ``dict`` (its keys the declared fields), so that items of either kind
go through the pipelines and into JSON alike. itemadapter sees it as Scrapy's: its declared
fields and their metadata (``ItemAdapter(item).get_field_meta(name)``, so that an
itemloaders ``ItemLoader`` applies a ``Field``'s ``input_processor`` and
``output_processor``), once an ``Item`` has been made (itemadapter is imported then, not
before: importing it imports every item library installed).
"""

from __future__ import annotations

import copy
import threading
from pprint import pformat
from typing import Any, ClassVar, NoReturn


class Field(dict):
    """A declared field of an ``Item``, and its metadata (``Field(serializer=str)``)."""


class Item(dict):
    """Base class of items with declared fields (``name = Field()``): setting a field the class
    does not declare raises ``KeyError``; fields are read and set as keys
    (``item["name"]``), as in Scrapy. ``fields``: the declared fields and their metadata,
    those of base classes first."""

    fields: ClassVar[dict[str, Field]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields: dict[str, Field] = {}
        for base in reversed(cls.__mro__[1:]):
            fields.update(getattr(base, "fields", {}))
        for name, value in list(vars(cls).items()):
            if isinstance(value, Field):
                fields[name] = value  # a redefined field keeps its place
                delattr(cls, name)  # read as item[name]: the attribute says so
        cls.fields = fields

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.update(*args, **kwargs)
        if not _adapted:
            _adapt()

    def __hash__(self) -> int:  # as Scrapy's: an item is hashed by its identity
        return id(self)

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self.fields:
            raise KeyError(f"{type(self).__name__} does not support field: {key}")
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __getattr__(self, name: str) -> NoReturn:
        if name in type(self).fields:
            raise AttributeError(f"Use item[{name!r}] to get field value")
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_"):
            raise AttributeError(f"Use item[{name!r}] = {value!r} to set field value")
        super().__setattr__(name, value)

    def copy(self) -> Item:
        return type(self)(self)

    def deepcopy(self) -> Item:
        return copy.deepcopy(self)

    def __repr__(self) -> str:
        return pformat(dict(self))


_adapted: list[type] = []  # the itemadapter adapter of Items, once registered
_adapting = threading.Lock()


def _adapt() -> None:
    """Register with itemadapter an adapter that reads an Item's declared fields, before its
    plain dicts' (Scrapy's own adapter, told our class)."""
    from itemadapter import ItemAdapter
    from itemadapter.adapter import ScrapyItemAdapter

    class ItemFields(ScrapyItemAdapter):
        @classmethod
        def is_item(cls, item: Any) -> bool:
            return isinstance(item, Item)

        @classmethod
        def is_item_class(cls, item_class: type) -> bool:
            return isinstance(item_class, type) and issubclass(item_class, Item)

    with _adapting:
        if not _adapted:
            ItemAdapter.ADAPTER_CLASSES.appendleft(ItemFields)
            _adapted.append(ItemFields)
