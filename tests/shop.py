"""A small shop on 127.0.0.1 for the spider tests, counting what it serves.

``/login`` shows a form with a CSRF token (tied to a ``csrftoken`` cookie); posting the right
user, password and token sets a ``session`` cookie and redirects (303) to ``/account``.
Everything else needs that session (without it: 403): listing pages ``/catalog/1`` ..
``/catalog/{listings}`` (``PER_LISTING`` product links each and a ``next`` link), product pages
``/product/{id}``, a JSON API ``/api/stock?page=N`` (``{"results": [...], "next": URL}``,
``PER_API_PAGE`` a page) and ``POST /search`` (form ``q``). ``delay``: seconds each answer
waits (to have pages in flight when a test kills a worker). Some products are broken: one
without a price, one with a negative price, one without its SKU, one named ``Boom``.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import Counter
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from tests.site import LocalSite, send

USER, PASSWORD = "alice", "s3cret"
LISTINGS, PER_LISTING, PER_API_PAGE = 3, 4, 5
NO_PRICE, NEGATIVE_PRICE, NO_SKU, BOOM = 7, 8, 9, 10


def price_of(i: int) -> str:
    if i == NO_PRICE:
        return "call us"
    if i == NEGATIVE_PRICE:
        return "$-3.00"
    return f"$ {i * 10 + 0.5:.2f}"


def name_of(i: int) -> str:
    return "Boom" if i == BOOM else f"Product {i}"


def products(listings: int = LISTINGS) -> range:
    return range(1, listings * PER_LISTING + 1)


def expected_products(listings: int = LISTINGS) -> list[dict]:
    """The product items a correct spider keeps, after its cleaning pipeline."""
    broken = {NO_PRICE, NEGATIVE_PRICE, NO_SKU, BOOM}
    return [{"kind": "product", "sku": f"SKU-{i:04d}", "name": name_of(i),
             "price": i * 10 + 0.5, "listing": (i - 1) // PER_LISTING + 1}
            for i in products(listings) if i not in broken]  # fmt: skip


def expected_stock(listings: int = LISTINGS) -> list[dict]:
    return [{"kind": "stock", "sku": f"SKU-{i:04d}", "stock": i % 4} for i in products(listings)]


class Shop(LocalSite):
    def __init__(self, listings: int = LISTINGS, delay: float = 0.0) -> None:
        self.listings, self.products, self.delay = listings, products(listings), delay
        self.hits: Counter[str] = Counter()  # "METHOD path?query"
        self.bodies: list[bytes] = []  # POST bodies of /search, in order
        self.sessions: set[str] = set()
        self.tokens: set[str] = set()
        self._lock = threading.Lock()
        super().__init__(self._handler())

    def _handler(self):
        shop = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _cookies(self) -> dict[str, str]:
                jar = SimpleCookie(self.headers.get("Cookie", ""))
                return {k: v.value for k, v in jar.items()}

            def _count(self) -> None:
                with shop._lock:
                    shop.hits[f"{self.command} {self.path}"] += 1
                if shop.delay:
                    time.sleep(shop.delay)

            def do_GET(self) -> None:
                self._count()
                parts = urlsplit(self.path)
                path, query = parts.path, parse_qs(parts.query)
                if path == "/robots.txt":
                    return send(self, 200, {"Content-Type": "text/plain"}, b"User-agent: *\n")
                if path == "/login":
                    token = secrets.token_hex(8)
                    with shop._lock:
                        shop.tokens.add(token)
                    body = (f'<html><head><title>Log in</title></head><body><form id="login" '
                            f'method="post" action="/login"><input type="hidden" name="csrf" '
                            f'value="{token}"><input name="username"><input type="password" '
                            f'name="password"><button type="submit">Log in</button></form>'
                            f"</body></html>").encode()  # fmt: skip
                    return send(self, 200, {"Set-Cookie": f"csrftoken={token}; Path=/"}, body)
                known = ("/account", "/catalog/", "/product/", "/api/stock")
                if not path.startswith(known):
                    return send(self, 404, {}, b"<html><title>Not found</title></html>")
                if self._cookies().get("session") not in shop.sessions:
                    return send(self, 403, {}, b"<html><title>Log in first</title></html>")
                if path == "/account":
                    return send(self, 200, {}, b'<html><title>Account</title><a id="shop" '
                                               b'href="/catalog/1">Shop</a></html>')  # fmt: skip
                if path.startswith("/catalog/"):
                    return self._listing(int(path.rsplit("/", 1)[1]))
                if path.startswith("/product/"):
                    return self._product(int(path.rsplit("/", 1)[1]))
                if path == "/api/stock":
                    return self._api(int(query.get("page", ["1"])[0]))
                send(self, 404, {}, b"<html><title>Not found</title></html>")

            def do_POST(self) -> None:
                self._count()
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                one = {k: v[0] for k, v in form.items()}
                if self.path == "/login":
                    token = self._cookies().get("csrftoken")
                    good = (one.get("username"), one.get("password")) == (USER, PASSWORD)
                    if (
                        not good
                        or not token
                        or one.get("csrf") != token
                        or token not in shop.tokens
                    ):
                        return send(self, 403, {}, b"<html><title>Refused</title></html>")
                    session = secrets.token_hex(8)
                    with shop._lock:
                        shop.sessions.add(session)
                    return send(
                        self,
                        303,
                        {"Location": "/account", "Set-Cookie": f"session={session}; Path=/"},
                        b"",
                    )
                if self.path == "/search":
                    if self._cookies().get("session") not in shop.sessions:
                        return send(self, 403, {}, b"")
                    with shop._lock:
                        shop.bodies.append(json.dumps(one).encode())
                    body = json.dumps({"q": one.get("q", ""), "hits": len(one.get("q", ""))})
                    return send(self, 200, {"Content-Type": "application/json"}, body.encode())
                send(self, 404, {}, b"")

            def _listing(self, n: int) -> None:
                if not 1 <= n <= shop.listings:
                    return send(self, 404, {}, b"")
                first = (n - 1) * PER_LISTING + 1
                links = "".join(f'<li><a class="product" href="/product/{i}">{name_of(i)}</a></li>'
                                for i in range(first, first + PER_LISTING))  # fmt: skip
                last = n >= shop.listings
                nxt = "" if last else f'<a rel="next" href="/catalog/{n + 1}">next</a>'
                body = f"<html><title>Catalog {n}</title><ul>{links}</ul>{nxt}</html>"
                send(self, 200, {}, body.encode())

            def _product(self, i: int) -> None:
                if i not in shop.products:
                    return send(self, 404, {}, b"")
                sku = "" if i == NO_SKU else f'<span class="sku">SKU-{i:04d}</span>'
                body = (
                    f"<html><head><title>{name_of(i)}</title></head><body><h1>{name_of(i)}"
                    f'</h1>{sku}<p class="price">{price_of(i)}</p></body></html>'
                )
                send(self, 200, {}, body.encode())

            def _api(self, page: int) -> None:
                ids = list(shop.products)[(page - 1) * PER_API_PAGE : page * PER_API_PAGE]
                more = page * PER_API_PAGE < len(shop.products)
                data = {"results": [{"sku": f"SKU-{i:04d}", "stock": i % 4} for i in ids],
                        "next": f"/api/stock?page={page + 1}" if more else None}  # fmt: skip
                send(self, 200, {"Content-Type": "application/json"}, json.dumps(data).encode())

        return Handler
