"""The spider API: what users program a crawl against (everything else is internal).

    from crawlplatform.spiders import Spider, Request, FormRequest, JsonRequest, DropItem
    from crawlplatform.spiders import signals  # Scrapy's signal objects, for crawler.signals

``CrawlSpider`` (with its ``Rule``), ``SitemapSpider``, ``XMLFeedSpider`` and
``CSVFeedSpider`` are Scrapy's, with the utilities they read by (``Sitemap``,
``sitemap_urls_from_robots``, ``xmliter_lxml``, ``csviter``, ``gunzip``,
``gzip_magic_number``). ``ItemLoader`` is Scrapy's: itemloaders' loader made from a
response (its processors are ``itemloaders.processors``), imported on first use (itemloaders
imports itemadapter, which imports every item library installed: a third of a second).

An errback's ``failure.check()`` takes Scrapy's and Twisted's exceptions, exported here by
their names (``HttpError``, ``DNSLookupError``, ``TimeoutError``, ...). ``Selector`` and
``SelectorList`` are Scrapy's (``Selector(response)``, ``Selector(text=...)``).

``LinkExtractor`` (``LxmlLinkExtractor``) finds a page's links as Scrapy's does, as ``Link``
objects (``IGNORED_EXTENSIONS``: the extensions it skips unless told otherwise).

Names and behaviour follow Scrapy 2.19's, so that a Scrapy spider ports by changing its imports
(``docs/spiders.md``, Porting a Scrapy spider): a name the platform refuses fails its import
with the reason (``porting.py``), and a signal's name is the signal
(``from scrapy.signals import item_scraped``). Spiders are installed by operators
(``CRAWL_SPIDER_MODULES`` or the ``crawlplatform.spiders`` entry-point group) and chosen by name
in a job.
"""

import sys
from typing import Any

from crawlplatform.spiders import http, porting, signals
from crawlplatform.spiders.crawl import CrawlSpider, Rule
from crawlplatform.spiders.curl import curl_to_request_kwargs
from crawlplatform.spiders.errors import (
    CannotResolveHostError,
    CloseSpider,
    ConnectError,
    ConnectionLost,
    ConnectionRefusedError,
    DNSLookupError,
    DownloadCancelledError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    HttpError,
    IgnoreRequest,
    NotConfigured,
    NotSupported,
    ResponseDataLossError,
    ResponseNeverReceived,
    TCPTimedOutError,
    TimeoutError,
    UnsupportedURLSchemeError,
)
from crawlplatform.spiders.feed import CSVFeedSpider, XMLFeedSpider
from crawlplatform.spiders.headers import Headers
from crawlplatform.spiders.http import FormRequest, JsonRequest, Request
from crawlplatform.spiders.items import Field, Item
from crawlplatform.spiders.link import Link
from crawlplatform.spiders.linkextractors import (
    IGNORED_EXTENSIONS,
    LinkExtractor,
    LxmlLinkExtractor,
)
from crawlplatform.spiders.response import (
    Failure,
    HtmlResponse,
    JsonResponse,
    Response,
    TextResponse,
    XmlResponse,
)
from crawlplatform.spiders.selector import Selector, SelectorList
from crawlplatform.spiders.settings import BaseSettings, Crawler, Settings
from crawlplatform.spiders.signalmanager import SignalManager
from crawlplatform.spiders.sitemap import SitemapSpider
from crawlplatform.spiders.spider import DropItem, Spider
from crawlplatform.spiders.stats import StatsCollector
from crawlplatform.spiders.utils import (
    Sitemap,
    arg_to_iter,
    csviter,
    gunzip,
    gzip_magic_number,
    sitemap_urls_from_robots,
    to_bytes,
    to_unicode,
    xmliter_lxml,
)

__version__ = "2.19.0"  # the Scrapy release whose names and behaviour the API follows
version_info = (2, 19, 0)

__all__ = [
    "BaseSettings",
    "CSVFeedSpider",
    "CannotResolveHostError",
    "CloseSpider",
    "ConnectError",
    "ConnectionLost",
    "ConnectionRefusedError",
    "CrawlSpider",
    "Crawler",
    "DNSLookupError",
    "DownloadCancelledError",
    "DownloadConnectionRefusedError",
    "DownloadFailedError",
    "DownloadTimeoutError",
    "DropItem",
    "Failure",
    "Field",
    "FormRequest",
    "Headers",
    "HtmlResponse",
    "HttpError",
    "IGNORED_EXTENSIONS",
    "IgnoreRequest",
    "Item",
    "ItemLoader",
    "JsonRequest",
    "JsonResponse",
    "Link",
    "LinkExtractor",
    "LxmlLinkExtractor",
    "NotConfigured",
    "NotSupported",
    "Request",
    "Response",
    "ResponseDataLossError",
    "ResponseNeverReceived",
    "Rule",
    "Selector",
    "SelectorList",
    "Settings",
    "SignalManager",
    "Sitemap",
    "SitemapSpider",
    "Spider",
    "StatsCollector",
    "TCPTimedOutError",
    "TextResponse",
    "TimeoutError",
    "UnsupportedURLSchemeError",
    "XMLFeedSpider",
    "XmlResponse",
    "arg_to_iter",
    "csviter",
    "curl_to_request_kwargs",
    "gunzip",
    "gzip_magic_number",
    "signals",
    "sitemap_urls_from_robots",
    "to_bytes",
    "to_unicode",
    "xmliter_lxml",
]


# Scrapy's ``scrapy.http`` holds the responses as well as the requests: ``http`` cannot import
# them (they build on it), so the package puts them there (``scrapy.http.HtmlResponse``).
for _response in (Response, TextResponse, HtmlResponse, XmlResponse, JsonResponse):
    setattr(http, _response.__name__, _response)

# Scrapy's modules whose names all stand here, so that a spider written against ``import
# scrapy`` (ported: ``import crawlplatform.spiders as scrapy``) reaches them through the module
# too: ``scrapy.exceptions.CloseSpider``, ``scrapy.spiders.CrawlSpider``.
_SCRAPY_MODULES = frozenset({"exceptions", "item", "link", "linkextractors", "loader", "selector",
                             "spiders"})  # fmt: skip


def __getattr__(name: str) -> Any:
    """A name the package lacks: one of Scrapy's modules (``_SCRAPY_MODULES``: this package),
    a signal's (``from scrapy.signals import spider_closed``
    ports to an import from here), else a Scrapy name the platform refuses, whose import fails
    with the reason, so that the job of a spider that imports it fails at start, saying why.
    ``ItemLoader`` is imported when first asked for (see above)."""
    if name == "ItemLoader":
        from crawlplatform.spiders.loader import ItemLoader

        return ItemLoader
    if name in _SCRAPY_MODULES:
        return sys.modules[__name__]
    signal = getattr(signals, name, None)
    if isinstance(signal, signals.Signal):
        return signal
    reason = porting.refusal(name)
    if reason is not None:
        raise ImportError(reason, name=name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
