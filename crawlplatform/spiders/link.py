"""``Link``, as Scrapy 2.19's ``scrapy.link.Link``: one link a ``LinkExtractor`` found.

``url`` is absolute (with its fragment, if the href had one), ``text`` the anchor's text,
``nofollow`` whether its ``rel`` says ``nofollow``; ``fragment`` is only set by whoever makes
a link by hand (the extractor leaves it empty, as Scrapy's does). Links compare and hash by
all four, so they go in sets and compare equal to the links Scrapy would give.
"""

from __future__ import annotations


class Link:
    """A link found on a page: its absolute ``url``, ``text``, ``fragment`` and ``nofollow``."""

    __slots__ = ["fragment", "nofollow", "text", "url"]

    def __init__(
        self, url: str, text: str = "", fragment: str = "", nofollow: bool = False
    ) -> None:
        if not isinstance(url, str):
            raise TypeError(f"Link urls must be str objects, got {url.__class__.__name__}")
        self.url: str = url
        self.text: str = text
        self.fragment: str = fragment
        self.nofollow: bool = nofollow

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Link):
            return NotImplemented
        return (
            self.url == other.url
            and self.text == other.text
            and self.fragment == other.fragment
            and self.nofollow == other.nofollow
        )

    def __hash__(self) -> int:
        return hash(self.url) ^ hash(self.text) ^ hash(self.fragment) ^ hash(self.nofollow)

    def __repr__(self) -> str:
        return (
            f"Link(url={self.url!r}, text={self.text!r}, "
            f"fragment={self.fragment!r}, nofollow={self.nofollow!r})"
        )
