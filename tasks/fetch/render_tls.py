"""TLS in the render step's door (``render_proxy.py``): the browser's HTTPS and wss tunnels end at
the door, and the door's own connection to the site trusts what the fetcher trusts.

Reads ``CA_BUNDLE``, ``CA_BUNDLE_ONLY``, ``CLIENT_CERT``, ``CLIENT_KEY`` and the environment's
``REQUESTS_CA_BUNDLE`` / ``SSL_CERT_FILE`` through ``trust.context``; whether to check at all
(the job's ``TLS_VERIFY``, ``trust.verifies``) comes from the caller.

Inside a ``CONNECT`` tunnel Chromium would do TLS itself, against its own trust store, which
knows nothing of those settings. So the door answers the browser's handshake with a certificate
for the tunnel's host that it mints (:class:`Interception`), and makes the TLS connection to the
site with the fetcher's SSL context: the site's certificate is checked and its name matched
there, the client certificate is presented there, and a failure is the fetcher's ``tls`` outcome
with the fetcher's message. Then the plaintext is relayed between the two (:class:`TLSEnd`).

Every certificate minted in a process carries the same key pair, made when the process first
renders and held in its memory only (a file that holds it lives while it is loaded into an SSL
context). The browser is launched with ``--ignore-certificate-errors-spki-list`` naming that
key alone (:attr:`Interception.spki`): it accepts those certificates, and no other that its
own store does not trust, so certificate checks stay on everywhere; the key leaves nothing but
the door's own loopback connections open to whoever holds it. Both sides offer HTTP/1.1 only
(ALPN), so the browser and the site speak the protocol the relay carries unchanged.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import os
import socket
import ssl
import tempfile
import threading
import time
from collections import OrderedDict
from functools import lru_cache
from typing import NoReturn

from urllib3.util.ssl_ import create_urllib3_context

from tasks.fetch import trust

ALPN = ["http/1.1"]  # what both sides of a tunnel are offered: the relay carries HTTP/1.1 as is
MINTED_KEPT = 256  # hosts whose minted certificate (an SSL context each) a process keeps
MINTED_FOR_S = 24 * 3600  # a minted certificate is used this long, then minted anew
_VALID_S = 7 * 24 * 3600  # a minted certificate's validity (well past its use)
_RECORD = 65536  # bytes read from a socket at once


class Interception:
    """One render process's key pair, and the certificates minted with it, one per host.
    (``cryptography`` is imported here, by the render step only: every crawl worker imports
    this module, and ``cryptography.x509`` takes about 50 ms to import.)"""

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric import ec

        self._key = ec.generate_private_key(ec.SECP256R1())
        self._lock = threading.Lock()
        self._minted: OrderedDict[str, tuple[float, ssl.SSLContext]] = OrderedDict()

    @property
    def spki(self) -> str:
        """The key's SubjectPublicKeyInfo, hashed (SHA-256) and base64-encoded: what the
        browser's ``--ignore-certificate-errors-spki-list`` takes."""
        from cryptography.hazmat.primitives import serialization

        der = self._key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return base64.b64encode(hashlib.sha256(der).digest()).decode("ascii")

    def for_browser(self, host: str) -> ssl.SSLContext:
        """The server-side context that shows the browser a certificate for ``host``."""
        now = time.monotonic()
        with self._lock:
            made = self._minted.get(host)
            if made is not None and now - made[0] < MINTED_FOR_S:
                self._minted.move_to_end(host)
                return made[1]
        context = self._mint(host)
        with self._lock:
            self._minted[host] = (now, context)
            self._minted.move_to_end(host)
            while len(self._minted) > MINTED_KEPT:
                self._minted.popitem(last=False)
        return context

    def _mint(self, host: str) -> ssl.SSLContext:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        try:
            alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alt = x509.DNSName(host)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "crawlplatform render door")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(seconds=_VALID_S))
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(ALPN)
        pem = cert.public_bytes(serialization.Encoding.PEM) + self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        handle, path = tempfile.mkstemp(prefix="render-door-", suffix=".pem")  # mode 0600
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(pem)
            context.load_cert_chain(path)  # the ssl module loads a key from a file only
        finally:
            os.unlink(path)
        return context


