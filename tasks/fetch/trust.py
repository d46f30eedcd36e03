"""Which certificates a TLS connection trusts, and which one it presents when asked.

Reads ``CA_BUNDLE``, ``CA_BUNDLE_ONLY``, ``CLIENT_CERT``, ``CLIENT_KEY`` and ``TLS_VERIFY``
(``tasks/defaults.py``; environment ``CRAWL_<NAME>`` or live configuration), and the
environment's ``REQUESTS_CA_BUNDLE`` and ``SSL_CERT_FILE``.

The default trust is the bundle the environment names, as requests and OpenSSL read it
(``REQUESTS_CA_BUNDLE``, else ``SSL_CERT_FILE``: a file that replaces the default), else
certifi's, which is what requests trusts out of the box. The transport's sessions ignore the
environment (``trust_env`` off, so that no environment proxy is ever used), so those two
variables are read here by name. ``CA_BUNDLE``, a PEM file or a directory whose PEM files are
all read (no ``c_rehash`` needed), is added to the default trust: an intranet's CA, a staging
site's, a corporate proxy's that re-signs TLS. With ``CA_BUNDLE_ONLY`` it is the whole trust.
``CLIENT_CERT`` (a PEM certificate chain, with its key in ``CLIENT_KEY`` or in the same file)
is presented to servers that ask for a client certificate (mutual TLS). Certificates are
verified and host names matched, unless ``TLS_VERIFY`` is off: an operator setting, which a
job may set for itself only while its owner holds ``web.skip_tls_verify`` (staff have it and
can grant it; a value stored without it is ignored, see :func:`verifies`).

Every connection shares one SSL context per configuration; the files are read when one of
the settings changes and when a process starts (edit a bundle in place: change the setting,
or restart).
"""

from __future__ import annotations

import os
import ssl
from functools import lru_cache
from pathlib import Path

import certifi
from urllib3.util.ssl_ import create_urllib3_context

from tasks.defaults import JOB_PERMISSIONS, setting

_PEM = b"-----BEGIN CERTIFICATE-----"
VERIFY_PERMISSION = JOB_PERMISSIONS["TLS_VERIFY"]  # a job's owner needs it to set TLS_VERIFY


class Misconfigured(Exception):
    """A trust or client-certificate setting that cannot be used; the message names it."""


def context() -> ssl.SSLContext:
    """The SSL context of the settings in force now (the same object while they hold)."""
    return _context(
        setting("CA_BUNDLE"),
        setting("CA_BUNDLE_ONLY"),
        setting("CLIENT_CERT"),
        setting("CLIENT_KEY"),
        os.environ.get("REQUESTS_CA_BUNDLE", ""),
        os.environ.get("SSL_CERT_FILE", ""),
    )


def verifies(job=None) -> bool:
    """Are certificates checked for ``job``'s fetches? Its own ``TLS_VERIFY`` counts only
    while its owner holds the permission for it (a value stored before, or kept after the
    permission went, does not)."""
    own = job is not None and "TLS_VERIFY" in (getattr(job, "settings", None) or {})
    if own and not getattr(job, "may", lambda permission: True)(VERIFY_PERMISSION):
        job = None
    return bool(setting("TLS_VERIFY", job))


@lru_cache(maxsize=8)
def _context(
    bundle: str, only: bool, cert: str, key: str, requests_bundle: str, ssl_cert_file: str
) -> ssl.SSLContext:
    made = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED)
    made.set_alpn_protocols(["http/1.1"])  # as urllib3 offers; the render door relays HTTP/1.1
    if not (only and bundle):  # CA_BUNDLE_ONLY without a bundle would trust nothing at all
        if requests_bundle:
            _trust(made, "REQUESTS_CA_BUNDLE", requests_bundle)
        elif ssl_cert_file:
            _trust(made, "SSL_CERT_FILE", ssl_cert_file)
        else:
            made.load_verify_locations(cafile=certifi.where())
    if bundle:
        _trust(made, "CA_BUNDLE", bundle)
    if cert:
        try:
            made.load_cert_chain(cert, key or None)
        except (OSError, ssl.SSLError) as exc:
            names = f"CLIENT_CERT={cert}" + (f", CLIENT_KEY={key}" if key else "")
            raise Misconfigured(f"{names}: not a usable certificate and key ({exc})") from None
    elif key:
        raise Misconfigured(f"CLIENT_KEY={key} is set without CLIENT_CERT")
    return made


def _trust(made: ssl.SSLContext, name: str, path: str) -> None:
    """Add the certificates of a PEM file, or of every PEM file in a directory."""
    where = Path(path)
    if where.is_dir():
        files = sorted(p for p in where.iterdir() if p.is_file())
    elif where.is_file():
        files = [where]
    else:
        raise Misconfigured(f"{name}={path}: no such file or directory")
    found = 0
    for file in files:
        try:
            data = file.read_bytes()
            if _PEM in data:
                made.load_verify_locations(cadata=data.decode("ascii"))
                found += 1
        except (OSError, UnicodeDecodeError, ssl.SSLError) as exc:
            raise Misconfigured(f"{name}={path}: {file.name} cannot be read ({exc})") from None
    if not found:
        raise Misconfigured(f"{name}={path}: holds no PEM certificate")
