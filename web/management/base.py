"""What every platform command shares: help that shows each option's default.

``PlatformCommand`` is the base of the commands in ``web/management/commands``; their
synopsis in README.md is made from their parsers by ``web/management/usage.py``.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandParser, DjangoHelpFormatter

NO_DEFAULT = (None, False, "", [], argparse.SUPPRESS)


class DefaultsHelpFormatter(DjangoHelpFormatter):
    """Django's help, each option followed by its default when it has one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = "%(default)" in text or "default" in text.lower()
        if action.option_strings and action.default not in NO_DEFAULT and not shown:
            text += " (default: %(default)s)"
        return text


class PlatformCommand(BaseCommand):
    """A platform command: its ``--help`` shows every option's default."""

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        return super().create_parser(prog_name, subcommand, **kwargs)
