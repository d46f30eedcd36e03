"""``python manage.py config list|get|set|unset|history``: crawl settings changed at run time.

``config set NAME VALUE`` validates the value (the setting's type; settings read only when a
process starts are refused), stores it with an audit row and announces it: every worker and
scheduler has it in force within a second, without a restart. ``config unset NAME`` goes back
to the environment's value or the default. ``config list`` shows every setting with the value
in force here and where it comes from; ``config history [NAME]`` the audit.
"""

from __future__ import annotations

import getpass
import json
import os

from django.core.management.base import CommandError, CommandParser

from tasks import defaults, live
from web.management.base import PlatformCommand
from web.models import SettingChange


def _shown(value) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


class Command(PlatformCommand):
    help = "Show and change crawl settings at run time (tasks/defaults.py)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="verb", required=True)
        sub.add_parser("list", help="every setting, its value and where it comes from")
        get = sub.add_parser("get", help="one setting's value in force")
        get.add_argument("name")
        put = sub.add_parser("set", help="change a setting everywhere, now")
        put.add_argument("name")
        put.add_argument("value")
        put.add_argument("--by", default="", help="who (default: this login)")
        unset = sub.add_parser("unset", help="back to the environment's value or the default")
        unset.add_argument("name")
        unset.add_argument("--by", default="")
        history = sub.add_parser("history", help="the audit of live changes")
        history.add_argument("name", nargs="?")
        history.add_argument("--limit", type=int, default=50)

    def handle(self, *args, verb: str, **opts) -> None:
        live.load()
        if verb == "list":
            for name in sorted(defaults.names()):
                self.stdout.write(f"{name} = {_shown(defaults.setting(name))}  ({_source(name)})")
        elif verb == "get":
            _known(opts["name"])
            value = defaults.setting(opts["name"])
            self.stdout.write(f"{_shown(value)}  ({_source(opts['name'])})")
        elif verb in ("set", "unset"):
            name = opts["name"]
            who = opts["by"] or f"{getpass.getuser()} (manage.py config)"
            try:
                value = live.parse(name, opts["value"]) if verb == "set" else None
                old, new = live.change(name, value, who)
            except live.Refused as exc:
                raise CommandError(str(exc)) from None
            now = "unset" if new is None else _shown(new)
            self.stdout.write(f"{name}: {'unset' if old is None else _shown(old)} -> {now}")
        else:
            rows = SettingChange.objects.all()
            if opts["name"]:
                rows = rows.filter(name=opts["name"])
            for row in rows[: opts["limit"]]:
                self.stdout.write(str(row))


def _known(name: str) -> None:
    if name not in defaults.names():
        raise CommandError(f"{name}: no such setting (see tasks/defaults.py)")


def _source(name: str) -> str:
    if name in defaults.live:
        return "live"
    if f"CRAWL_{name}" in os.environ:
        return f"environment CRAWL_{name}"
    return "default"
