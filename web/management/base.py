"""What every platform command shares: help that shows each option's default, and messages
that are log lines when the process logs JSON (``Say``).

``PlatformCommand`` is the base of the commands in ``web/management/commands``; their
synopsis in README.md is made from their parsers by ``web/management/usage.py``.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.core.management.base import (
    BaseCommand,
    CommandParser,
    DjangoHelpFormatter,
    OutputWrapper,
)

from crawlplatform import logs

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


class Say:
    """A message for the person who ran the command: written on ``out`` as it is, or, when
    the process logs JSON, logged on ``log`` with ``fields`` (a blank one is dropped), at INFO,
    or at WARNING for a text that says it is a warning: then a command writes nothing but
    JSON lines on standard error."""

    def __init__(self, out: OutputWrapper, log: logging.Logger) -> None:
        self.out, self.log = out, log
        self.logged = logs.json_configured()

    @property
    def live(self) -> bool:
        """Whether a line may be rewritten in place (``\\r``): text on a terminal."""
        return not self.logged and self.out.isatty()

    def __call__(self, text: str, ending: str | None = None, **fields: object) -> None:
        if not self.logged:
            self.out.write(text, ending=ending)
        elif text.strip():
            level = logging.WARNING if text.lstrip().startswith("warning:") else logging.INFO
            self.log.log(level, text.strip(), extra=fields)
