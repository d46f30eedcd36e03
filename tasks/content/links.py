"""The link caches of one worker process: a page's links canonicalized, scoped and deduplicated
before they are sent to the database.

Reads ``LINK_CACHE_SIZE``, ``LINK_CACHE_JOBS`` and ``ROBOTS_LOCAL_MAX``. Links are canonicalized
and scoped once per worker process (a page links to the same navigation a hundred times; a site
links to the same pages thousands of times), and a URL this process has already seen committed
for the job is not sent to the database again. The caches only skip work: the database's unique
index is what makes dedup exact, and a URL enters the seen-cache only after its insert
committed.
"""

from __future__ import annotations

import threading
from urllib.parse import urljoin

from crawlplatform.spiders.response import url_directory
from tasks.defaults import setting
from tasks.rules.urls import Scope, canonicalize
from web.models import CrawlJob


class BoundedSet(dict):
    """A dict that forgets its oldest half when full: enough to skip most repeated work (a
    set, with ``None`` values). Lookups are the dict's own: every link of a page asks. The
    threads of a worker share it: two that find it full at once forget the same entries."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key, value=None) -> None:
        if len(self) >= self.size:
            for old in list(self)[: self.size // 2]:
                self.pop(old, None)  # another thread may have forgotten it already
        self[key] = value


class JobCache:
    def __init__(self, scope: Scope, size: int) -> None:
        self.scope = scope
        self.canonical = BoundedSet(size)  # absolute link -> canonical URL in scope, or ""
        self.resolved = BoundedSet(size)  # (directory, href) -> the same
        self.robots_seen = BoundedSet(setting("ROBOTS_LOCAL_MAX"))  # robots.txt applied here
        self.answered = BoundedSet(setting("ROBOTS_LOCAL_MAX"))  # host -> when marked answered
        self.committed = BoundedSet(size)  # canonical URLs known to be in the frontier


_caches: dict[int, JobCache] = {}
_making = threading.Lock()  # held while a job's cache is made


def cache_for(job: CrawlJob) -> JobCache:
    """This process's link cache of ``job``, made by one thread: the threads that meet a new
    job together wait for it rather than each reading the job's seeds for its scope."""
    cache = _caches.get(job.pk)
    if cache is None:
        with _making:
            cache = _caches.get(job.pk)
            if cache is None:
                if len(_caches) > setting("LINK_CACHE_JOBS"):
                    _caches.clear()
                scope = Scope.for_job(job)
                cache = _caches[job.pk] = JobCache(scope, setting("LINK_CACHE_SIZE", job))
    return cache


def in_scope(cache: JobCache, link: str, any_host: bool = False) -> str:
    """The canonical form of absolute ``link`` if the job's scope allows it, else "" (on any
    host with ``any_host``: ``Scope.allows``)."""
    link = link.partition("#")[0]  # canonical URLs have no fragment: one entry for all
    if any_host:
        canonical = canonicalize(link)
        return canonical if canonical and cache.scope.allows(canonical, any_host=True) else ""
    found = cache.canonical.get(link)
    if found is None:
        canonical = canonicalize(link)
        found = canonical if canonical and cache.scope.allows(canonical) else ""
        cache.canonical.put(link, found)
    return found


def new_links(cache: JobCache, base: str, hrefs: list[str]) -> list[str]:
    """Canonical in-scope URLs of ``hrefs`` (relative to ``base``) not yet seen committed.

    A relative href resolves the same way against every page of one directory, so the result
    is cached by (directory, href without its fragment); only hrefs that are just a query or a
    fragment (or empty) depend on the whole base.
    An href that is not a URL at all (``http://[x``) is dropped, as a browser would.
    """
    directory = url_directory(base)
    out: dict[str, None] = {}
    for href in hrefs:
        bare = href.partition("#")[0]
        key = (directory if bare and bare[0] != "?" else base, bare)
        url = cache.resolved.get(key)
        if url is None:
            try:
                url = in_scope(cache, urljoin(base, bare))
            except ValueError:
                url = ""
            cache.resolved.put(key, url)
        if url and url not in cache.committed:
            out[url] = None
    return list(out)
