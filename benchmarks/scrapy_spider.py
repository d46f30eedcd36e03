"""The Scrapy side of the comparison: follow every link on the start URLs' hosts.

python benchmarks/scrapy_spider.py URL|@FILE CONCURRENCY [--delay S] [--robots] [--per-host N]

``@FILE``: start URLs, one per line (a broad crawl). ``--delay``, ``--robots`` and
``--per-host`` give Scrapy the platform's politeness: a fixed gap between two requests to
one host (not randomized), robots.txt obeyed, at most N requests in flight per host.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import urlsplit

from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import Spider


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("start")
    parser.add_argument("concurrency", type=int)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--robots", action="store_true")
    parser.add_argument("--per-host", type=int, default=0)
    args = parser.parse_args()
    if args.start.startswith("@"):
        seeds = Path(args.start[1:]).read_text().split()
    else:
        seeds = [args.start]

    class SiteSpider(Spider):
        name = "site"
        start_urls = seeds
        allowed_domains = sorted({urlsplit(u).hostname for u in seeds})
        links = LinkExtractor()  # offsite links are dropped by allowed_domains

        def parse(self, response):
            yield {"url": response.url, "title": response.css("title::text").get()}
            for link in self.links.extract_links(response):
                yield response.follow(link.url, self.parse)

    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": args.concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": args.per_host or args.concurrency,
            "DOWNLOAD_DELAY": args.delay,
            "RANDOMIZE_DOWNLOAD_DELAY": False,
            "ROBOTSTXT_OBEY": args.robots,
            "DEPTH_LIMIT": 0,
            "TELNETCONSOLE_ENABLED": False,
            "LOG_LEVEL": "WARNING",
            "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
        }
    )
    crawler = process.create_crawler(SiteSpider)
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
