"""The spider API: what users program a crawl against (everything else is internal).

    from crawlplatform.spiders import Spider, Request, FormRequest, JsonRequest, DropItem
    from crawlplatform.spiders import signals  # Scrapy's signal objects, for crawler.signals

``SitemapSpider``, ``XMLFeedSpider`` and ``CSVFeedSpider`` are Scrapy's, with the utilities
they read by (``Sitemap``, ``sitemap_urls_from_robots``, ``xmliter_lxml``, ``csviter``,
``gunzip``, ``gzip_magic_number``).

An errback's ``failure.check()`` takes Scrapy's and Twisted's exceptions, exported here by
their names (``HttpError``, ``DNSLookupError``, ``TimeoutError``, ...). ``Selector`` and
``SelectorList`` are parsel's (Scrapy's ``Selector(text=...)``), for parsing
a fragment a response carries (HTML inside JSON, say).

``LinkExtractor`` (``LxmlLinkExtractor``) finds a page's links as Scrapy's does, as ``Link``
objects (``IGNORED_EXTENSIONS``: the extensions it skips unless told otherwise).

Names and behaviour follow Scrapy's, so that a Scrapy spider ports by changing its imports
(``docs/spiders.md``). Spiders are installed by operators (``CRAWL_SPIDER_MODULES`` or the
``crawlplatform.spiders`` entry-point group) and chosen by name in a job.
"""

from parsel import Selector, SelectorList

from crawlplatform.spiders import signals
from crawlplatform.spiders.errors import (
    CannotResolveHostError,
    CloseSpider,
    ConnectError,
    ConnectionLost,
    ConnectionRefusedError,
    DNSLookupError,
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
from crawlplatform.spiders.signalmanager import SignalManager
from crawlplatform.spiders.sitemap import SitemapSpider
from crawlplatform.spiders.spider import DropItem, Spider
from crawlplatform.spiders.stats import StatsCollector
from crawlplatform.spiders.utils import (
    Sitemap,
    csviter,
    gunzip,
    gzip_magic_number,
    sitemap_urls_from_robots,
    xmliter_lxml,
)

__all__ = [
    "CSVFeedSpider",
    "CannotResolveHostError",
    "CloseSpider",
    "ConnectError",
    "ConnectionLost",
    "ConnectionRefusedError",
    "DNSLookupError",
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
    "Selector",
    "SelectorList",
    "SignalManager",
    "Sitemap",
    "SitemapSpider",
    "Spider",
    "StatsCollector",
    "TCPTimedOutError",
    "TextResponse",
    "TimeoutError",
    "XMLFeedSpider",
    "XmlResponse",
    "csviter",
    "gunzip",
    "gzip_magic_number",
    "signals",
    "sitemap_urls_from_robots",
    "xmliter_lxml",
]
