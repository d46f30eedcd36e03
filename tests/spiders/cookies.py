"""A spider that sets a cookie on one request, as a site's consent or currency choice is
set once (tests/test_spiders.py): Scrapy's cookie middleware keeps it for later requests."""

from __future__ import annotations

from crawlplatform.spiders import Request, Spider


class Consent(Spider):
    name = "consent"
    base = ""  # -a base=URL

    def start_requests(self):
        yield Request(self.base + "/start", cookies={"consent": "yes"})

    def parse(self, response):
        yield {"url": response.url}
        if response.url.endswith("/start"):
            yield response.follow("/next")  # no cookies of its own: the jar's
        elif response.url.endswith("/next"):
            yield response.follow("/changed", cookies=[{"name": "consent", "value": "no"}])
            yield response.follow("/later", priority=-1)  # after /changed


class Uncookied(Consent):
    """``Consent`` with Scrapy's cookie middleware off: no cookie is kept or sent, but a
    ``Cookie`` header of a request's own."""

    name = "uncookied"
    custom_settings = {"COOKIES_ENABLED": False}

    def parse(self, response):
        yield from super().parse(response)
        if response.url.endswith("/later"):
            yield response.follow("/own", headers={"Cookie": "mine=1"})
