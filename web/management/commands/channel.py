"""``python manage.py channel status|weights|promote|rollback``: release channels.

    channel status                       channels, weights, workers (versions), queued messages
    channel weights blue=90 green=10     the split of hosts between channels (adds up to 100)
    channel canary green                 green at the first of CANARY_STEPS (5%), stepping up
                                         while healthy, rolled back at once when not
    channel promote green                all weight to green; the others drain warm
    channel rollback green [--to blue]   green's weight back at once, its queued URLs moved
    channel events                       what the canary analysis and people did

Weights change what the scheduler releases from then on (``tasks/frontier/channels.py``).
"""

from __future__ import annotations

import getpass
import time

from django.core.management.base import CommandError, CommandParser

from tasks import broker
from tasks.defaults import setting
from tasks.frontier import canary, channels
from tasks.worker import registry
from web.management.base import PlatformCommand
from web.models import ChannelEvent


class Command(PlatformCommand):
    help = "Show and change how the crawl is split between release channels."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="verb", required=True)
        sub.add_parser("status", help="channels, weights, workers and queued messages")
        weights = sub.add_parser("weights", help="set the split, e.g. blue=90 green=10")
        weights.add_argument("split", nargs="+", metavar="NAME=PERCENT")
        canary_ = sub.add_parser("canary", help="start a canary that steps up while healthy")
        canary_.add_argument("name")
        events = sub.add_parser("events", help="canaries started, stepped up, rolled back")
        events.add_argument("--limit", type=int, default=30)
        promote = sub.add_parser("promote", help="all weight to this channel")
        promote.add_argument("name")
        rollback = sub.add_parser("rollback", help="take this channel's weight back at once")
        rollback.add_argument("name")
        rollback.add_argument("--to", default="", help="the channel that gets it (default: "
                              "the one with the most weight)")  # fmt: skip
        for each in (weights, canary_, promote, rollback):
            each.add_argument("--by", default="", help="who (default: this login)")

    def handle(self, *args, verb: str, **opts) -> None:
        who = opts.get("by") or f"{getpass.getuser()} (manage.py channel)"
        try:
            if verb == "weights":
                split = {}
                for item in opts["split"]:
                    name, eq, number = item.partition("=")
                    if not eq or not number.strip().isdigit():
                        raise CommandError(f"{item!r}: write NAME=PERCENT, e.g. green=10")
                    split[name.strip()] = int(number)
                channels.set_weights(split, who)
            elif verb == "canary":
                canary.start(opts["name"], who)
                self.stdout.write(f"{opts['name']} is a canary stepping through "
                                  f"{setting('CANARY_STEPS')}%")  # fmt: skip
            elif verb == "events":
                for event in ChannelEvent.objects.all()[: opts["limit"]]:
                    self.stdout.write(str(event))
                return
            elif verb == "promote":
                channels.promote(opts["name"], who)
                self.stdout.write(f"{opts['name']} takes every new URL; the others drain")
            elif verb == "rollback":
                _, moved = channels.rollback(opts["name"], who, opts["to"])
                self.stdout.write(f"{opts['name']} rolled back: {moved} queued URLs moved")
        except channels.Refused as exc:
            raise CommandError(str(exc)) from None
        self.status()

    def status(self) -> None:
        split = channels.weights(cached=False)
        now = time.time()
        workers = [w for w in registry.workers() if registry.online(w, now)]
        self.stdout.write(f"{'channel':<12} {'weight':>6} {'queued':>7}  workers (version)")
        for name in channels.known():
            queue = channels.queue(name)
            mine = [w for w in workers if w["channel"] == name]
            versions = ", ".join(sorted({str(w["version"]) for w in mine})) or "-"
            ready = broker.depth(queue)["ready"]
            self.stdout.write(
                f"{name:<12} {split.get(name, 0):>5}% {ready:>7}  {len(mine)} ({versions})"
            )
