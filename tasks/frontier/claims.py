"""A claim: what a worker holds on one URL while it processes it (the lease's token, the job,
and what the attempt has come to), which every move of a leased URL takes; and the exception
for a lease that ended before the worker could commit.

Reads no setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from web.models import CrawlJob, FrontierURL


class LeaseLost(Exception):
    """This worker's lease on a URL ended before it could commit; its work is discarded."""


@dataclass
class Claim:
    url: FrontierURL
    job: CrawlJob
    attempt: int  # the lease token
    reason: str = ""  # why it ended or went back to wait, once it did
    previous_reason: str = ""  # the reason its previous attempt ended with, if any
    previous_message: str = ""  # and that attempt's message
    new_links: bool = False  # its page added URLs to the frontier
    level: int = 0  # its host's anti-bot ladder level during this attempt
    run: int = 1  # the job's run it was claimed in (read with the claim, never from a cache)
    deferred: bool = False  # it went back to wait without an attempt (politeness, robots)
    banned_since: datetime | None = None  # its current run of refusals (bans) began then
    closed_crawl: bool = False  # its spider's callback ended the crawl (CloseSpider)
