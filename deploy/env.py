"""Write a compose ``.env`` from ``.env.example`` with every empty secret filled with a new
random value (Python's standard library only: no virtualenv needed).

    python3 deploy/env.py > .env            # production defaults: TLS in front of the web
    python3 deploy/env.py --local > .env    # a try on http://localhost:8000, no TLS

``--local`` turns off what needs HTTPS (secure cookies, the redirect to https, HSTS) and
trusts ``http://localhost:8000`` for the admin's forms; never use it where others connect.
Values already set in the example are kept; ``CELERY_BROKER_URL`` stays empty (Redis is the
broker unless you choose RabbitMQ).
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / ".env.example"
SECRET = re.compile(r"^(?P<name>\w*(?:KEY|PASSWORD|TOKEN))=$")
LOCAL = {
    "SECURE_COOKIES": "false",
    "SECURE_SSL_REDIRECT": "false",
    "SECURE_HSTS_SECONDS": "0",
    "CSRF_TRUSTED_ORIGINS": "http://localhost:8000,http://127.0.0.1:8000",
}


def filled(example: str, local: bool) -> str:
    """``example`` with empty secrets filled and, with ``local``, the HTTPS settings off."""
    lines = []
    for line in example.splitlines():
        if match := SECRET.match(line):
            line = f"{match['name']}={secrets.token_urlsafe(48)}"
        name = line.split("=", 1)[0]
        if local and name in LOCAL and "=" in line:
            line = f"{name}={LOCAL[name]}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local", action="store_true",
                        help="plain http://localhost:8000, no TLS (a local try only)")  # fmt: skip
    args = parser.parse_args()
    sys.stdout.write(filled(EXAMPLE.read_text(), args.local))


if __name__ == "__main__":
    main()
