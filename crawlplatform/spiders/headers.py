"""``Headers``, as Scrapy's: of a request or a response, names case-insensitive."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from requests.structures import CaseInsensitiveDict
from w3lib.http import headers_dict_to_raw


class Headers(dict):
    """Scrapy's: header names are case-insensitive and kept as title-cased bytes, values as a
    list of bytes (``getlist`` gives every value of a repeated header, ``[name]`` the last,
    ``items()`` each name with its list, ``to_unicode_dict`` text)."""

    def __init__(self, headers: Mapping | Iterable | None = None, encoding: str = "utf-8") -> None:
        super().__init__()
        self.encoding = encoding
        pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
        for name, value in pairs:
            super().setdefault(self._key(name), [])  # kept with no value too (None), as Scrapy's
            for one in value if isinstance(value, list | tuple) else [value]:
                self.appendlist(name, one)

    def _key(self, name: str | bytes) -> bytes:
        return name.title() if isinstance(name, bytes) else str(name).title().encode(self.encoding)

    def _value(self, value: Any) -> bytes:
        return value if isinstance(value, bytes) else str(value).encode(self.encoding)

    def appendlist(self, name: str | bytes, value: Any) -> None:
        values = super().setdefault(self._key(name), [])
        if value is not None:  # None: the header is not sent, as in Scrapy
            values.append(self._value(value))

    def __setitem__(self, name: str | bytes, value: Any) -> None:
        values = value if isinstance(value, list | tuple) else [value]
        super().__setitem__(self._key(name), [self._value(v) for v in values if v is not None])

    def __getitem__(self, name: str | bytes) -> bytes | None:
        values = super().__getitem__(self._key(name))
        return values[-1] if values else None

    def __delitem__(self, name: str | bytes) -> None:
        super().__delitem__(self._key(name))

    def pop(self, name: str | bytes, *default: Any) -> Any:
        return super().pop(self._key(name), *default)

    def update(self, other: Mapping | Iterable = (), **more: Any) -> None:  # type: ignore[override]
        """The headers named in ``other`` replaced: a name given in several pairs keeps each
        of their values, as Scrapy's."""
        pairs = other.items() if isinstance(other, Mapping) else other
        grouped: dict[bytes, list] = {}
        for name, value in [*pairs, *more.items()]:
            values = value if isinstance(value, list | tuple) else [value]
            grouped.setdefault(self._key(name), []).extend(values)
        for name, values in grouped.items():
            self[name] = values

    def copy(self) -> Headers:
        return Headers({k: self.getlist(k) for k in self.keys()}, self.encoding)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str | bytes) and super().__contains__(self._key(name))

    def get(self, name: str | bytes, default: Any = None) -> Any:
        """The last value of ``name``; else ``default``, made bytes as Scrapy's (the last of a
        list's)."""
        if name in self:
            return self[name]
        defaults = default if isinstance(default, list | tuple) else [default]
        return next((self._value(v) for v in reversed(defaults) if v is not None), None)

    def getlist(self, name: str | bytes, default: list | None = None) -> list[bytes]:
        return list(super().get(self._key(name), default or []))

    has_key = __contains__

    def setdefault(self, name: str | bytes, default: Any = None) -> list[bytes]:
        """The values of ``name``, set to ``default`` first if it has none (Scrapy's gives
        the list)."""
        if name not in self:
            self[name] = default
        return super().__getitem__(self._key(name))

    def setlist(self, name: str | bytes, values: Iterable) -> None:
        self[name] = list(values)

    def setlistdefault(self, name: str | bytes, default: Iterable = ()) -> list[bytes]:
        return self.setdefault(name, list(default))

    def items(self) -> Iterator[tuple[bytes, list[bytes]]]:  # type: ignore[override]
        return ((k, self.getlist(k)) for k in self.keys())

    def values(self) -> list[bytes | None]:  # type: ignore[override]
        return [self[k] for k in self.keys()]

    def pairs(self) -> list[tuple[str, str]]:
        """Every (name, value) as text, repeated headers once per value."""
        return [(k.decode("latin-1"), v.decode("latin-1")) for k in self.keys()
                for v in self.getlist(k)]  # fmt: skip

    def to_tuple_list(self) -> list[tuple[str, str]]:
        """Every (name, value) as text in the headers' encoding, as Scrapy's."""
        return [(k.decode(self.encoding), v.decode(self.encoding)) for k in self.keys()
                for v in self.getlist(k)]  # fmt: skip

    def to_string(self) -> bytes:
        """The headers as they go on the wire (``Name: value`` lines)."""
        return headers_dict_to_raw(self)

    def to_unicode_dict(self) -> CaseInsensitiveDict:
        """Names and values as text, a repeated header's values joined by ``,``, in a
        case-insensitive dict, as Scrapy's."""
        return CaseInsensitiveDict((k.decode(self.encoding), b",".join(v).decode(self.encoding))
                                   for k, v in self.items())  # fmt: skip
