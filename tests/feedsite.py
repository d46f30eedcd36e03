"""A local site of sitemaps and feeds on 127.0.0.1, served as sites serve them, for the
sitemap and feed spiders' tests.

Sitemaps: ``/robots.txt`` names ``/sitemap_index.xml`` (a relative ``Sitemap:`` line) and
``/sitemaps/extra.xml`` (an absolute one, in capitals). The index lists gzip children
(``application/x-gzip``, ``application/gzip``; one with a byte order mark inside), a plain
one with ``xhtml:link`` alternates (``text/xml``), a plain one sent gzip-encoded on the way
(``Content-Encoding``) at a ``.xml.gz`` URL, one sent as ``application/octet-stream`` at a
URL without extension, an archive that ``sitemap_follow`` leaves out, and broken ones: one cut
off mid-way, one that is no XML, one that is empty, an HTML page, and a gzip that unpacks past
``CAP_BYTES``. ``/sitemaps/news.xml`` has ``lastmod`` dates.
Every URL they list is an HTML page with its path as its title (``/product/N``, ``/blog/...``,
``/fr/blog/...``, ...).

Feeds: RSS with namespaces and a byte order mark (``/feeds/rss.xml``), RSS in ISO-8859-1
declared only in the XML (``/feeds/latin.xml``), RSS as ``application/octet-stream``
(``/feeds/octet.xml``), Atom (``/feeds/atom.xml``, and as ``application/octet-stream``
``/feeds/atom-octet.xml``), an HTML listing of unclosed ``<li>``
(``/feeds/listing.html``) and CSV files (``/csv/...``): headers in the file, quoted fields
with newlines, a row of the wrong length, ISO-8859-1 declared and cp1252 undeclared, a
semicolon file with ``'`` quotes and no header row.
"""

from __future__ import annotations

import gzip
from collections import Counter
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from tests.site import LocalSite, send

CAP_BYTES = 200_000  # DOWNLOAD_MAXSIZE of the spider that meets the big gzip
BIG_ENTRIES = 4000  # /sitemaps/products-big.xml.gz unpacks to more than CAP_BYTES
SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
BOM = b"\xef\xbb\xbf"


def urlset(base: str, paths: list[str], extra: str = "") -> bytes:
    entries = "".join(f"<url><loc>{base}{p}</loc>{extra}</url>\n" for p in paths)
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SITEMAP_NS}">\n{entries}'
            "</urlset>\n").encode()  # fmt: skip


def page(path: str) -> bytes:
    lang = path.split("/")[1] if path.startswith(("/fr/", "/de/")) else "en"
    return (f'<!doctype html><html lang="{lang}"><head><title>{path}</title></head>'
            f"<body><h1>{path}</h1></body></html>").encode()  # fmt: skip


