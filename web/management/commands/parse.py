"""``python manage.py parse URL --spider NAME [--callback NAME | --rules] [-a key=value ...]``:
fetch one URL as a job would (address guard, robots.txt, identity) and print the items and
requests the spider's callback yields, as Scrapy's ``parse`` does (``--rules``: the callback of
the CrawlSpider's rule that takes the URL). Nothing is stored."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from crawlplatform.embedded import EmbeddedRedis
from tasks.content import spiders, tryout
from tasks.fetch import outcomes
from web.management import crawling
from web.management.base import PlatformCommand
from web.models import CrawlJob


class Command(PlatformCommand):
    help = "Run a spider's callback on one URL and print what it yields."
    requires_system_checks: list = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("url", metavar="URL", help="the page to fetch and parse")
        parser.add_argument("--spider", required=True, metavar="NAME",
                            help="the installed spider (manage.py spiders lists them)")  # fmt: skip
        parser.add_argument("--callback", "-c", default="", metavar="NAME",
                            help="the spider's method to call (default: parse)")  # fmt: skip
        parser.add_argument("-a", dest="spider_args", action="append", default=[],
                            metavar="NAME=VALUE",
                            help="a spider argument (repeatable)")  # fmt: skip
        parser.add_argument("--rules", "-r", action="store_true",
                            help="call back by the CrawlSpider's rule that takes the URL "
                            "(Scrapy's parse --rules), as a crawl does: its links too")  # fmt: skip
        parser.add_argument("--cbkwargs", default="{}", metavar="JSON",
                            help="the callback's keyword arguments, a JSON object")  # fmt: skip
        parser.add_argument("--meta", "-m", default="{}", metavar="JSON",
                            help="the request's meta, a JSON object (default: {})")  # fmt: skip
        parser.add_argument("--ignore-robots", action="store_true",
                            help="fetch even where robots.txt forbids it")  # fmt: skip
        parser.add_argument("--allow-network", action="append", default=[], metavar="CIDR",
                            help="a non-public network the URL may be fetched from, e.g. "
                            "127.0.0.0/8 (repeatable), as crawl's")  # fmt: skip

    def handle(self, *args, **opts) -> None:
        try:
            cls = spiders.load(opts["spider"])
            cb_kwargs = _object(opts["cbkwargs"], "--cbkwargs")
            meta = _object(opts["meta"], "--meta")
            if opts["rules"] and opts["callback"]:
                raise ValueError("--rules picks the callback: give --callback or --rules")
        except spiders.SpiderUnavailable as exc:
            raise CommandError(str(exc)) from None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        custom = spiders.custom_settings(cls)
        job = CrawlJob(spider=opts["spider"], spider_args=crawling.parse_spider_args(
            opts["spider_args"]), settings={**custom.settings, **crawling.allowed_networks(
                opts["allow_network"])}, **custom.fields)  # fmt: skip
        job.allowed_domains = list(getattr(cls, "allowed_domains", None) or
                                   [urlsplit(opts["url"]).hostname or ""])  # fmt: skip
        if opts["ignore_robots"]:
            job.obey_robots = False
        # robots.txt and the identity's state live in Redis: on the embedded defaults, the
        # private redis-server (the running crawl's, if one runs; else one for this command).
        embedded = EmbeddedRedis(settings.DATA_DIR) if settings.EMBEDDED_REDIS else None
        if embedded is not None:
            embedded.start()
        try:
            tried = tryout.parse_url(job, opts["url"], opts["callback"], cb_kwargs, meta,
                                     rules=opts["rules"])  # fmt: skip
        except outcomes.CrawlOutcome as exc:
            raise CommandError(f"{exc.reason}: {exc}") from None
        except ValueError as exc:  # no rule takes the URL
            raise CommandError(str(exc)) from None
        finally:
            if embedded is not None:
                embedded.stop()
        self.stdout.write(f">>> {tried.status} {tried.url} <<<")
        self.stdout.write("# Scraped Items " + "-" * 60)
        for data, dropped in tried.items:
            line = json.dumps(data, ensure_ascii=False, sort_keys=True)
            self.stdout.write(f"{line}  # dropped: {dropped}" if dropped else line)
        self.stdout.write("# Requests " + "-" * 65)
        for request in tried.requests:
            extra = f" -> {request.callback_name}" if request.callback_name else ""
            self.stdout.write(f"<{request.method} {request.url}>{extra}")


def _object(text: str, option: str) -> dict:
    """``text`` as a JSON object; ValueError names the option otherwise."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{option}: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{option}: a JSON object, not {text!r}")
    return value
