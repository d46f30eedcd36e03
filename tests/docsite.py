"""A documentation site on 127.0.0.1, laid out as Sphinx lays one out, for the CrawlSpider
tests: many links a page, most of them to pages already seen.

``/`` (the table of contents) links to every topic ``/topics/<name>.html``, to the API index
``/api/`` and the general index ``/genindex.html`` (links to every page's anchors), to
``/search.html``, to ``/faq.html`` (``rel="nofollow"``) and to ``/stable/intro.html``
(a 301 to ``/topics/intro.html``). Every topic and API page has a header (home, topics, API,
index, this page in the old version ``/v1/...``), a ``div.sidebar`` with every topic and every
API module, a ``div.body`` with its sections (``#section-k`` anchors), cross references to
other topics and to API functions (with fragments), "Show source" (``/_sources/...rst.txt``,
text), a stylesheet and an image, prev/next links, and a footer off the site (an
``.invalid`` host, ``mailto:``, ``javascript:``). ``/topics/draft-<name>.html`` pages are
linked from one topic each; ``/topics/removed.html`` (linked from ``intro``) answers 404.
``/v1/`` pages link to each other and back to the current version. ``hits[path]`` counts the
requests served.
"""

from __future__ import annotations

import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler

from tests.site import LocalSite, send

TOPICS = ["intro", "install", "tutorial", "spiders", "selectors", "items", "loaders", "shell",
          "pipelines", "feeds", "requests", "links", "settings", "exceptions", "logging",
          "stats", "signals", "scheduler", "architecture", "deploy", "jobs", "coroutines",
          "asyncio", "faq-topic"]  # fmt: skip
MODULES = ["spider", "request", "response", "item", "loader", "linkextractor", "settings",
           "signals", "pipeline", "exporter", "internal", "deprecated-api"]  # fmt: skip
DRAFTS = {"selectors": "draft-xpath", "feeds": "draft-s3", "deploy": "draft-k8s"}


def _title(name: str) -> str:
    return name.replace("-", " ").capitalize()