class FeedSite(LocalSite):
    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        super().__init__(self._handler())
        self.routes: dict[str, tuple[dict[str, str], bytes]] = {}
        self._sitemaps()
        self._feeds()
        self._csv()

    def _add(self, path: str, content_type: str, body: bytes, **headers: str) -> None:
        self.routes[path] = ({"Content-Type": content_type, **headers}, body)

    def _sitemaps(self) -> None:
        b = self.base
        self._add("/robots.txt", "text/plain", (
            "User-agent: *\nDisallow:\n\n# Sitemap: /commented-out.xml\n"
            f"Sitemap: /sitemap_index.xml\nSITEMAP: {b}/sitemaps/extra.xml\n"
        ).encode())  # fmt: skip
        children = ["products-1.xml.gz", "products-2.xml.gz", "blog.xml", "blog-de.xml.gz",
                    "products-octet", "archive-2019.xml", "products-big.xml.gz",
                    "products-cut.xml", "products-garbage.xml", "products-empty.xml",
                    "products-html"]  # fmt: skip
        index = "".join(f"<sitemap><loc>{b}/sitemaps/{c}</loc><lastmod>2024-0{n % 9 + 1}-01"
                        "</lastmod></sitemap>\n" for n, c in enumerate(children))  # fmt: skip
        self._add("/sitemap_index.xml", "application/xml", (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="{SITEMAP_NS}">\n'
            f"{index}<sitemap><loc>  </loc></sitemap>\n</sitemapindex>\n").encode())  # fmt: skip
        first = [f"/product/{i}" for i in range(1, 21)] + ["/product/special-3"]
        self._add("/sitemaps/products-1.xml.gz", "application/x-gzip",
                  gzip.compress(urlset(b, first, "<lastmod>2024-01-01</lastmod>"), mtime=0))
        second = BOM + urlset(b, [f"/product/{i}" for i in range(21, 41)])
        self._add("/sitemaps/products-2.xml.gz", "application/gzip", gzip.compress(second, mtime=0))
        alternates = "".join(
            f'<url><loc>{b}/blog/post-{i}</loc>'
            f'<xhtml:link rel="alternate" hreflang="fr" href="{b}/fr/blog/post-{i}"/>'
            f'<xhtml:link rel="alternate" hreflang="de" href="{b}/de/blog/post-{i}"/></url>\n'
            for i in range(1, 6))  # fmt: skip
        self._add("/sitemaps/blog.xml", "text/xml; charset=utf-8", (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SITEMAP_NS}" '
            f'xmlns:xhtml="http://www.w3.org/1999/xhtml">\n{alternates}</urlset>\n').encode())
        self._add("/sitemaps/blog-de.xml.gz", "application/octet-stream",
                  gzip.compress(urlset(b, ["/blog/post-6", "/blog/post-7"]), mtime=0),
                  **{"Content-Encoding": "gzip"})  # fmt: skip
        self._add("/sitemaps/products-octet", "application/octet-stream",
                  urlset(b, [f"/product/{i}" for i in range(41, 46)]))
        self._add("/sitemaps/archive-2019.xml", "application/xml",
                  urlset(b, [f"/product/archived-{i}" for i in range(5)]))
        big = urlset(b, [f"/product/big-{i:05d}-{'x' * 20}" for i in range(BIG_ENTRIES)])
        assert len(big) > CAP_BYTES
        self._add("/sitemaps/products-big.xml.gz", "application/octet-stream",
                  gzip.compress(big, mtime=0))
        cut = urlset(b, ["/product/cut-1", "/product/cut-2", "/product/cut-3"])
        self._add("/sitemaps/products-cut.xml", "application/xml", cut[: cut.index(b"cut-3")])
        self._add("/sitemaps/products-garbage.xml", "application/xml", b"<<< no sitemap >>>")
        self._add("/sitemaps/products-empty.xml", "application/xml", b"")
        self._add("/sitemaps/products-html", "text/html", page("/sitemaps/products-html"))
        self._add("/sitemaps/extra.xml", "application/xml", urlset(b, ["/page/about"]).replace(
            b"</urlset>", b"<url><lastmod>2024-01-01</lastmod></url></urlset>"))  # fmt: skip
        news = "".join(f"<url><loc>{b}/news/{year}-{i}</loc><lastmod>{year}-0{i}-1{i}</lastmod>"
                       "</url>\n" for year in (2003, 2005, 2011) for i in (1, 2))  # fmt: skip
        self._add("/sitemaps/news.xml", "text/plain", BOM + (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SITEMAP_NS}">\n{news}'
            "</urlset>\n").encode())  # fmt: skip

    def _feeds(self) -> None:
        b = self.base
        items = "".join(
            f"<item><title>Story {i} &amp; more</title><link>{b}/story/{i}</link>"
            f'<guid isPermaLink="false">tag:{i}</guid><dc:creator>Author {i % 3}</dc:creator>'
            f"<category>c{i % 2}</category><category>all</category>"
            f"<content:encoded><![CDATA[<p>Body {i}&nbsp;<b>bold</b></p>]]></content:encoded>"
            f'<media:thumbnail url="{b}/img/{i}.jpg"/><description>Café {i}</description>'
            "</item>\n" for i in range(1, 9))  # fmt: skip
        rss = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0" '
            'xmlns:dc="http://purl.org/dc/elements/1.1/" '
            'xmlns:content="http://purl.org/rss/1.0/modules/content/" '
            'xmlns:media="http://search.yahoo.com/mrss/">\n<channel><title>News</title>\n'
            f"{items}</channel></rss>\n")  # fmt: skip
        self._add("/feeds/rss.xml", "application/rss+xml", BOM + rss.encode())
        self._add("/feeds/octet.xml", "application/octet-stream",
                  rss.replace("Story", "Octet story").encode())
        latin = ('<?xml version="1.0" encoding="ISO-8859-1"?>\n<rss version="2.0"><channel>'
                 "<item><title>Über café</title><description>naïve à la carte</description>"
                 "</item><item><title>Señor</title></item></channel></rss>\n")  # fmt: skip
        self._add("/feeds/latin.xml", "text/xml", latin.encode("iso-8859-1"))
        entries = "".join(
            f"<entry><title>Entry {i}</title><link href=\"{b}/entry/{i}\"/><id>urn:e:{i}</id>"
            f"<author><name>Writer {i}</name></author><updated>2024-01-0{i}T00:00:00Z</updated>"
            "</entry>\n" for i in range(1, 6))  # fmt: skip
        atom = ('<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom">'
                f"<title>Atom</title>\n{entries}</feed>\n")  # fmt: skip
        self._add("/feeds/atom.xml", "application/atom+xml", atom.encode())
        self._add("/feeds/atom-octet.xml", "application/octet-stream",
                  atom.replace("Entry", "Octet entry").encode())
        listing = "".join(f'<li class="deal"><b>Deal {i}</b> <span class=price>{i}.99</span>'
                          f'<a href="/deal/{i}">more</a>\n' for i in range(1, 7))  # fmt: skip
        self._add("/feeds/listing.html", "text/html; charset=utf-8", (
            f"<html><head><title>Deals</title><body><h1>Deals<ul>{listing}</ul>"
            "<p>No more deals</body>").encode())  # fmt: skip
        for path in ("/story/1", "/story/2", "/story/3"):
            self._add(path, "text/html", page(path))

    def _csv(self) -> None:
        products = ('id,name,description,price\r\n1,Chair,"A chair, wooden",10\r\n'
                    '2,Table,"Two lines:\nsecond ""quoted"" line",20\r\n'
                    "3,Lamp,too,many,fields\r\n4,Ünïcode,plain,40\r\n")  # fmt: skip
        self._add("/csv/products.csv", "text/csv; charset=utf-8", products.encode())
        self._add("/csv/products-octet.csv", "application/octet-stream",
                  products.replace("Chair", "Stool").encode())
        latin = "id,name,description,price\n5,Crème brûlée,dessert,5\n6,Jalapeño,hot,6\n"
        self._add("/csv/latin.csv", "text/csv; charset=iso-8859-1", latin.encode("iso-8859-1"))
        guessed = ("id,name,description,price\n7,Naïve café,“quoted” in cp1252 — long dash,7\n"
                   "8,Façade,€ 8,8\n")  # fmt: skip
        self._add("/csv/cp1252.csv", "text/csv", guessed.encode("cp1252"))
        semicolon = ("1;'Deck chair';'folds; flat'\n2;'Rug';'line one\nline two'\n"
                     "3;'Vase';'it''s blue'\n")  # fmt: skip
        self._add("/csv/semicolon.csv", "text/csv", semicolon.encode())

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                site.hits[path] += 1
                found = site.routes.get(path)
                if found is None and path.startswith(("/product/", "/blog/", "/fr/", "/de/",
                                                      "/page/", "/news/")):  # fmt: skip
                    found = ({}, page(path))
                if found is None:
                    send(self, 404, {}, b"<html><title>Not found</title></html>")
                    return
                headers, body = found
                send(self, 200, headers, body)

        return Handler
