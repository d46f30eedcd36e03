"""``python manage.py spiders``: the spiders this installation can run (``CRAWL_SPIDER_MODULES``
and the ``crawlplatform.spiders`` entry points), and the modules that fail to import, with
their tracebacks (``-v 2``)."""

from __future__ import annotations

from tasks.content import spiders
from web.management.base import PlatformCommand


class Command(PlatformCommand):
    help = "List the installed spiders."
    requires_system_checks: list = []

    def handle(self, *args, **opts) -> None:
        found = spiders.installed()
        for name, spider in sorted(found.items()):
            if spider.cls is not None:
                self.stdout.write(f"{name}\t{spider.source}.{spider.cls.__name__}"
                                  if "." not in spider.source or ":" not in spider.source
                                  else f"{name}\t{spider.source}")  # fmt: skip
        for spider in (s for s in found.values() if s.cls is None):
            last = spider.error.strip().splitlines()[-1] if spider.error else ""
            self.stderr.write(f"cannot load {spider.source}: {last}")
            if opts["verbosity"] > 1:
                self.stderr.write(spider.error)
        if not found:
            self.stderr.write("no spiders installed: set CRAWL_SPIDER_MODULES or install a "
                              "package with crawlplatform.spiders entry points")  # fmt: skip
