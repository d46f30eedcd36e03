"""Spiders with FEEDS in their custom_settings (tests/test_feeds.py, which installs them):
feeds the platform writes, to paths relative to the writing process's directory, and feeds
it cannot write."""

from __future__ import annotations

from crawlplatform.spiders import Request, Spider


class OwnFeeds(Spider):
    """Pages ``/p/N`` of tests/site.py, an item each; its feeds replace the operator's."""

    name = "own_feeds"
    seed = ""  # -a seed=URL
    custom_settings = {
        "FEEDS": {"own/%(name)s.csv": {"format": "csv", "fields": ["url", "title"]},
                  "own/%(name)s-%(batch_id)d.jsonl": {"batch_item_count": 5}},
        "FEED_EXPORT_ENCODING": "utf-8",
    }

    def start_requests(self):
        yield Request(self.seed)

    def parse(self, response):
        yield {"title": response.css("title::text").get(), "url": response.url}
        yield from response.follow_all(css="a[href^='/p/']")


class BadFeeds(Spider):
    """Every way a feed cannot be written by the platform."""

    name = "bad_feeds"
    start_urls = ["http://127.0.0.1:9/"]
    custom_settings = {
        "FEEDS": {
            "ftp://user:pass@ftp.example/items.json": {"format": "json"},
            "stdout:": {"format": "jsonlines"},
            "items.pickle": {},
            "items": {},
            "batches.jsonl": {"batch_item_count": 10},
            "filtered.jsonl": {"item_filter": "myproject.filters.MyFilter",
                               "postprocessing": ["myproject.plugins.Upper"]},
            "odd.csv": {"encoding": "no-such-codec"},
            "kwargs.json": {"item_export_kwargs": {"colour": "blue"}},
        },
        "FEED_URI_PARAMS": "myproject.utils.uri_params",
    }
