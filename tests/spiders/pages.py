"""A spider that does what a crawl does, an item for every page: the chaos suite's
``--spider`` (``python -m tests.chaos --spider``)."""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from itemloaders.processors import TakeFirst

from crawlplatform.spiders import CloseSpider, Field, Item, ItemLoader, Request, Spider


class Pages(Spider):
    name = "pages"
    seed = ""  # -a seed=URL

    def start_requests(self):
        yield Request(self.seed)

    def parse(self, response):
        yield {"url": response.url, "title": response.css("title::text").get()}
        yield from response.follow_all(css="a")


class Printing(Pages):
    """``Pages``, printing as scripts do: in its start requests, its callbacks, and its
    pipeline's ``open_spider`` and ``close_spider``."""

    name = "printing"
    custom_settings = {"ITEM_PIPELINES": {"tests.spiders.pages.PrintingPipeline": 100}}

    def start_requests(self):
        print("starting", self.seed)
        yield from super().start_requests()

    def parse(self, response):
        print("parsing", response.url)
        yield from super().parse(response)


class PrintingPipeline:
    def open_spider(self, spider):
        print("opened", spider.name)

    def process_item(self, item, spider):
        return item

    def close_spider(self, spider):
        print("closed", spider.name)


class OneLoop(Pages):
    """``Pages`` whose async code keeps what it made, as on Scrapy's one loop: its async
    callbacks and its pipeline's ``open_spider`` and ``process_item`` see one running loop
    in each process (a connection or a client session made in one serves the next)."""

    name = "one_loop"
    custom_settings = {"ITEM_PIPELINES": {"tests.spiders.pages.OneLoopPipeline": 100}}
    loops: list = []

    async def parse(self, response):
        running = asyncio.get_running_loop()
        if running not in self.loops:
            self.loops.append(running)  # kept alive: a loop's id is not another's
        await asyncio.sleep(0)
        for one in super().parse(response):
            if isinstance(one, dict):
                one["callback_loops"] = len(self.loops)
            yield one


class OneLoopPipeline:
    async def open_spider(self, spider):
        self.opened_on = asyncio.get_running_loop()

    async def process_item(self, item, spider):
        await asyncio.sleep(0)
        item["pipeline_same_loop"] = asyncio.get_running_loop() is self.opened_on
        return item


class Introduced(Spider):
    """Presents itself as Scrapy's spider arguments say (``-a user_agent=...``, ``-a
    http_user=... -a http_pass=... -a http_auth_domain=...``) and a request's ``meta`` may
    (``http_user``, ``http_pass``): ``/a`` on its auth domain, ``/b`` on another host, ``/c``
    with credentials of its own, ``/d`` with its own ``Authorization``."""

    name = "introduced"
    seed = ""  # -a seed=URL, on the auth domain
    other = ""  # -a other=URL, another host

    def start_requests(self):
        yield Request(self.seed + "/a")
        yield Request(self.other + "/b", meta={"allow_offsite": True})
        yield Request(self.seed + "/c", meta={"http_user": "own", "http_pass": "pw"})
        yield Request(self.seed + "/d", headers={"Authorization": "Bearer t"})

    def parse(self, response):
        yield {"path": response.url.rsplit("/", 1)[1]}


class Enough(Spider):
    """Pages ``/p/N`` until ``/p/{last}``, which ends the crawl (CloseSpider) after its item."""

    name = "enough"
    seed = ""  # -a seed=URL
    last = "3"  # -a last=N
    ended: list[tuple[int, str]] = []  # (job, reason) of each closed() in this process

    def start_requests(self):
        yield Request(self.seed)

    def parse(self, response):
        yield {"url": response.url}
        yield from response.follow_all(css="a")
        if response.url.endswith(f"/p/{self.last}"):
            raise CloseSpider("enough pages")

    def closed(self, reason):
        self.ended.append((self.job_id, reason))


class EnoughItems(Enough):
    """``Enough`` that ends by its item count (``CLOSESPIDER_ITEMCOUNT``), no page of its own."""

    name = "enough_items"
    last = "none"
    custom_settings = {"CLOSESPIDER_ITEMCOUNT": 5}


class EnoughOnError(Enough):
    """Its errback ends the crawl: the first answer that is missing is enough."""

    name = "enough_on_error"
    last = "none"

    def start_requests(self):
        yield Request(self.seed)
        yield Request(self.seed.replace("/p/0", "/missing/0"), errback=self.gone)

    def gone(self, failure):
        yield {"gone": failure.request.url, "status": failure.value.response.status}
        raise CloseSpider("a page is gone")