def for_site(verify: bool) -> ssl.SSLContext:
    """The client-side context for a site: the fetcher's (``trust.context``; raises
    ``trust.Misconfigured``), or, for a job that checks no certificate, the fetcher's unchecked
    one (which presents no client certificate either, as the fetcher's does not)."""
    return trust.context() if verify else _unchecked()


@lru_cache(maxsize=1)
def _unchecked() -> ssl.SSLContext:
    context = create_urllib3_context(cert_reqs=ssl.CERT_NONE)
    context.set_alpn_protocols(ALPN)
    return context


def receive(sock: socket.socket) -> bytes:
    """What ``sock`` has for us now (b'' once it closed). From a TLS socket (an HTTPS proxy's),
    all that was decrypted: none of it may wait inside OpenSSL where ``select`` cannot see it."""
    data = sock.recv(_RECORD)
    while data and isinstance(sock, ssl.SSLSocket) and sock.pending():
        data += sock.recv(sock.pending())
    return data


class TLSEnd:
    """One side of a relayed TLS connection over ``sock``, its records handled in memory, so
    that a readable socket is the only sign of data (a TLS 1.3 ticket that carries none does
    not block the relay) and nothing waits unseen. ``received``: bytes of the peer's handshake
    already read from ``sock``."""

    def __init__(
        self,
        sock: socket.socket,
        context: ssl.SSLContext,
        *,
        server_hostname: str | None = None,
        received: bytes = b"",
    ) -> None:
        self.sock = sock
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._in, self._out, server_side=server_hostname is None,
            server_hostname=server_hostname,
        )  # fmt: skip
        self._in.write(received)
        self.failure: ssl.SSLError | None = None  # what ended this side, if TLS did

    def fileno(self) -> int:
        return self.sock.fileno()

    def handshake(self) -> None:
        """Complete the handshake (``ssl.SSLError`` if it fails; the peer is told why)."""
        while True:
            try:
                self._tls.do_handshake()
            except ssl.SSLWantReadError:
                self._flush()
                self._feed()
                continue
            except ssl.SSLError as exc:
                self._fail(exc)
            self._flush()
            return

    def read(self) -> bytes | None:
        """The plaintext of what arrived (b'' if it held none), None once the peer closed."""
        if not self._feed(eof_ok=True):
            return None
        plain = b""
        while True:
            try:
                chunk = self._tls.read(_RECORD)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                return plain or None
            except ssl.SSLError as exc:
                self._fail(exc)
            if not chunk:
                return plain or None
            plain += chunk
        self._flush()  # a key update's answer, if the peer asked for one
        return plain

    def pending(self) -> bytes:
        """Plaintext that arrived with the handshake (a request sent with its last message)."""
        plain = b""
        while True:
            try:
                chunk = self._tls.read(_RECORD)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                return plain
            except ssl.SSLError as exc:
                self._fail(exc)
            if not chunk:
                return plain
            plain += chunk

    def sendall(self, data: bytes) -> None:
        self._tls.write(data)
        self._flush()

    def _feed(self, eof_ok: bool = False) -> bool:
        data = receive(self.sock)
        if not data:
            if eof_ok:
                return False
            raise ConnectionError("closed during the TLS handshake")
        self._in.write(data)
        return True

    def _flush(self) -> None:
        if self._out.pending:
            self.sock.sendall(self._out.read())

    def _fail(self, exc: ssl.SSLError) -> NoReturn:
        self.failure = exc
        try:
            self._flush()  # the alert, so the peer knows why
        except OSError:
            pass
        raise exc
