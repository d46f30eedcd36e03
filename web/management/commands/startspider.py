"""``python manage.py startspider NAME DOMAIN [--directory DIR]``: write ``NAME.py``, a
commented spider to start from (Scrapy's ``genspider``). It refuses to overwrite a file."""

from __future__ import annotations

import keyword
import re
from pathlib import Path

from django.core.management.base import CommandError, CommandParser

from web.management.base import PlatformCommand

TEMPLATE = '''"""The {name} spider: start here, then install it (CRAWL_SPIDER_MODULES, or an
entry point in the crawlplatform.spiders group) and run it:

    python manage.py parse {url} --spider {name}          # one page, nothing stored
    python manage.py crawl --spider {name} --output items.jsonl

docs/spiders.md has the whole API and a complete example.
"""

from crawlplatform.spiders import DropItem, Request, Spider  # noqa: F401 (as you need them)


class {cls}(Spider):
    name = "{name}"
    allowed_domains = ["{domain}"]  # the job's scope: requests elsewhere are dropped
    start_urls = ["{url}"]  # or: async def start(self): yield Request(...)
    custom_settings = {{
        # Job settings (tasks/defaults.py), and pipelines: {{"dotted.path.Class": order}}.
        # "ITEM_PIPELINES": {{"{name}_pipelines.Clean": 300}},
    }}
    # A JSON Schema every item must satisfy; items that do not are dropped as "schema".
    item_schema = None

    def parse(self, response):
        # Yield items (dicts, dataclasses, attrs) and requests, in any mix. Callbacks are
        # named by method: a request's callback survives restarts and runs on any worker.
        yield {{"url": response.url, "title": response.css("title::text").get()}}
        # Follow links with a callback of this spider (cb_kwargs and meta must be JSON):
        # yield from response.follow_all(css="a.next", callback=self.parse)
'''


class Command(PlatformCommand):
    help = "Write a commented spider to start from."
    requires_system_checks: list = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME", help="the spider's name (a Python name)")
        parser.add_argument("domain", metavar="DOMAIN",
                            help="the site, e.g. shop.example, or the URL to start from, "
                            "e.g. https://shop.example/catalog")  # fmt: skip
        parser.add_argument("--directory", default=".", metavar="DIR",
                            help="where its module is written (default: here)")  # fmt: skip

    def handle(self, *args, **opts) -> None:
        name, domain = opts["name"], opts["domain"].strip().lower()
        if not name.isidentifier() or keyword.iskeyword(name):
            raise CommandError(f"{name!r} is not a Python name (letters, digits, underscores)")
        given = opts["domain"].strip()
        url = given if re.match(r"https?://", given, re.IGNORECASE) else f"https://{given}"
        domain = re.sub(r"^https?://", "", domain).split("/", 1)[0]
        if not re.fullmatch(r"[a-z0-9.-]+(:[0-9]+)?", domain) or re.search(r'["\\\s]', url):
            raise CommandError(f"{opts['domain']!r} is not a domain or URL")
        if "/" not in url.split("://", 1)[1]:
            url += "/"
        path = Path(opts["directory"]) / f"{name}.py"
        if path.exists():
            raise CommandError(f"{path} exists; not overwritten")
        cls = "".join(part.capitalize() for part in name.split("_")) + "Spider"
        path.write_text(TEMPLATE.format(name=name, domain=domain, url=url, cls=cls))
        self.stdout.write(f"wrote {path}: spider {name!r} ({cls}) for {domain}")