class EnoughAtStart(Enough):
    """Its start ends the crawl after an item and a request, as a Scrapy spider's ``start()``
    may (the item kept, the request not fetched)."""

    name = "enough_at_start"

    async def start(self):
        yield {"started": True}
        yield Request(self.seed)
        raise CloseSpider("from_start")


class Journal:
    """Writes each open_spider and close_spider, with the process, to the spider's journal."""

    def open_spider(self, spider):
        spider.note("open")

    def process_item(self, item):
        return item

    def close_spider(self, spider):
        spider.note("close")


class Journaled(Pages):
    """Pages, with a pipeline and closed() that note when each process opens and closes."""

    name = "journaled"
    journal = ""  # -a journal=PATH
    custom_settings = {"ITEM_PIPELINES": ["tests.spiders.pages.Journal"]}

    def note(self, event):
        with open(self.journal, "a") as out:
            out.write(f"{os.getpid()} {event}\n")

    def closed(self, reason):
        self.note(f"closed {reason}")


class Stateful(Spider):
    """Sets attributes in start() that its callbacks read, as a Scrapy spider may."""

    name = "stateful"
    seed = ""  # -a seed=URL

    async def start(self):
        self.categories = ["books", "music"]
        self.limit = int(len(self.seed) > 0) * 2
        self.matcher = re.compile("p/0")  # not JSON: the workers do not have it
        yield Request(self.seed)

    def parse(self, response):
        yield {"url": response.url, "categories": self.categories, "limit": self.limit,
               "matcher": hasattr(self, "matcher")}  # fmt: skip


class PagesAnd404(Pages):
    """``Pages``, its callback taking 404 answers too, with little patience for bans."""

    name = "pages_and_404"
    handle_httpstatus_list = [404]
    custom_settings = {"BAN_PATIENCE_S": 20}


class Updating(Spider):
    """Sets settings in its own ``update_settings``, as a Scrapy spider may: its callbacks
    read them, the job keeps to its ``DEPTH_LIMIT`` and sends its headers (no ``Accept``
    among them: none is sent)."""

    name = "updating"
    seed = ""  # -a seed=URL
    custom_settings = {"MY_A": "a"}

    @classmethod
    def update_settings(cls, settings):
        super().update_settings(settings)
        settings.set("MY_B", "b", priority="spider")
        settings.set("DEPTH_LIMIT", 1, priority="spider")
        settings.set("MY_A", "lower", priority="project")  # below the spider's: ignored
        settings.set("DEFAULT_REQUEST_HEADERS", {"Accept-Language": "fr"}, priority="spider")

    def start_requests(self):
        yield Request(self.seed)

    def parse(self, response):
        yield {"url": response.url, "depth": response.meta["depth"],
               "a": self.settings.get("MY_A"), "b": self.settings.get("MY_B"),
               "sent": sorted(response.request.headers.to_unicode_dict())}  # fmt: skip
        yield from response.follow_all(css="a")


class Book(Item):
    title = Field(output_processor=TakeFirst())
    price = Field(output_processor=TakeFirst())


@dataclass
class Seen:
    at: date
    pages: list[int]


class Carrying(Spider):
    """Carries what JSON has no type for in ``meta`` and ``cb_kwargs`` (a partial item's
    Decimal price, a set, a date, a tuple; a partial ``Item`` that a loader fills with its
    fields' processors; a dataclass), as Scrapy spiders do."""

    name = "carrying"
    seed = ""  # -a seed=URL

    def start_requests(self):
        yield Request(self.seed)

    def parse(self, response):
        yield response.follow("/p/1", callback=self.parse_item,
                              meta={"item": {"price": Decimal("9.90"), "seen": {1, 2}},
                                    "book": Book(price=Decimal("9.90"))},
                              cb_kwargs={"when": date(2026, 1, 2), "pair": (1, 2),
                                         "seen": Seen(date(2026, 1, 3), [0])})  # fmt: skip

    def parse_item(self, response, when, pair, seen):
        item = response.meta["item"]
        loader = ItemLoader(item=response.meta["book"], response=response)
        loader.add_css("title", "title::text")
        book = loader.load_item()
        yield {"price": str(item["price"]), "seen": sorted(item["seen"]),
               "when": when.isoformat(), "pair": list(pair),
               "book": {"title": book["title"], "price": str(book["price"])},
               "pages": seen.pages,
               "types": [type(x).__name__ for x in (item["price"], item["seen"], when, pair,
                                                    book, book["price"], seen, seen.at)]}
