"""Proxy URL templates as a job states them, and the one way their ``${VAR}`` references are
filled.

A job's proxy is a URL (``http``, ``https``, ``socks4``, ``socks4a``, ``socks5``,
``socks5h``) whose credentials or host may come from the workers' environment:
``http://${CRAWL_PROXY_USER}:${CRAWL_PROXY_PASSWORD}@proxy1:3128``. Only variables named
``CRAWL_PROXY_*`` are read, so that a job can name the credentials the operator gave its
proxies and nothing else a worker holds (its secret key, database URL, object-store keys); a
template naming any other variable is refused when the job is saved. Text that may carry an
expanded value (an error message, a log line) goes through :func:`redact` first.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

PREFIX = "CRAWL_PROXY_"
SCHEMES = ("http", "https", "socks4", "socks4a", "socks5", "socks5h")
_VAR = re.compile(r"\$\{(\w*)\}")


class Unusable(ValueError):
    """A template naming a variable a proxy may not read (stored before the rule held)."""


def problem(template: object) -> str:
    """Why ``template`` cannot be a proxy ("" if it can)."""
    if not isinstance(template, str):
        return f"must be a list of {', '.join(SCHEMES)} URLs ({template!r} is not)"
    refused = sorted({v for v in _VAR.findall(template) if not v.startswith(PREFIX)})
    if refused:
        names = ", ".join("${" + v + "}" for v in refused)
        return f"{names}: a proxy may only read {PREFIX}* variables of the workers' environment"
    try:
        parts = urlsplit(template)
        usable = parts.scheme in SCHEMES and bool(parts.hostname) and parts.port != 0
    except ValueError:
        usable = False
    return "" if usable else f"must be a list of {', '.join(SCHEMES)} URLs ({template!r} is not)"


def expand(template: str) -> str:
    """The proxy URL with its ``${CRAWL_PROXY_*}`` references filled from the environment
    (KeyError names a variable this worker does not have; Unusable, one it may not read)."""

    def value(found: re.Match) -> str:
        name = found.group(1)
        if not name.startswith(PREFIX):
            raise Unusable(f"${{{name}}}: a proxy may only read {PREFIX}* variables")
        return os.environ[name]  # KeyError: not set in this worker's environment

    return _VAR.sub(value, template)


def redact(text: str) -> str:
    """``text`` with every value of a ``CRAWL_PROXY_*`` variable replaced by its name."""
    for name, value in os.environ.items():
        if name.startswith(PREFIX) and value and value in text:
            text = text.replace(value, "${" + name + "}")
    return text
