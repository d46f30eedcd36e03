"""The platform commands' synopsis, made from their parsers: README.md's "Commands" block is
this output (``tests/test_cli.py`` keeps them equal). Print it with
``python -m web.management.usage``.
"""

from __future__ import annotations

import argparse
import os

from django.core.management import get_commands, load_command_class

COMMON = {"--version", "--verbosity", "--settings", "--pythonpath", "--traceback", "--no-color",
          "--force-color", "--skip-checks", "--help"}  # fmt: skip
WIDTH = 96


def platform_commands() -> list[str]:
    """The platform's own commands (the ``web`` app's), by name."""
    return sorted(name for name, app in get_commands().items() if app == "web")


def synopsis(name: str) -> str:
    """``python manage.py NAME ...``: the command's usage without Django's common options."""
    parser = load_command_class("web", name).create_parser("manage.py", name)
    parser.prog = f"python manage.py {name}"
    kept = [a for a in parser._actions if not set(a.option_strings) & COMMON]
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(None, kept, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().rstrip()


def block() -> str:
    """Every platform command's synopsis, one after another."""
    return "\n".join(synopsis(name) for name in platform_commands())


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")
    import django

    django.setup()
    print(block())
