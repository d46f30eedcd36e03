"""Porting a Scrapy spider: every Scrapy name and setting has a verdict (``porting.py``,
``scrapysettings.py``) and docs/spiders.md shows the same tables; a refused name's import
fails with its sentence, and so does a job whose spider imports one, or whose
``custom_settings`` hold a refused setting, at its start; ``Selector(response)`` selects what
Scrapy 2.19's selects on the same body."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import crawlplatform.spiders as api
from crawlplatform.spiders import porting, scrapysettings
from tasks.content import spiders
from tasks.frontier import jobs
from tests.twins import port
from web.models import JobState

DOCS = Path(__file__).resolve().parent.parent / "docs" / "spiders.md"

REFUSED = [(path, row.why) for row in porting.NAMES if row.verdict == porting.REFUSED
           for path in row.paths]  # fmt: skip
IMPORTABLE = [path for row in porting.NAMES if row.verdict != porting.REFUSED
              for path in row.paths]  # fmt: skip


def bare(path: str) -> str:
    return path.rpartition(".")[2]


@pytest.mark.parametrize("path, why", REFUSED, ids=[path for path, _ in REFUSED])
def test_a_refused_name_fails_its_import_with_its_sentence(path, why):
    with pytest.raises(ImportError) as raised:  # what `from crawlplatform.spiders import X` does
        __import__("crawlplatform.spiders", fromlist=[bare(path)])
    assert why in str(raised.value) and path in str(raised.value)
    assert raised.value.name == bare(path)


def test_carried_over_and_mapped_names_import():
    missing = {bare(path) for path in IMPORTABLE if not hasattr(api, bare(path))}
    assert missing == set()
    assert api.__version__ == "2.19.0" and api.version_info == (2, 19, 0)
    from crawlplatform.spiders import item_scraped, spider_idle  # scrapy.signals' names

    assert (item_scraped, spider_idle) == (api.signals.item_scraped, api.signals.spider_idle)
    with pytest.raises(ImportError, match="cannot import name 'Nonesuch'"):
        from crawlplatform.spiders import Nonesuch  # noqa: F401


def test_a_spider_reaches_scrapys_modules_through_import_scrapy_too():
    """``import scrapy`` ported is ``import crawlplatform.spiders as scrapy``: what a spider
    writes as ``scrapy.exceptions.CloseSpider`` is found, and a refused name so reached fails
    with its reason as its import would."""
    import crawlplatform.spiders as scrapy

    assert scrapy.exceptions.CloseSpider is api.CloseSpider
    assert scrapy.spiders.CrawlSpider is api.CrawlSpider
    assert scrapy.linkextractors.LinkExtractor is api.LinkExtractor
    assert scrapy.loader.ItemLoader is api.ItemLoader
    assert scrapy.item.Field is api.Field and scrapy.selector.Selector is api.Selector
    assert scrapy.signals.spider_closed is api.signals.spider_closed
    assert scrapy.http.HtmlResponse is api.HtmlResponse and scrapy.http.Request is api.Request
    assert scrapy.http.JsonResponse is api.JsonResponse
    with pytest.raises(ImportError, match="DontCloseSpider is not carried over"):
        scrapy.exceptions.DontCloseSpider  # noqa: B018
    with pytest.raises(ImportError, match="XmlRpcRequest is not carried over"):
        scrapy.http.XmlRpcRequest  # noqa: B018
    with pytest.raises(AttributeError):
        scrapy.nonesuch  # noqa: B018


def test_each_name_has_one_verdict_and_a_refused_one_is_reachable():
    verdicts: dict[str, str] = {}
    for row in porting.NAMES:
        for path in row.paths:
            assert verdicts.setdefault(bare(path), row.verdict) == row.verdict, path
    submodules = {info.name for info in pkgutil.iter_modules(api.__path__)}
    for path, _ in REFUSED:
        assert bare(path) not in vars(api) and bare(path) not in submodules, path


def _public(module_name: str) -> set[str]:
    """What a Scrapy module offers: its ``__all__`` and the classes and functions it defines
    (``scrapy.signals``: its signals)."""
    module = importlib.import_module(module_name)
    found = set(getattr(module, "__all__", ()))
    for name, obj in vars(module).items():
        if name.startswith("_"):
            continue
        made = inspect.isclass(obj) or inspect.isfunction(obj)
        made_here = made and obj.__module__ == module_name
        a_signal = module_name == "scrapy.signals" and type(obj) is object
        if made_here or a_signal:
            found.add(name)
    return found


def test_every_public_name_of_scrapys_spider_modules_has_a_row():
    import scrapy.downloadermiddlewares
    import scrapy.extensions
    import scrapy.pipelines
    import scrapy.spidermiddlewares

    modules = ["scrapy", "scrapy.spiders", "scrapy.http", "scrapy.exceptions", "scrapy.selector",
               "scrapy.exporters", "scrapy.linkextractors", "scrapy.link", "scrapy.item",
               "scrapy.loader", "scrapy.signals", "scrapy.signalmanager", "scrapy.crawler",
               "scrapy.settings", "scrapy.statscollectors", "scrapy.dupefilters", "scrapy.shell",
               "scrapy.mail"]  # fmt: skip
    for package in (scrapy.spidermiddlewares, scrapy.downloadermiddlewares, scrapy.pipelines,
                    scrapy.extensions):  # fmt: skip
        modules += [package.__name__, *(info.name for info in
                                        pkgutil.iter_modules(package.__path__,
                                                             package.__name__ + "."))]  # fmt: skip
    listed = {bare(path) for row in porting.NAMES for path in row.paths}
    with warnings.catch_warnings():  # scrapy.mail and the stats mailer say they are deprecated
        warnings.simplefilter("ignore")
        unlisted = {module: sorted(_public(module) - listed) for module in modules}
    assert {module: names for module, names in unlisted.items() if names} == {}


def test_every_scrapy_setting_has_a_row():
    from scrapy.settings import default_settings

    scrapys = {name for name in vars(default_settings) if name.isupper()}
    older = {"CONCURRENT_REQUESTS_PER_IP", "REQUEST_FINGERPRINTER_IMPLEMENTATION"}
    assert scrapysettings.NAMES == scrapys | older  # older Scrapy's, which spiders still set


def test_a_name_the_job_does_not_set_reads_as_scrapys_default():
    from scrapy.settings import default_settings

    from crawlplatform.spiders.scrapydefaults import DEFAULTS
    from crawlplatform.spiders.settings import Settings

    scrapys = {name: value for name, value in vars(default_settings).items() if name.isupper()}
    left_out = {"TEMPLATES_DIR", "USER_AGENT", "RETRY_EXCEPTIONS"}  # a path, the job's, classes
    assert DEFAULTS == {name: value for name, value in scrapys.items() if name not in left_out}
    settings = Settings({"CONCURRENT_ITEMS": 7, "FLAG": "true"})
    assert (settings.get("BOT_NAME"), settings.getint("CONCURRENT_ITEMS"),
            settings.getbool("COOKIES_ENABLED"), settings.getlist("RETRY_HTTP_CODES"),
            settings.get("MONGO_URI", "mongodb://x"), settings["NOPE"]) == (
        "scrapybot", 7, True, [500, 502, 503, 504, 522, 524, 408, 429], "mongodb://x", None)
    assert settings.getbool("FLAG") and "BOT_NAME" in settings and "NOPE" not in settings
    with pytest.raises(ValueError, match="no boolean"):
        Settings({"FLAG": "TRUE"}).getbool("FLAG")  # Scrapy's spellings only
    assert settings.copy().getint("CONCURRENT_ITEMS") == 7


def test_mapped_settings_name_what_they_set_and_carried_ones_are_read():
    from tasks import defaults

    for name, (target, _, _) in {**spiders.SCRAPY_FIELDS, **spiders.SCRAPY_SETTINGS}.items():
        row = scrapysettings.verdict(name, 1)
        assert row.verdict == porting.MAPPED and f"`{target}`" in row.to, name
    for row in scrapysettings.SETTINGS:
        if row.verdict == porting.CARRIED:
            for name in row.names:
                assert name in spiders.READ_BY_THE_SPIDER or name in defaults.names(), name


class Ported(api.Spider):
    name = "ported"
    start_urls = ["http://127.0.0.1:9/"]


def taken(**custom) -> spiders.Custom:
    return spiders.custom_settings(type("Ported", (Ported,), {"custom_settings": custom}))


def test_a_settings_verdict_follows_its_value():
    asyncio_reactor = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
    accepted = taken(
        DOWNLOADER_MIDDLEWARES={"scrapy.downloadermiddlewares.useragent.UserAgentMiddleware": None},
        SPIDER_MIDDLEWARES={"scrapy.spidermiddlewares.depth.DepthMiddleware": 900},
        TWISTED_REACTOR=asyncio_reactor, COOKIES_ENABLED=True, CLOSESPIDER_ITEMCOUNT=0,
        ITEM_PIPELINES={"myproject.pipelines.Clean": 300}, LOG_LEVEL="INFO", RETRY_TIMES=0,
        USER_AGENT="bot/1.0", REFERRER_POLICY="no-referrer", DUPEFILTER_CLASS=None,
    )  # fmt: skip
    scrapys_headers = {"headers": {  # no DEFAULT_REQUEST_HEADERS: Scrapy's own
        "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        "Accept-Language": "en"}}  # fmt: skip
    assert accepted == ({"RETRY_MAX_ATTEMPTS": 1, "USER_AGENT": "bot/1.0"}, scrapys_headers, [])
    assert taken(DEFAULT_REQUEST_HEADERS={"Accept": "*/*"}).fields == {"headers": {"Accept": "*/*"}}
    assert taken(CLOSESPIDER_ITEMCOUNT=5).problems == []  # read where items are kept
    assert taken(CLOSESPIDER_ITEMCOUNT="many").problems == [
        "CLOSESPIDER_ITEMCOUNT: 'many' cannot be taken"]
    refused = {
        "DOWNLOADER_MIDDLEWARES": {"myproject.middlewares.RotateProxy": 543},
        "SPIDER_MIDDLEWARES": {"myproject.middlewares.Tag": 50},
        "TWISTED_REACTOR": "twisted.internet.epollreactor.EPollReactor",
        "CLOSESPIDER_ERRORCOUNT": 10,
        "ITEM_PIPELINES": {"scrapy.pipelines.images.ImagesPipeline": 1},
        "DOWNLOAD_HANDLERS": {"https": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler"},
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter", "STATS_CLASS": None,
        "REFERER_ENABLED": "True",
    }  # fmt: skip
    problems = taken(**refused).problems
    assert problems == [f"{name}: {scrapysettings.refusal(name, value)}"
                        for name, value in refused.items()]  # fmt: skip
    assert all(scrapysettings.refusal(name, value) for name, value in refused.items())


@pytest.mark.parametrize("function, value, args", [
    ("to_unicode", b"caf\xc3\xa9", ()), ("to_unicode", b"caf\xe9", ("latin-1",)),
    ("to_unicode", b"caf\xe9", (None, "replace")), ("to_unicode", b"caf\xe9", ()),
    ("to_unicode", 3, ()), ("to_bytes", "café", ()), ("to_bytes", "café", ("latin-1",)),
    ("to_bytes", b"x", ()), ("to_bytes", None, ()), ("arg_to_iter", None, ()),
    ("arg_to_iter", {"a": 1}, ()), ("arg_to_iter", "ab", ()), ("arg_to_iter", (1, 2), ()),
])  # fmt: skip
def test_small_utilities_give_scrapys_results(function, value, args):
    from scrapy.utils import misc, python

    theirs = getattr(python, function, None) or getattr(misc, function)

    def outcome(call):
        try:
            return call(value, *args)
        except (TypeError, UnicodeDecodeError) as exc:
            return type(exc), str(exc)

    assert outcome(getattr(api, function)) == outcome(theirs)


# -- jobs, through the platform's start ------------------------------------------------------


@pytest.fixture
def package(tmp_path, monkeypatch, redis, fast):
    """An operator's spider package (``CRAWL_SPIDER_MODULES``) to write ported modules into."""
    root = tmp_path / "ported_spiders"
    root.mkdir()
    (root / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CRAWL_SPIDER_MODULES", "ported_spiders")
    importlib.invalidate_caches()
    spiders._classes.clear()
    yield root
    spiders._classes.clear()
    spiders._instances.clear()
    for name in [name for name in sys.modules if name.startswith("ported_spiders")]:
        del sys.modules[name]


def started(spider: str):
    job = jobs.create_job([], spider=spider)
    jobs.start(job)
    job.refresh_from_db()
    return job


@pytest.mark.django_db(transaction=True)
def test_a_spider_job_whose_module_imports_a_refused_name_fails_at_start_with_its_sentence(
    package,
):
    scrapy_source = textwrap.dedent("""
        import scrapy
        from scrapy.crawler import CrawlerProcess


        class Books(scrapy.Spider):
            name = "books"
            start_urls = ["http://127.0.0.1:9/"]

            def parse(self, response):
                yield {"title": response.css("title::text").get()}


        if __name__ == "__main__":
            process = CrawlerProcess()
            process.crawl(Books)
            process.start()
    """)  # fmt: skip
    (package / "books.py").write_text(port(scrapy_source))
    job = started("books")
    assert job.state == JobState.FAILED
    why = next(row.why for row in porting.NAMES if "scrapy.crawler.CrawlerProcess" in row.paths)
    assert "ported_spiders.books failed to import" in job.error
    assert f"ImportError: scrapy.crawler.CrawlerProcess is not carried over: {why}" in job.error


@pytest.mark.django_db(transaction=True)
def test_a_spider_job_with_a_refused_setting_fails_at_start_with_its_sentence(package):
    (package / "shops.py").write_text(port(textwrap.dedent("""
        import scrapy


        class Refused(scrapy.Spider):
            name = "refused_settings"
            start_urls = ["http://127.0.0.1:9/"]
            custom_settings = {
                "DOWNLOADER_MIDDLEWARES": {
                    "scrapy.downloadermiddlewares.useragent.UserAgentMiddleware": None,
                    "myproject.middlewares.RandomUserAgent": 400,
                },
                "TWISTED_REACTOR": "twisted.internet.epollreactor.EPollReactor",
            }


        class Accepted(scrapy.Spider):
            name = "accepted_settings"
            start_urls = ["http://127.0.0.1:9/"]
            custom_settings = {
                "DOWNLOADER_MIDDLEWARES": {
                    "scrapy.downloadermiddlewares.useragent.UserAgentMiddleware": None,
                },
                "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
                "TELNETCONSOLE_ENABLED": False,
            }
    """)))  # fmt: skip
    job = started("refused_settings")
    assert job.state == JobState.FAILED
    for name, value in (
        ("DOWNLOADER_MIDDLEWARES", {"a.B": 1}),
        ("TWISTED_REACTOR", "twisted.internet.epollreactor.EPollReactor"),
    ):
        assert f"{name}: {scrapysettings.refusal(name, value)}" in job.error
    assert "docs/spiders.md, Porting" in job.error
    accepted = started("accepted_settings")
    assert (accepted.state, accepted.error) == (JobState.RUNNING, "")


# -- Selector, against Scrapy's ----------------------------------------------------------------

RESPONSES = [
    ("HtmlResponse", "http://x.test/a/b", "text/html",
     b'<html><head><base href="/shop/"></head><body><p class="x">caf\xc3\xa9</p>'
     b'<a href="i/1">1</a></body></html>'),
    ("HtmlResponse", "http://x.test/", "text/html; charset=latin-1", b"<p>caf\xe9</p>"),
    ("HtmlResponse", "http://x.test/", "", b"\xef\xbb\xbf<p>bom</p>"),
    ("XmlResponse", "http://x.test/feed.xml", "application/xml",
     b'<?xml version="1.0"?><rss xmlns:dc="http://purl.org/dc/elements/1.1/"><item>'
     b"<title>T</title><dc:creator>A</dc:creator></item></rss>"),
    ("JsonResponse", "http://x.test/api", "application/json", b'{"items": [{"name": "a"}]}'),
    ("TextResponse", "http://x.test/t.txt", "text/plain", b'{"a": [1, 2]}'),
    ("TextResponse", "http://x.test/t.txt", "text/plain", b"<p>plain <b>text</b></p>"),
]  # fmt: skip


def _seen(selector) -> tuple:
    """What a selector selects, its type and the base URL its document has."""
    if selector.type == "json":
        return selector.type, selector.jmespath("*").getall(), None
    base = selector.root.getroottree().docinfo.URL
    return selector.type, selector.xpath("//*").getall(), selector.xpath("//text()").getall(), base


@pytest.mark.parametrize("cls, url, content_type, body", RESPONSES)
def test_selector_of_a_response_selects_what_scrapys_selects(cls, url, content_type, body):
    from scrapy import Selector as ScrapySelector
    from scrapy import http as scrapy_http

    headers = {"Content-Type": content_type} if content_type else {}
    theirs = ScrapySelector(getattr(scrapy_http, cls)(url, headers=headers, body=body))
    response = getattr(api, cls)(url, headers=headers, body=body)
    ours = api.Selector(response)
    assert _seen(ours) == _seen(theirs)
    assert _seen(api.Selector(response=response)) == _seen(theirs) and ours.response is response


@pytest.mark.parametrize("text, kwargs", [
    ('{"a": 1}', {}),  # html, as Scrapy's: parsel alone would read JSON
    (b"\xef\xbb\xbf<p>x</p>", {}),
    ('<base href="http://b.test/x/"><p>y</p>', {}),
    ("<a><b>1</b></a>", {"type": "xml"}),
    ('{"a": [1]}', {"type": "json"}),
])  # fmt: skip
def test_selector_of_a_text_selects_what_scrapys_selects(text, kwargs):
    from scrapy import Selector as ScrapySelector

    assert _seen(api.Selector(text=text, **kwargs)) == _seen(ScrapySelector(text=text, **kwargs))


def test_a_selectors_queries_give_its_classes():
    found = api.Selector(api.HtmlResponse("http://x.test/", body=b"<p>a</p><p>b</p>")).css("p")
    assert isinstance(found, api.SelectorList) and all(isinstance(s, api.Selector) for s in found)
    assert found[0].response is None  # a query's selector, as Scrapy's
    with pytest.raises(ValueError, match="received both response and text"):
        api.Selector(api.HtmlResponse("http://x.test/"), text="<p>")


# -- the docs' tables are the code's ---------------------------------------------------------


def _docs_rows() -> list[list[str]]:
    section = DOCS.read_text().split("## Porting a Scrapy spider", 1)[1].split("\n## ", 1)[0]
    return [[cell.strip() for cell in line.strip().strip("|").split(" | ")]
            for line in section.splitlines() if line.startswith("| `")]  # fmt: skip


def _here(verdict: str, to: str) -> str:
    return f"{verdict} to {to}" if verdict == porting.MAPPED else verdict


def test_the_docs_porting_tables_are_the_codes():
    rows = _docs_rows()
    names = [(tuple(re.findall(r"`([^`]+)`", r[0])), r[1], r[2]) for r in rows if len(r) == 3]
    settings = [(tuple(re.findall(r"`([^`]+)`", r[0])), r[1], r[2], r[3])
                for r in rows if len(r) == 4]  # fmt: skip
    assert names == [(row.paths, _here(row.verdict, row.to), row.why) for row in porting.NAMES]
    assert settings == [(row.names, row.when, _here(row.verdict, row.to), row.why)
                        for row in scrapysettings.SETTINGS]  # fmt: skip
    assert len(names) + len(settings) == len(rows)
