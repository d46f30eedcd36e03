"""One URL through a spider's callback, nothing stored: what ``manage.py parse`` shows while a
spider is being written.

Reads the fetch settings (``fetching.limits_for``), ``USER_AGENT`` and ``ALLOWED_NETWORKS``
(the guard) of the job it is given. The URL is fetched as a job's URL is: through the one
transport and its address guard, as the job's first identity (user agent, headers), after
its host's robots.txt unless the job ignores it; the callback runs bounded as in a worker,
and the items go through the spider's pipelines.
"""

from __future__ import annotations

from typing import NamedTuple

from crawlplatform.spiders import Request, Spider, StatsCollector
from tasks.content import callbacks, items, spiders
from tasks.content.links import cache_for, in_scope
from tasks.fetch import fetching, identity, outcomes, robots
from tasks.rules import guard
from web.models import CrawlJob


class Tried(NamedTuple):
    status: int
    url: str  # after redirects
    items: list[tuple[dict, str]]  # (item, the reason a pipeline dropped it or "")
    requests: list[Request]


def parse_url(job: CrawlJob, url: str, callback: str = "", cb_kwargs: dict | None = None,
              meta: dict | None = None, rules: bool = False) -> Tried:  # fmt: skip
    """Fetch ``url`` and run the spider's ``callback`` (default: the request's, ``parse``;
    with ``rules``, the CrawlSpider's rule that takes the page's URL, as its requests are
    called back in a crawl: its callback with its ``cb_kwargs``, then its links if it follows)
    on it; raises a CrawlOutcome if the fetch or the callback fails, ValueError if no rule
    takes it."""
    spider = spiders.create(job)
    if rules and not getattr(spider, "rules", None):
        raise ValueError(f"spider {spider.name!r} has no CrawlSpider rules: name the callback "
                         "to use (--callback)")  # fmt: skip
    spider.crawler.stats = StatsCollector(spider.crawler)  # in this process only: nothing stored
    agent = identity.pools(job)[0][0]
    if job.obey_robots:
        decision = robots.check(job, url, agent)
        if decision.failure is not None:
            raise decision.failure
        if not decision.allowed:
            raise outcomes.RobotsDisallowed(f"robots.txt forbids {url} ({decision.reason})")
    cache, limits = cache_for(job), fetching.limits_for(job)
    resp = fetching.fetch(
        url, user_agent=agent, limits=limits, allow=guard.allowed(job),
        in_scope=lambda u: bool(in_scope(cache, u)),
        visitor=fetching.Visitor(headers=dict(job.headers or {})),
    )  # fmt: skip
    if rules:  # called back as a crawl calls back the rule's requests: through _callback
        callback, meta = "_callback", {**(meta or {}), "rule": rule_for(spider, resp.final_url)}
    request = Request(url, callback=callback or None, cb_kwargs=cb_kwargs, meta=meta)
    response = callbacks.response_of(resp, request, deadline=limits.deadline)
    yielded = callbacks.call(spider, callback or callbacks.DEFAULT_CALLBACK, response,
                             request.cb_kwargs, job)  # fmt: skip
    if yielded.raised is not None:
        raise yielded.raised
    pipes = items.Pipelines(spider)
    try:
        kept = [pipes.process(item, response) for item in yielded.items]
    finally:
        pipes.close()
    return Tried(resp.status, resp.final_url, kept, yielded.requests)


def rule_for(spider: Spider, url: str) -> int:
    """The index of the first of ``spider``'s rules whose link extractor takes ``url``, as
    ``scrapy parse --rules`` picks the rule."""
    for index, rule in enumerate(spider.rules):
        if rule.link_extractor.matches(url):
            return index
    raise ValueError(f"no rule of spider {spider.name!r} takes {url}")
