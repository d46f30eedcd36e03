"""The spider API: what users program a crawl against (everything else is internal).

    from crawlplatform.spiders import Spider, Request, FormRequest, JsonRequest, DropItem

An errback's ``failure.check()`` takes Scrapy's and Twisted's exceptions, exported here by
their names (``HttpError``, ``DNSLookupError``, ``TimeoutError``, ...). ``Selector`` and
``SelectorList`` are parsel's (Scrapy's ``Selector(text=...)``), for parsing
a fragment a response carries (HTML inside JSON, say).

Names and behaviour follow Scrapy's, so that a Scrapy spider ports by changing its imports
(``docs/spiders.md``). Spiders are installed by operators (``CRAWL_SPIDER_MODULES`` or the
``crawlplatform.spiders`` entry-point group) and chosen by name in a job.
"""

from parsel import Selector, SelectorList

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
    ResponseDataLossError,
    ResponseNeverReceived,
    TCPTimedOutError,
    TimeoutError,
)
from crawlplatform.spiders.headers import Headers
from crawlplatform.spiders.http import FormRequest, JsonRequest, Request
from crawlplatform.spiders.items import Field, Item
from crawlplatform.spiders.response import (
    Failure,
    HtmlResponse,
    JsonResponse,
    Response,
    TextResponse,
    XmlResponse,
)
from crawlplatform.spiders.spider import DropItem, Spider

__all__ = [
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
    "IgnoreRequest",
    "Item",
    "JsonRequest",
    "JsonResponse",
    "Request",
    "Response",
    "ResponseDataLossError",
    "ResponseNeverReceived",
    "Selector",
    "SelectorList",
    "Spider",
    "TCPTimedOutError",
    "TextResponse",
    "TimeoutError",
    "XmlResponse",
]
