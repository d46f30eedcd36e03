"""Spiders the tests install (``CRAWL_SPIDER_MODULES=tests.spiders``)."""
