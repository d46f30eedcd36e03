"""The shop's spider, written as a Scrapy user would write it: log in through the form (its
CSRF token filled from the page), walk the listings to the product pages, page through the
stock API by its ``next`` links; a pipeline cleans prices, a schema checks every item."""

from __future__ import annotations

import re

from crawlplatform.spiders import DropItem, FormRequest, Request, Spider


class CleanPrice:
    """'$ 10.50' -> 10.5; an item without a price is dropped."""

    closed: list[tuple[int, int]] = []  # (job, items seen) of each close_spider in this process

    def open_spider(self, spider):
        self.seen = 0

    def close_spider(self, spider):
        self.closed.append((spider.job_id, self.seen))

    def process_item(self, item, spider):
        self.seen += 1
        if item.get("name") == "Boom":
            raise RuntimeError("this pipeline cannot take a Boom")
        if item.get("kind") != "product":
            return item
        found = re.search(r"-?\d+(\.\d+)?", item.get("price") or "")
        if not found:
            raise DropItem("no price")
        item["price"] = float(found.group())
        return item


class ShopSpider(Spider):
    name = "shop"
    custom_settings = {
        "ITEM_PIPELINES": {"tests.spiders.shop.CleanPrice": 300},
        "RETRY_TIMES": 1,  # Scrapy's: RETRY_MAX_ATTEMPTS 2
        "DOWNLOAD_DELAY": 0,  # Scrapy's: the job's delay
        "DEFAULT_REQUEST_HEADERS": {"Accept-Language": "en"},  # Scrapy's: the job's headers
        "LOG_LEVEL": "INFO",  # Scrapy's own process: left out
        "FETCH_READ_TIMEOUT_S": 5.0,  # the platform's
    }
    item_schema = {
        "type": "object",
        "required": ["kind", "sku"],
        "properties": {
            "sku": {"type": "string", "pattern": "^SKU-[0-9]{4}$"},
            "price": {"type": "number", "minimum": 0},
            "stock": {"type": "integer", "minimum": 0},
        },
    }

    async def start(self):
        yield Request(f"{self.base}/login", callback=self.login)

    def login(self, response):
        yield FormRequest.from_response(
            response,
            formcss="form#login",
            formdata={"username": self.user, "password": self.password},
            callback=self.logged_in,
        )

    def logged_in(self, response):
        yield response.follow(response.css("a#shop")[0], callback=self.parse)
        yield Request(response.urljoin("/api/stock?page=1"), callback=self.parse_stock)

    def parse(self, response):
        listing = int(response.url.rsplit("/", 1)[1])
        for link in response.css("a.product"):
            yield response.follow(link, callback=self.parse_product, cb_kwargs={"listing": listing})
        yield from response.follow_all(css="a[rel=next]", callback=self.parse)

    def parse_stock(self, response):
        data = response.json()
        for row in data["results"]:
            yield {"kind": "stock", "sku": row["sku"], "stock": row["stock"]}
        if data["next"]:
            yield response.follow(data["next"], callback=self.parse_stock)

    def parse_product(self, response, listing):
        yield {
            "kind": "product",
            "sku": response.css(".sku::text").get().strip(),  # no SKU: AttributeError
            "name": response.css("h1::text").get(),
            "price": response.css(".price::text").get(),
            "listing": listing,
        }

    ended: list[tuple[int, str]] = []  # (job, reason) of each closed() in this process

    def closed(self, reason):  # the run ended: finished, cancelled, failed, shutdown
        self.ended.append((self.job_id, reason))


class SearchSpider(Spider):
    """Posts searches: two with one body, one with another (two requests, not three)."""

    name = "search"

    def start_requests(self):
        yield Request(f"{self.base}/login", callback=self.login)

    def login(self, response):
        yield FormRequest.from_response(
            response, formdata={"username": "alice", "password": "s3cret"}, callback=self.search
        )

    def search(self, response):
        for q in ("shoes", "shoes", "hats"):
            yield FormRequest(response.urljoin("/search"), formdata={"q": q}, callback=self.found)

    def found(self, response):
        yield response.json()


class StubbornSpider(Spider):
    """Asks for its failing product to be tried again (``retry_on_error``)."""

    name = "stubborn"

    def start_requests(self):
        yield Request(f"{self.base}/login", callback=self.login)

    def login(self, response):
        yield FormRequest.from_response(response, formdata={"username": "alice",
                                                            "password": "s3cret"})  # fmt: skip

    def parse(self, response):
        yield response.follow("/product/9", callback=self.product, meta={"retry_on_error": True})

    def product(self, response):
        yield {"sku": response.css(".sku::text").get().strip()}


class UnkeepableSpider(Spider):
    """Yields a request whose meta cannot be kept (an object of its own): its page fails,
    naming the request."""

    name = "unkeepable"

    def start_requests(self):
        yield Request(f"{self.base}/login")

    def parse(self, response):
        yield {"kept": "never"}
        yield Request(f"{self.base}/account", meta={"seen": object()})


class RankedSpider(Spider):
    """Start requests and a callback's requests with priorities, one beyond the frontier's
    range."""

    name = "ranked"

    def start_requests(self):
        yield Request(f"{self.base}/gone", priority=-1)
        yield Request(f"{self.base}/login", priority=40000)

    def parse(self, response):
        yield {"priority": response.request.priority}
        yield response.follow("/account", priority=3)


class ErrbackSpider(Spider):
    """Asks for a page that is not there; its errback says what happened."""

    name = "errbacks"

    def start_requests(self):
        yield Request(f"{self.base}/gone", callback=self.parse, errback=self.missing)

    def parse(self, response):
        yield {"found": response.url}

    def missing(self, failure):
        yield {"missing": failure.request.url, "status": failure.value.response.status,
               "reason": failure.value.reason, "checked": bool(failure.check(Exception))}


class OddSettingsSpider(Spider):
    """custom_settings a job cannot have (a typo of the platform's, a value Scrapy's cannot
    take, a Scrapy setting with no equivalent): the job fails at start, naming them; the
    spider's own (``SHOP_FEED_TAG``) is no problem."""

    name = "odd_settings"
    custom_settings = {"FETCH_READ_TIMEOUT": 5, "DOWNLOAD_DELAY": "soon",
                       "CLOSESPIDER_ERRORCOUNT": 10, "SHOP_FEED_TAG": "ok"}  # fmt: skip
    start_urls = ["http://127.0.0.1:9/"]
