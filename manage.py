#!/usr/bin/env python
"""Django's command-line utility: ``python manage.py crawl URL`` runs a whole crawl."""

import gc
import os
import sys


def main() -> None:
    # Start-up imports about a thousand modules whose objects live as long as the process:
    # the cyclic collector's passes over them free nothing and cost a crawl 0.3 s of CPU.
    # It stays off until the command is loaded; then what exists is frozen (no later pass
    # walks it again) and collection resumes for what the command allocates.
    gc.disable()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")
    from django.core.management import ManagementUtility
    from django.core.management.base import BaseCommand

    class Utility(ManagementUtility):
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
