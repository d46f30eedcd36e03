"""A local HTTPS site signed by a certificate authority made for the test, and that authority.

``Authority(directory)`` writes ``ca.pem`` (the CA), ``server.pem`` / ``server.key`` (for
127.0.0.1 and ``localhost``) and ``client.pem`` / ``client.key`` (a client certificate), all
signed by the CA. ``TLSSite(authority)`` serves a tiny site over TLS with the server
certificate (or with another server context, ``tls``); with ``ask_client=True`` it refuses a
client that presents no certificate signed by the CA (mutual TLS). ``pages`` adds paths to
serve, and a WebSocket asked for at ``/socket`` gets one message. Nothing leaves loopback.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.site import send


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


class Authority:
    def __init__(self, directory: Path, name: str = "Test Internal CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.UTC)
        self._window = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1))
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = (
            self._builder(_name(name), _name(name), self.key)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        self.ca = directory / "ca.pem"
        self.ca.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.server = self._issue(
            "server",
            ExtendedKeyUsageOID.SERVER_AUTH,
            [
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ],
        )
        self.client = self._issue("client", ExtendedKeyUsageOID.CLIENT_AUTH, [])

    def _builder(self, subject: x509.Name, issuer: x509.Name, key) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._window[0])
            .not_valid_after(self._window[1])
        )

    def _issue(self, name: str, usage, alt_names: list) -> Path:
        """Write ``name``.pem and ``name``.key, signed by the CA; returns the .pem path."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            self._builder(_name(f"test {name}"), self.cert.subject, key)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        path = self.directory / name
        _write(path, key, builder.sign(self.key, hashes.SHA256()))
        return path.with_suffix(".pem")


WEBSOCKET_MESSAGE = b"hello over wss"
_WEBSOCKET_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455's


class TLSSite:
    """``/`` answers a small page (unless ``pages``, path -> (content type, body), says
    otherwise), ``/socket`` a WebSocket with one message (``socket_delay`` seconds after its
    handshake), anything else 404, over TLS on 127.0.0.1."""

    def __init__(
        self, authority: Authority, ask_client: bool = False,
        pages: dict[str, tuple[str, bytes]] | None = None, tls: ssl.SSLContext | None = None,
        socket_delay: float = 0.0,
    ) -> None:  # fmt: skip
        if tls is None:
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            tls.load_cert_chain(authority.server, authority.server.with_suffix(".key"))
        if ask_client:
            tls.verify_mode = ssl.CERT_REQUIRED
            tls.load_verify_locations(cafile=authority.ca)
        self.requests: list[str] = []
        pages = {
            "/": ("text/html", b"<html><head><title>Intranet</title></head><body>hi</body></html>"),
            **(pages or {}),
        }

        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def setup(self) -> None:
                """The handshake first. A refused one (TLS 1.3: the client has already sent its
                request) is followed by reading what the client sent until it hangs up, so
                that closing does not reset the connection before the client read the alert."""
                try:
                    self.request.do_handshake()
                except (ssl.SSLError, OSError):
                    try:
                        self.request.settimeout(2)
                        self.request.shutdown(socket.SHUT_WR)
                        while self.request.recv(65536):
                            pass
                    except OSError:
                        pass
                    raise
                super().setup()

            def do_GET(self) -> None:
                site.requests.append(self.path)
                upgrade = self.headers.get("Upgrade", "").lower()
                if self.path == "/socket" and upgrade == "websocket":
                    self._websocket()
                elif self.path in pages:
                    kind, body = pages[self.path]
                    send(self, 200, {"Content-Type": kind}, body)
                else:
                    send(self, 404, {"Content-Type": "text/plain"}, b"not found")

            def _websocket(self) -> None:
                """RFC 6455's handshake, one text message and a close frame."""
                key = self.headers["Sec-WebSocket-Key"].encode()
                digest = hashlib.sha1(key + _WEBSOCKET_GUID, usedforsecurity=False).digest()
                accept = base64.b64encode(digest).decode()
                self.send_response(101)
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                self.send_header("Sec-WebSocket-Accept", accept)
                self.end_headers()
                self.wfile.flush()
                time.sleep(socket_delay)
                frame = bytes([0x81, len(WEBSOCKET_MESSAGE)]) + WEBSOCKET_MESSAGE
                self.wfile.write(frame + b"\x88\x00")
                self.wfile.flush()
                self.close_connection = True

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self):
                sock, address = super().get_request()
                return tls.wrap_socket(
                    sock, server_side=True, do_handshake_on_connect=False
                ), address

            def handle_error(self, request, client_address) -> None:
                pass  # clients the test expects to fail (no CA, no certificate) hang up

        self.server = Server(("127.0.0.1", 0), Handler)

    def url(self, path: str = "/") -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}{path}"

    def __enter__(self) -> TLSSite:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
