#!/usr/bin/env python
"""Django's command-line utility: ``python manage.py crawl URL`` runs a whole crawl."""

import gc
import json
import os
import sys
import time
import traceback
from types import TracebackType


def _uncaught_as_json(kind: type[BaseException], exc: BaseException,
                      tb: TracebackType | None) -> None:  # fmt: skip
    """Under ``LOG_FORMAT=json``, an error before logging is configured (settings that cannot
    be read, say) is one JSON line too, as ``crawlplatform/logs.py`` writes them after."""
    now = time.time()
    line = {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
            + f".{int(now * 1000) % 1000:03d}Z", "level": "CRITICAL", "logger": "uncaught",
            "message": f"uncaught {kind.__name__}: {exc}", "process": "manage.py",
            "pid": os.getpid(), "exc_info": "".join(traceback.format_exception(kind, exc, tb))}
    sys.stderr.write(json.dumps(line) + "\n")


def main() -> None:
    # Start-up imports about a thousand modules whose objects live as long as the process:
    # the cyclic collector's passes over them free nothing and cost a crawl 0.3 s of CPU.
    # It stays off until the command is loaded; then what exists is frozen (no later pass
    # walks it again) and collection resumes for what the command allocates.
    gc.disable()
    if os.environ.get("LOG_FORMAT") == "json":  # until logging is configured (it replaces it)
        sys.excepthook = _uncaught_as_json
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")
    from django.core.management import ManagementUtility
    from django.core.management.base import BaseCommand

    class Utility(ManagementUtility):
        def main_help_text(self, commands_only: bool = False) -> str:
            """The platform's commands first, in a group of their own, then the others."""
            text = super().main_help_text(commands_only)
            if commands_only:
                return text
            blocks = text.split("\n\n")
            ours = [b for b in blocks if "[web]" in b.split("\n", 1)[0]]
            if not ours:
                return text
            platform = ours[0].replace("[web]", "[crawlplatform: crawl, read and operate jobs]")
            rest = [b for b in blocks if b is not ours[0]]
            head = next(i for i, b in enumerate(rest) if b.startswith("Available subcommands"))
            return "\n\n".join([*rest[: head + 1], platform, *rest[head + 1 :]])

        def fetch_command(self, subcommand: str) -> BaseCommand:
            command = super().fetch_command(subcommand)
            gc.freeze()
            gc.enable()
            return command

    utility = Utility(sys.argv)
    import django

    django.setup()
    from web.management.unreachable import explained

    explained(utility.execute, sys.argv[1] if len(sys.argv) > 1 else "")


if __name__ == "__main__":
    main()
