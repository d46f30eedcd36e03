"""A curl command as a request's arguments (``Request.from_curl``), read as Scrapy 2.19's
``scrapy.utils.curl`` reads it (BSD-licensed; this is its logic): the URL (``http://`` when it
has no scheme), ``-X``, ``-H`` (a ``Cookie`` header's cookies as cookies), ``-b`` pairs,
``-d``/``--data``/``--data-raw`` (repeated ones joined with ``&``; a POST unless ``-X`` says
otherwise) and ``-u``; ``--compressed``, ``-s``, ``-v`` and ``-#`` are passed over, and other
options too, with a warning (a ``ValueError`` with ``ignore_unknown_options=False``).
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Sequence
from http.cookies import SimpleCookie
from shlex import split
from typing import Any, NoReturn
from urllib.parse import urlparse

from w3lib.http import basic_auth_header


class _Data(argparse.Action):
    """``-d``: a leading ``$`` (a shell's ``$'...'``) dropped, repeats joined as curl joins them."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None,
                 option_string: str | None = None) -> None:  # fmt: skip
        value = str(values).removeprefix("$")
        previous = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, value if previous is None else f"{previous}&{value}")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ValueError(f"There was an error parsing the curl command: {message}")


_PARSER = _Parser(add_help=False)
_PARSER.add_argument("url")
_PARSER.add_argument("-H", "--header", dest="headers", action="append")
_PARSER.add_argument("-X", "--request", dest="method")
_PARSER.add_argument("-b", "--cookie", dest="cookies", action="append")
_PARSER.add_argument("-d", "--data", "--data-raw", dest="data", action=_Data)
_PARSER.add_argument("-u", "--user", dest="auth")
for _ignored in (["--compressed"], ["-s", "--silent"], ["-v", "--verbose"],
                 ["-#", "--progress-bar"]):  # fmt: skip
    _PARSER.add_argument(*_ignored, action="store_true")


def _headers_and_cookies(args: argparse.Namespace) -> tuple[list[tuple[str, Any]], dict[str, str]]:
    headers: list[tuple[str, Any]] = []
    cookies: dict[str, str] = {}
    for header in args.headers or ():
        name, value = (part.strip() for part in header.split(":", 1))
        if name.title() == "Cookie":
            cookies.update((key, morsel.value) for key, morsel in SimpleCookie(value).items())
        else:
            headers.append((name, value))
    for pairs in args.cookies or ():
        if "=" in pairs:  # curl also takes a file name here: only pairs are read
            cookies.update((key, morsel.value) for key, morsel in SimpleCookie(pairs).items())
    if args.auth:
        user, password = args.auth.split(":", 1)
        headers.append(("Authorization", basic_auth_header(user, password)))
    return headers, cookies


def curl_to_request_kwargs(curl_command: str, ignore_unknown_options: bool = True) -> dict:
    """The ``Request`` arguments of ``curl_command`` (see the module's docstring)."""
    words = split(curl_command)
    if not words or words[0] != "curl":
        raise ValueError('A curl command must start with "curl"')
    args, unknown = _PARSER.parse_known_args(words[1:])
    if unknown:
        message = f"Unrecognized options: {', '.join(unknown)}"
        if not ignore_unknown_options:
            raise ValueError(message)
        warnings.warn(message, stacklevel=3)
    url = args.url if urlparse(args.url).scheme else "http://" + args.url
    result: dict[str, Any] = {"method": (args.method or "GET").upper(), "url": url}
    headers, cookies = _headers_and_cookies(args)
    if headers:
        result["headers"] = headers
    if cookies:
        result["cookies"] = cookies
    if args.data:
        result["body"] = args.data
        if not args.method:
            result["method"] = "POST"
    return result
