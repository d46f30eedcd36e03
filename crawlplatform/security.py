"""Settings that must not reach production: a weak secret key, any Host accepted, debug.

The embedded default (``manage.py crawl`` with no configuration) needs no secret from anyone:
it makes a random key once and keeps it in its data directory (:func:`local_secret_key`).
A web process is another matter: sessions and CSRF tokens are signed with ``SECRET_KEY``, and
several replicas must share one. gunicorn (``crawlplatform/gunicorn_config.py``) therefore
calls :func:`refuse_unsafe` before it serves anything: with ``DEBUG`` off it will not start on
a missing, short or placeholder ``SECRET_KEY`` nor with ``ALLOWED_HOSTS=*``.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

# Values that have stood in for a secret in examples; none of them may sign a session.
PLACEHOLDERS = {"change-me", "change-me-in-production", "secret", "changeme", "dev"}


def local_secret_key(data_dir: Path) -> str:
    """A random key made on first use and kept (mode 0600) in ``data_dir``."""
    path = data_dir / "secret-key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    data_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process of this data directory made it first
        return path.read_text().strip()
    with os.fdopen(fd, "w") as out:
        out.write(key)
    return key


def problems(environ: dict[str, str], debug: bool, allowed_hosts: list[str]) -> list[str]:
    """Why a web process must not start with these settings (empty: it may)."""
    if debug:
        return []
    found = []
    key = environ.get("SECRET_KEY", "")
    if not key:
        found.append("SECRET_KEY is not set: set a long random value shared by every replica")
    elif key.lower() in PLACEHOLDERS or len(key) < 50 or len(set(key)) < 5:
        found.append("SECRET_KEY is a placeholder or too weak: use 50+ random characters")
    if "*" in allowed_hosts:
        found.append("ALLOWED_HOSTS=* accepts any Host header: list the names people use")
    return found


def refuse_unsafe() -> None:
    """Raise SystemExit naming every problem (gunicorn's ``on_starting``)."""
    from django.conf import settings

    found = problems(dict(os.environ), settings.DEBUG, list(settings.ALLOWED_HOSTS))
    if found:
        raise SystemExit("refusing to serve with unsafe settings:\n  " + "\n  ".join(found))
