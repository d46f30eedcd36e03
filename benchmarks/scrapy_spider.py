"""The Scrapy side of the comparison: follow every link on the start URL's host.

python benchmarks/scrapy_spider.py URL CONCURRENCY
"""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import Spider


def main() -> None:
    url, concurrency = sys.argv[1], int(sys.argv[2])
    host = urlsplit(url).hostname

    class DocsSpider(Spider):
        name = "docs"
        start_urls = [url]
        allowed_domains = [host]
        links = LinkExtractor()  # offsite links are dropped by allowed_domains

        def parse(self, response):
            yield {"url": response.url, "title": response.css("title::text").get()}
            for link in self.links.extract_links(response):
                yield response.follow(link.url, self.parse)

    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
            "DOWNLOAD_DELAY": 0,
            "ROBOTSTXT_OBEY": False,
            "DEPTH_LIMIT": 0,
            "TELNETCONSOLE_ENABLED": False,
            "LOG_LEVEL": "WARNING",
            "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
        }
    )
    crawler = process.create_crawler(DocsSpider)
    process.crawl(crawler)
    process.start()
    stats = crawler.stats.get_stats()
    print(
        f"scrapy pages={stats.get('response_received_count', 0)} "
        f"items={stats.get('item_scraped_count', 0)}",
        flush=True,
    )


if __name__ == "__main__":
    main()