class DocsSite(LocalSite):
    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self._lock = threading.Lock()
        super().__init__(self._handler())

    def expected_pages(self) -> set[str]:
        """Every HTML page a crawl from ``/`` that follows every link fetches (after
        redirects): the ones that answer 200."""
        paths = ["/", "/api/", "/genindex.html", "/search.html", "/faq.html"]
        paths += [f"/topics/{t}.html" for t in TOPICS]
        paths += [f"/topics/{d}.html" for d in DRAFTS.values()]
        paths += [f"/api/{m}.html" for m in MODULES]
        paths += [f"/v1/topics/{t}.html" for t in TOPICS] + [f"/v1/api/{m}.html" for m in MODULES]
        return {self.url(p) for p in paths}

    def page(self, path: str) -> tuple[int, str, str]:
        """The status, content type and body of ``path``."""
        html = "text/html; charset=utf-8"
        kind, _, name = path.strip("/").partition("/")
        if path == "/":
            return 200, html, self._index()
        if path == "/stable/intro.html":
            return 301, html, ""
        if path in ("/genindex.html", "/search.html", "/faq.html", "/api/"):
            return 200, html, self._listing(path)
        if kind == "_sources":
            return 200, "text/plain; charset=utf-8", f"{name}\n{'=' * len(name)}\n\nSource."
        if kind in ("topics", "api") and name.endswith(".html"):
            stem = name.removesuffix(".html")
            known = TOPICS + list(DRAFTS.values()) if kind == "topics" else MODULES
            if stem in known:
                return 200, html, self._page(kind, stem)
        if kind == "v1":
            old_kind, _, old = name.partition("/")
            stem = old.removesuffix(".html")
            if stem in (TOPICS if old_kind == "topics" else MODULES):
                return 200, html, self._old(old_kind, stem)
        return 404, html, "<html><head><title>Not found</title></head><body></body></html>"

    def _header(self, here: str) -> str:
        return (f'<nav class="top"><a href="/">Docs home</a> <a href="/topics/intro.html">Topics'
                f'</a> <a href="/api/">API</a> <a href="/genindex.html">Index</a> '
                f'<a href="/v1{here}">v1</a> <a href="/search.html">Search</a></nav>')  # fmt: skip

    def _sidebar(self) -> str:
        topics = "".join(f'<li><a href="/topics/{t}.html">{_title(t)}</a></li>' for t in TOPICS)
        apis = "".join(f'<li><a class="api" href="/api/{m}.html">{m}</a></li>' for m in MODULES)
        return f'<div class="sidebar"><ul>{topics}</ul><ul>{apis}</ul></div>'

    def _footer(self, here: str) -> str:
        return (f'<footer><a href="https://github.invalid/docs/edit{here}">Edit</a> '
                '<a href="mailto:docs@example.com">Mail</a> <a href="javascript:void(0)">Top</a>'
                ' <a href="/_static/pygments.css">css</a></footer>')  # fmt: skip

    def _doc(self, title: str, here: str, body: str) -> str:
        return (f"<!doctype html><html><head><meta charset=utf-8><title>{title} — Docs</title>"
                f'<link rel="stylesheet" href="/_static/basic.css"></head><body>'
                f"{self._header(here)}{self._sidebar()}<div class=\"body\">{body}</div>"
                f"{self._footer(here)}</body></html>")  # fmt: skip

    def _page(self, kind: str, stem: str) -> str:
        here = f"/{kind}/{stem}.html"
        order = TOPICS if kind == "topics" else MODULES
        i = order.index(stem) if stem in order else 0
        sections = "".join(
            f'<h2 id="section-{k}">Part {k}<a class="headerlink" href="#section-{k}">¶</a></h2>'
            f"<p>Words of part {k} of {stem}, as many as a page of docs has in it.</p>"
            for k in range(3))  # fmt: skip
        refs = ""
        for k in range(1, 5):
            other = TOPICS[(i * k + 3) % len(TOPICS)]
            anchor = "#section-1" if k % 2 else ""
            refs += (
                f'<a class="reference" href="../topics/{other}.html{anchor}">{_title(other)}</a> '
            )
        for k in range(2):
            module = MODULES[(i + k) % len(MODULES)]
            refs += f'<a href="/api/{module}.html#{stem}.f{k}"><code>f{k}</code></a> '
        if stem in DRAFTS:
            refs += f'<a href="{DRAFTS[stem]}.html">Draft</a> '
        if stem == "intro":
            refs += '<a href="removed.html">Removed</a> '
        prev_next = "".join(
            f'<a class="{rel}" href="/{kind}/{order[j]}.html">{rel}</a> '
            for rel, j in (("prev", i - 1), ("next", i + 1)) if 0 <= j < len(order))  # fmt: skip
        body = (f'<h1 id="top">{_title(stem)}</h1>{sections}<p class="refs">{refs}</p>'
                f'<img src="/_images/{stem}.png"><a href="/_images/{stem}.png">figure</a> '
                f'<a href="/_sources/{kind}/{stem}.rst.txt">Show source</a>'
                f'<div class="related">{prev_next}</div>')  # fmt: skip
        return self._doc(_title(stem), here, body)

    def _index(self) -> str:
        toc = "".join(f'<li><a href="topics/{t}.html">{_title(t)}</a></li>' for t in TOPICS)
        body = (
            f'<h1>Documentation</h1><ul class="toctree">{toc}</ul>'
            '<a href="api/">API reference</a> <a href="genindex.html">Index</a> '
            '<a href="faq.html" rel="nofollow">FAQ</a> <a href="stable/intro.html">Stable</a>'
        )
        return self._doc("Docs home", "/index.html", body)

    def _listing(self, path: str) -> str:
        if path == "/api/":
            items = "".join(f'<li><a href="{m}.html">{m}</a></li>' for m in MODULES)
            return self._doc("API reference", path, f"<h1>API</h1><ul>{items}</ul>")
        if path == "/genindex.html":
            items = "".join(f'<a href="/topics/{t}.html#section-{k}">{t} {k}</a> '
                            for t in TOPICS for k in range(3))  # fmt: skip
            items += "".join(f'<a href="/api/{m}.html#{m}.f0">{m}</a> ' for m in MODULES)
            return self._doc("Index", path, f"<h1>Index</h1><p>{items}</p>")
        if path == "/faq.html":
            return self._doc("FAQ", path, "<h1>FAQ</h1><p>Questions, answered.</p>")
        return self._doc("Search", path, '<form action="/search.html"><input name="q"></form>')

    def _old(self, kind: str, stem: str) -> str:
        order = TOPICS if kind == "topics" else MODULES
        others = "".join(f'<a href="/v1/{kind}/{o}.html">{o}</a> ' for o in order)
        return (
            f"<html><head><title>{_title(stem)} (v1)</title></head><body>{others}"
            f'<a href="/{kind}/{stem}.html">current version</a></body></html>'
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.partition("?")[0]
                with site._lock:
                    site.hits[path] += 1
                status, kind, body = site.page(path)
                headers = {"Content-Type": kind}
                if status == 301:
                    headers["Location"] = "/topics/intro.html"
                send(self, status, headers, body.encode())

        return Handler
