"""``python manage.py scheduler``: release due URLs of every running job into the broker.

Run one or more anywhere (leadership is a Redis lease: one is active, the others take over
within seconds). It also sweeps expired leases, re-publishes lost messages and writes
periodic checkpoints. SIGTERM or Ctrl-C stops it after the current pass.
"""

from __future__ import annotations

import logging
import signal

from crawlplatform import logs
from tasks.frontier.scheduler import Scheduler
from web.management.base import PlatformCommand, Say

log = logging.getLogger(__name__)


class Command(PlatformCommand):
    help = "Run the crawl scheduler until SIGTERM."
    # Django's system checks load the URL configuration and the admin, a quarter second of
    # CPU this long-running process does not need; `migrate` (every deployment) runs them.
    requires_system_checks: list = []

    def handle(self, *args, **opts) -> None:
        logs.service(process="scheduler")  # a service: its standard output is a log too
        scheduler = Scheduler()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: scheduler.shutdown())
        Say(self.stderr, log)(f"scheduler {scheduler.identity[:8]} running; SIGTERM stops it")
        scheduler.run()
