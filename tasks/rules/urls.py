"""URL canonicalization and the job's scope.

Reads ``MAX_URL_LENGTH``. Canonical form (w3lib): sorted query, no fragment, normalized
percent-encoding, lower-case host; default ports are dropped here. Only http and https URLs
are crawled; mailto, javascript, tel, data and the like are ignored, and so are URLs that no
server could be asked for (a host longer than DNS allows, an impossible port).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from w3lib.url import canonicalize_url

from tasks.defaults import setting
from tasks.rules import patterns

_DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_HOST_LENGTH = 255  # host[:port] as stored in the frontier (DNS names stop at 253)
# Most links are canonical already: lower-case http(s), a plain lower-case host, a path of
# characters canonicalize_url keeps as they are (not ";": an empty parameter is dropped) and no
# escape, query or fragment. Those are recognised at a twentieth of w3lib's cost; one with a
# dot segment ("/." anywhere) goes the long way.
_PLAIN = re.compile(
    r"(https?)://(?P<host>[a-z0-9](?:[a-z0-9.-]{0,241}[a-z0-9])?)(?::(?P<port>[1-9][0-9]{0,4}))?"
    r"(?P<path>/[A-Za-z0-9\-._~!$&'()*+,=:@/]*)"
)


def canonicalize(url: str) -> str | None:
    """The canonical form of an absolute http(s) URL, or None if it is not one."""
    url = url.strip()
    if (plain := _PLAIN.fullmatch(url)) and "/." not in plain["path"]:
        port = plain["port"]
        if port is None or _DEFAULT_PORTS[plain[1]] != int(port) <= 65535:
            return url
    return _canonical_form(url)


def _canonical_form(url: str) -> str | None:
    """:func:`canonicalize` of any URL, through w3lib."""
    head = url[:8].lower()
    if not (head.startswith("http://") or head.startswith("https://")):
        return None
    try:
        canonical = canonicalize_url(url)
        parts = urlsplit(canonical)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or len(parts.hostname) > 253 or port == 0:
        return None
    if port is not None and port == _DEFAULT_PORTS.get(parts.scheme):
        canonical = urlunsplit(parts._replace(netloc=parts.netloc.rsplit(":", 1)[0]))
    if len(host_of(canonical)) > MAX_HOST_LENGTH:
        return None
    return canonical


def seed_problem(url: str, max_length: int | None = None) -> str:
    """Why ``url`` cannot be a seed ('' if it can)."""
    canonical = canonicalize(url) if isinstance(url, str) else None
    if canonical is None:
        return f"{str(url)[:200]!r} is not an absolute http(s) URL"
    limit = max_length or setting("MAX_URL_LENGTH")
    if len(canonical) > limit:
        return f"{url[:100]!r}... is longer than {limit} characters"
    return ""


def path_problem(path: str) -> str:
    """Why ``path`` is not a path on the same host ("" if it is): a warm-up page is one."""
    if path and (not path.startswith("/") or path.startswith("//") or "\\" in path):
        return f"{path!r} is not a path on the crawled host (it starts with one /, e.g. /start)"
    return ""


def host_of(url: str) -> str:
    """``host[:port]`` of a canonical URL, lower case: the unit of politeness."""
    return urlsplit(url).netloc.lower().rsplit("@", 1)[-1]


@dataclass
class Scope:
    """Which URLs a job may add to its frontier."""

    domains: tuple[str, ...]
    subdomains: bool
    include: patterns.Patterns
    exclude: patterns.Patterns
    max_depth: int
    max_length: int

    @classmethod
    def for_job(cls, job: Any) -> Scope:
        domains = job.allowed_domains or [urlsplit(s).hostname or "" for s in job.seeds]
        return cls(
            domains=tuple(dict.fromkeys(d.lower().lstrip(".") for d in domains if d)),
            subdomains=getattr(job, "include_subdomains", True),
            include=patterns.compiled(tuple(job.include_patterns)),
            exclude=patterns.compiled(tuple(job.exclude_patterns)),
            max_depth=job.max_depth,
            max_length=setting("MAX_URL_LENGTH", job),
        )

    def __post_init__(self) -> None:
        self._domains = frozenset(self.domains)  # a broad crawl's scope has thousands

    def allows_host(self, hostname: str) -> bool:
        """One of the domains, or (with subdomains) under one: a look-up per label of the
        name, however many domains the job has."""
        if hostname in self._domains:
            return True
        while self.subdomains and "." in hostname:
            hostname = hostname.split(".", 1)[1]
            if hostname in self._domains:
                return True
        return False

    def allows(self, url: str, any_host: bool = False) -> bool:
        """True if a canonical URL is inside the job's domains (on any host with
        ``any_host``: a spider's request that Scrapy's offsite filter lets through) and
        patterns."""
        if len(url) > self.max_length:
            return False
        if not any_host and not self.allows_host(urlsplit(url).hostname or ""):
            return False
        if self.include and not self.include.any(url):
            return False
        return not self.exclude.any(url)
