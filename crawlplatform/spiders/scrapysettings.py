"""What becomes of each Scrapy 2.19 setting (its ``default_settings``, and two of older
releases that spiders still set) in a spider's ``custom_settings``: carried over (read as
Scrapy reads it), mapped (to a job field or setting, or to the platform's own feature of that
purpose: accepted, and left out of the job with a line in the log) or refused (the job fails
at start with the sentence). A row may be for some values only (``when``):
``COOKIES_ENABLED`` on is the job's jar, off keeps none. A value that no row is for (0, None
or an empty dict, where Scrapy does nothing either) is left out.

``tasks/content/spiders.py`` (``custom_settings``) and ``tasks/content/feeds.py`` apply the
table; ``docs/spiders.md`` ("Porting a Scrapy spider") shows it and
``tests/test_porting.py`` holds the two equal.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from crawlplatform.spiders.porting import (
    BUILT_IN_STATS,
    CARRIED,
    FETCHING_PIPELINES,
    MAPPED,
    NO_MAIL,
    REFUSED,
)


class Setting(NamedTuple):
    """Scrapy settings that share a verdict and its reason, for the values ``when`` says."""

    names: tuple[str, ...]
    when: str  # the values the row is for (a key of _WHEN)
    verdict: str  # CARRIED, MAPPED or REFUSED
    to: str  # what stands for them here (MAPPED only)
    why: str  # one sentence; a refused setting fails the job at start with it


def _paths(value: Any) -> Iterator[str]:
    """The dotted paths of the classes a setting's value enables: a path or class; a dict's
    keys (component: order) or values (scheme: handler), those set to None left out; a
    list's elements."""
    if isinstance(value, dict):
        entries = [v if isinstance(v, str) or inspect.isclass(v) else k
                   for k, v in value.items() if v is not None]  # fmt: skip
    elif isinstance(value, list | tuple | set | frozenset):
        entries = list(value)
    else:
        entries = [] if value is None else [value]
    for entry in entries:
        yield f"{entry.__module__}.{entry.__qualname__}" if inspect.isclass(entry) else str(entry)


def _scrapys(path: str) -> bool:
    return path.startswith("scrapy.")


def on(value: Any) -> bool:
    """As Scrapy's ``getbool`` reads it."""
    return str(value).lower() in ("true", "1")


_ASYNCIO_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
_NO_REFERRER = ("no-referrer", "scrapy.spidermiddlewares.referer.NoReferrerPolicy")

ANY = "any"
SET = "set"
_WHEN: dict[str, Callable[[Any], bool]] = {
    ANY: lambda value: True,
    SET: bool,
    "on": on,
    "off": lambda value: not on(value),
    "naming a Scrapy class": lambda value: any(map(_scrapys, _paths(value))),
    "the spider's own classes": lambda value: not any(map(_scrapys, _paths(value))),
    "naming a class of the spider's own": lambda value: not all(map(_scrapys, _paths(value))),
    "Scrapy's classes, or none": lambda value: all(map(_scrapys, _paths(value))),
    "asyncio's, or none": lambda value: value in (None, "", _ASYNCIO_REACTOR),
    "another reactor": lambda value: value not in (None, "", _ASYNCIO_REACTOR),
    "no-referrer": lambda value: value in _NO_REFERRER,
    "another policy": lambda value: value not in _NO_REFERRER,
}


def _row(names: str, when: str, verdict: str, why: str, to: str = "") -> Setting:
    return Setting(tuple(names.split()), when, verdict, to, why)


_OWN = "naming a class of the spider's own"
_SCRAPYS = "Scrapy's classes, or none"
_CODE = "code the platform does not run: only operators install code, as spiders"
_NO_REFERER = ("the platform sends no Referer header: a request that needs one sets it in its "
               "headers")  # fmt: skip
_TRANSPORT = ("the platform's transport fetches for every worker: it resolves names behind the "
              "address guard, negotiates TLS and checks certificates (TLS_VERIFY), and goes "
              "through the job's proxies only")  # fmt: skip
_FRONTIER = ("the frontier schedules and deduplicates every job's requests across workers, by "
             "Scrapy's fingerprint in its unique index, with dont_filter as in Scrapy")  # fmt: skip
_NO_EQUIVALENT = "a Scrapy setting the platform has no equivalent of: "
_UNLESS_GIVEN = ", unless the job was given its own"

SETTINGS: tuple[Setting, ...] = (
    _row("ITEM_PIPELINES EXTENSIONS", "naming a Scrapy class", REFUSED,
         "Scrapy's own pipelines and extensions belong to its engine, and what each does is "
         "the platform's or refused, as the table of names says"),
    _row("ITEM_PIPELINES EXTENSIONS", "the spider's own classes", CARRIED,
         "made by their from_crawler with the job's crawler, in every worker process that runs "
         "the spider's callbacks"),
    _row("FEEDS FEED_URI FEED_FORMAT FEED_EXPORT_ENCODING FEED_EXPORT_FIELDS FEED_EXPORT_INDENT "
         "FEED_STORE_EMPTY FEED_EXPORT_BATCH_ITEM_COUNT FEED_STORAGE_S3_ACL AWS_ACCESS_KEY_ID "
         "AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_ENDPOINT_URL AWS_REGION_NAME", ANY, CARRIED,
         "the job's feeds, written from its stored items with the bytes of Scrapy's exporters "
         "when its run finishes"),
    _row("FEED_EXPORTERS", SET, REFUSED,
         f"an exporter of the spider's own is {_CODE} (formats: jsonlines, json, csv, xml)"),
    _row("FEED_STORAGES", SET, REFUSED,
         f"a storage of the spider's own is {_CODE} (file paths and s3:// URIs)"),
    _row("FEED_URI_PARAMS", SET, REFUSED, f"a function of URI parameters is {_CODE}"),
    _row("FEED_TEMPDIR FEED_STORAGE_FTP_ACTIVE FEED_STORAGE_GCS_ACL", ANY, MAPPED,
         "the platform writes feeds to paths and s3:// URIs, with no temporary file of the "
         "spider's", "the platform's feed writing"),
    _row("HTTPERROR_ALLOWED_CODES HTTPERROR_ALLOW_ALL", ANY, CARRIED,
         "the error answers the spider's callbacks get, let through as Scrapy's "
         "HttpErrorMiddleware lets them"),
    _row("USER_AGENT", ANY, CARRIED, "the job's user agent, the platform's setting of the same "
         "name"),
    _row("DOWNLOAD_WARNSIZE", ANY, CARRIED,
         "read by SitemapSpider as Scrapy's reads it: a larger gunzipped sitemap is logged"),
    _row("DOWNLOAD_DELAY", ANY, MAPPED, "the gap between two requests to one host, kept across "
         "every worker (with CONCURRENT_REQUESTS_PER_DOMAIN, from the end of the one before "
         f"too: never closer at the site){_UNLESS_GIVEN}", "the job's `delay`"),
    _row("ROBOTSTXT_OBEY", ANY, MAPPED, f"whether robots.txt is obeyed{_UNLESS_GIVEN}",
         "the job's `obey_robots`"),
    _row("CONCURRENT_REQUESTS_PER_DOMAIN", ANY, MAPPED,
         f"requests to one host at once across every worker{_UNLESS_GIVEN}",
         "the job's `host_concurrency`"),
    _row("DEPTH_LIMIT", ANY, MAPPED, "how deep requests go from the start, 0 as deep as the "
         f"platform allows{_UNLESS_GIVEN}", "the job's `max_depth`"),
    _row("CLOSESPIDER_PAGECOUNT", ANY, MAPPED,
         "the requests after which the job ends, failed ones counted too where Scrapy counts "
         "answers, its finish_reason closespider_pagecount as Scrapy's, 0 for no such end"
         f"{_UNLESS_GIVEN}",
         "the job's `max_pages`"),
    _row("DEFAULT_REQUEST_HEADERS", ANY, MAPPED,
         "headers sent with every request, those the job sets itself winning",
         "the job's `headers`"),
    _row("DOWNLOAD_TIMEOUT", ANY, MAPPED, "the bound on a whole fetch in seconds, at most the "
         "operator's", "`FETCH_DEADLINE_S`"),
    _row("RETRY_TIMES", ANY, MAPPED,
         "one more than Scrapy's, as the platform counts attempts where Scrapy counts retries",
         "`RETRY_MAX_ATTEMPTS`"),
    _row("DOWNLOAD_MAXSIZE", ANY, MAPPED, "the cap on a body in bytes, at most the operator's",
         "`FETCH_MAX_BYTES`"),
    _row("REDIRECT_MAX_TIMES", ANY, MAPPED,
         "the redirects followed in a row, at most the operator's", "`FETCH_MAX_REDIRECTS`"),
    _row("COOKIES_ENABLED", "on", MAPPED,
         "cookies are always kept, in a jar of the job's that every worker shares",
         "the job's cookie jar"),
    _row("COOKIES_ENABLED", "off", MAPPED, "no cookie is kept or sent, but a Cookie header of a "
         "request's own, as with meta dont_merge_cookies on every request",
         "dont_merge_cookies on every request"),
    _row("RETRY_ENABLED DOWNLOAD_FAIL_ON_DATALOSS", "on", MAPPED,
         "a failed fetch, a body cut short included, is retried with backoff up to "
         "RETRY_MAX_ATTEMPTS, then fails its URL", "the platform's retries"),
    _row("RETRY_ENABLED", "off", MAPPED, "a failed fetch fails its URL at once, as with "
         "RETRY_TIMES 0", "RETRY_MAX_ATTEMPTS 1"),
    _row("DOWNLOAD_FAIL_ON_DATALOSS", "off", REFUSED, "a body cut short is retried and then "
         "fails its URL (ResponseDataLossError), and never goes to a callback in part"),
    _row("RETRY_HTTP_CODES RETRY_EXCEPTIONS", SET, REFUSED,
         f"{_NO_EQUIVALENT}the platform retries timeouts, refused or reset connections, names "
         "that do not resolve, 5xx, 429 and 408, and handle_httpstatus_list or meta dont_retry "
         "keeps an answer as it came"),
    _row("REDIRECT_ENABLED METAREFRESH_ENABLED", "on", MAPPED,
         "the platform follows redirects and meta refreshes as Scrapy's middlewares do",
         "the platform's redirects"),
    _row("REDIRECT_ENABLED", "off", MAPPED, "no redirect is followed: every request is sent "
         "as with meta dont_redirect, its 3xx answer an HTTP error unless it takes the status",
         "dont_redirect on every request"),
    _row("METAREFRESH_ENABLED", "off", MAPPED, "no meta refresh is followed: the page goes to "
         "its callback", "no meta refresh followed"),
    _row("METAREFRESH_MAXDELAY METAREFRESH_IGNORE_TAGS", ANY, REFUSED,
         "a meta refresh is followed as Scrapy's defaults have it, within 100 seconds and "
         "outside noscript, and meta dont_redirect keeps a page as it came"),
    _row("COMPRESSION_ENABLED", "on", MAPPED,
         "the transport asks for compressed bodies and decodes them itself",
         "the transport's decoding"),
    _row("COMPRESSION_ENABLED", "off", REFUSED,
         "the transport always decodes compressed bodies, so no callback gets one as it came"),
    _row("CRAWLSPIDER_FOLLOW_LINKS", "on", MAPPED,
         "a CrawlSpider follows its rules' links, as by Scrapy's default", "CrawlSpider's rules"),
    _row("CRAWLSPIDER_FOLLOW_LINKS", "off", CARRIED,
         "a CrawlSpider follows no rule's links, as Scrapy's (which deprecates it for "
         "follow=False on the rules)"),
    _row("TWISTED_REACTOR", "asyncio's, or none", MAPPED,
         "an async def callback runs on asyncio, as under Scrapy's asyncio reactor", "asyncio"),
    _row("TWISTED_REACTOR", "another reactor", REFUSED,
         "there is no Twisted reactor and async def callbacks run on asyncio, so code that "
         "needs another reactor cannot run here"),
    _row("ASYNCIO_EVENT_LOOP TWISTED_REACTOR_ENABLED FORCE_CRAWLER_PROCESS "
         "REACTOR_THREADPOOL_MAXSIZE", ANY, MAPPED,
         "a worker runs callbacks in its own threads, and every coroutine of the spider and "
         "its pipelines on one asyncio event loop of its own", "the worker's threads"),
    _row("DOWNLOADER_MIDDLEWARES", _OWN, REFUSED,
         "a downloader middleware of the spider's own cannot run, as every fetch goes through "
         "the platform's transport: user agents, proxies, headers, retries and rendering are "
         "the job's (user_agents, proxies, headers, RETRY_MAX_ATTEMPTS, render)"),
    _row("SPIDER_MIDDLEWARES", _OWN, REFUSED,
         "a spider middleware of the spider's own does not run, as what a callback yields goes "
         "straight to the frontier and the pipelines: its work belongs in the callback or an "
         "item pipeline"),
    _row("DOWNLOAD_HANDLERS", _OWN, REFUSED,
         "a download handler of the spider's own cannot run: the platform's transport fetches "
         "http(s), and a render worker renders pages for a job whose render says so"),
    _row("ADDONS", _OWN, REFUSED,
         "an add-on installs components into Scrapy's engine, which the platform does not run, "
         "and what each component does is the platform's or refused, as the tables say"),
    _row("DOWNLOADER_MIDDLEWARES SPIDER_MIDDLEWARES DOWNLOAD_HANDLERS ADDONS", _SCRAPYS, MAPPED,
         "what Scrapy's own components do, reordered or set to None, the platform does its "
         "way, as the table of names says", "the platform's own"),
    _row("SCHEDULER SCHEDULER_PRIORITY_QUEUE SCHEDULER_DISK_QUEUE SCHEDULER_MEMORY_QUEUE "
         "SCHEDULER_START_DISK_QUEUE SCHEDULER_START_MEMORY_QUEUE DUPEFILTER_CLASS "
         "REQUEST_FINGERPRINTER_CLASS", _OWN, REFUSED,
         f"{_FRONTIER}, and no scheduler or filter of the spider's own replaces it"),
    _row("SCHEDULER SCHEDULER_PRIORITY_QUEUE SCHEDULER_DISK_QUEUE SCHEDULER_MEMORY_QUEUE "
         "SCHEDULER_START_DISK_QUEUE SCHEDULER_START_MEMORY_QUEUE DUPEFILTER_CLASS "
         "REQUEST_FINGERPRINTER_CLASS REQUEST_FINGERPRINTER_IMPLEMENTATION", _SCRAPYS, MAPPED,
         _FRONTIER, "the frontier"),
    _row("DEPTH_PRIORITY REDIRECT_PRIORITY_ADJUST RETRY_PRIORITY_ADJUST", ANY, MAPPED,
         "the frontier orders a job's URLs by their requests' priority, then by its own rules "
         "across workers", "the frontier"),
    _row("JOBDIR", ANY, MAPPED, "a job's state is kept in the database, so it pauses and "
         "resumes with nothing lost", "the job's rows"),
    _row("DOWNLOADER DOWNLOADER_CLIENTCONTEXTFACTORY DNS_RESOLVER TWISTED_DNS_RESOLVER", _OWN,
         REFUSED, f"{_TRANSPORT}, running no user code"),
    _row("DOWNLOADER DOWNLOADER_CLIENTCONTEXTFACTORY DNS_RESOLVER TWISTED_DNS_RESOLVER", _SCRAPYS,
         MAPPED, _TRANSPORT, "the platform's transport"),
    _row("DNSCACHE_ENABLED DNSCACHE_SIZE DNS_TIMEOUT DOWNLOAD_TLS_MAX_VERSION "
         "DOWNLOAD_TLS_MIN_VERSION DOWNLOADER_CLIENT_TLS_CIPHERS DOWNLOADER_CLIENT_TLS_METHOD "
         "DOWNLOAD_VERIFY_CERTIFICATES HTTP2_MAX_FRAME_SIZE HTTPX_HTTP2_ENABLED "
         "HTTPPROXY_ENABLED HTTPPROXY_AUTH_ENCODING", ANY, MAPPED, _TRANSPORT,
         "the platform's transport"),
    _row("DOWNLOAD_BIND_ADDRESS", SET, REFUSED, "the transport chooses the address a worker "
         "connects from, and a job that must leave from given addresses goes through proxies"),
    _row("HTTPAUTH_USER HTTPAUTH_PASS HTTPAUTH_DOMAIN", SET, REFUSED,
         "set the Authorization header on the requests that need it, since the job's headers "
         "would send it to every host"),
    _row("ITEM_PROCESSOR", _OWN, REFUSED,
         "the platform runs the pipelines of ITEM_PIPELINES itself, with no processor of the "
         "spider's own"),
    _row("ITEM_PROCESSOR", _SCRAPYS, MAPPED, "the platform runs the pipelines of ITEM_PIPELINES "
         "itself, in every worker that runs the spider's callbacks", "the platform's pipelines"),
    _row("ROBOTSTXT_PARSER", _OWN, REFUSED, "the platform parses robots.txt with Protego, "
         "Scrapy's default parser, once for every worker"),
    _row("ROBOTSTXT_PARSER", _SCRAPYS, MAPPED, "the platform parses robots.txt with Protego, "
         "Scrapy's default parser, once for every worker", "Protego"),
    _row("ROBOTSTXT_USER_AGENT", SET, REFUSED, "robots.txt groups are matched by ROBOTS_AGENT, a "
         "token the job's settings set"),
    _row("STATS_CLASS", ANY, REFUSED, "a job's stats are one collector kept in the database "
         "over every worker (crawler.stats), with no class of the spider's own"),
    _row("DOWNLOADER_STATS STATS_DUMP", ANY, MAPPED, BUILT_IN_STATS, "the job's built-in stats"),
    _row("DEPTH_STATS_VERBOSE", ANY, MAPPED, "the job's built-in stats hold request_depth_max, "
         "not the request_depth_count/N counts it adds: Scrapy counts each request yielded, "
         "duplicates too, where the frontier keeps each request once", "the job's built-in "
         "stats"),
    _row("LOG_ENABLED LOG_FILE LOG_FILE_APPEND LOG_FORMAT LOG_DATEFORMAT LOG_LEVEL LOG_STDOUT "
         "LOG_SHORT_NAMES LOG_ENCODING LOG_COLOR LOG_FORMATTER LOG_INSTALL_ROOT_HANDLER "
         "LOG_VERSIONS LOGSTATS_INTERVAL PERIODIC_LOG_DELTA PERIODIC_LOG_STATS "
         "PERIODIC_LOG_TIMING_ENABLED DEFAULT_DROPITEM_LOG_LEVEL RETRY_GIVE_UP_LOG_LEVEL "
         "COOKIES_DEBUG DUPEFILTER_DEBUG SCHEDULER_DEBUG AUTOTHROTTLE_DEBUG "
         "DOWNLOADER_CLIENT_TLS_VERBOSE_LOGGING WARN_ON_GENERATOR_RETURN_VALUE", ANY, MAPPED,
         "a worker's log is the operator's, with the job and URL on every line, and the "
         "spider's self.logger writes into it", "the worker's log"),
    _row("TELNETCONSOLE_ENABLED TELNETCONSOLE_HOST TELNETCONSOLE_PORT TELNETCONSOLE_USERNAME "
         "TELNETCONSOLE_PASSWORD REMOTE_CONTROL_ENABLED REMOTE_CONTROL_JOBS_DIR "
         "REMOTE_CONTROL_TIMEOUT_DEFAULT REMOTE_CONTROL_TIMEOUT_MAX "
         "REMOTE_CONTROL_OUTPUT_MAX_BYTES REMOTE_CONTROL_TRACEBACK_MAX_BYTES MEMDEBUG_ENABLED "
         "EDITOR", ANY, MAPPED,
         "a worker runs pages of every job and has no console of one crawl: operators watch "
         "workers through the metrics, the probes and Flower", "the operator's monitoring"),
    _row("MEMUSAGE_ENABLED MEMUSAGE_CHECK_INTERVAL_SECONDS MEMUSAGE_LIMIT_MB MEMUSAGE_WARNING_MB "
         "MEMUSAGE_NOTIFY_MAIL", ANY, MAPPED, "worker memory is the operator's to watch "
         "(WORKER_MAX_RSS_MB, the probes, the metrics)", "`WORKER_MAX_RSS_MB`"),
    _row("BOT_NAME COMMANDS_MODULE NEWSPIDER_MODULE SPIDER_MODULES SPIDER_LOADER_CLASS "
         "SPIDER_LOADER_WARN_ONLY SPIDER_CONTRACTS TEMPLATES_DIR DEFAULT_ITEM_CLASS", ANY, MAPPED,
         "spiders are installed by operators (CRAWL_SPIDER_MODULES) and run by manage.py "
         "commands, with no Scrapy project around them", "the operator's installation"),
    _row("CONCURRENT_REQUESTS CONCURRENT_ITEMS CONCURRENT_REQUESTS_PER_IP "
         "SCRAPER_SLOT_MAX_ACTIVE_SIZE", ANY, MAPPED,
         "how much runs at once is the workers' concurrency, which is the operator's, and per "
         "host the job's host_concurrency (CONCURRENT_REQUESTS_PER_DOMAIN)",
         "the workers' slots"),
    _row("AUTOTHROTTLE_ENABLED AUTOTHROTTLE_START_DELAY AUTOTHROTTLE_MAX_DELAY "
         "AUTOTHROTTLE_TARGET_CONCURRENCY RANDOMIZE_DOWNLOAD_DELAY DOWNLOAD_DELAY_JITTER", ANY,
         MAPPED, "a host's pace adapts by itself across every worker (the THROTTLE settings), "
         "on top of the job's delay", "the platform's adaptive politeness"),
    _row("DOWNLOAD_SLOTS", SET, REFUSED, "a job has one delay and one concurrency for every host "
         "(delay, host_concurrency), so hosts that need others get a job of their own"),
    _row("HTTPCACHE_ENABLED HTTPCACHE_ALWAYS_STORE HTTPCACHE_DBM_MODULE HTTPCACHE_DIR "
         "HTTPCACHE_EXPIRATION_SECS HTTPCACHE_GZIP HTTPCACHE_IGNORE_HTTP_CODES "
         "HTTPCACHE_IGNORE_MISSING HTTPCACHE_IGNORE_RESPONSE_CACHE_CONTROLS "
         "HTTPCACHE_IGNORE_SCHEMES HTTPCACHE_POLICY HTTPCACHE_STORAGE", ANY, MAPPED,
         "every fetch is live, and what a job fetched stays in its tables and, with "
         "store_bodies, in the body store", "live fetches"),
    _row("REFERER_ENABLED", "off", MAPPED, "the platform sends no Referer header",
         "no Referer header"),
    _row("REFERRER_POLICY", "no-referrer", MAPPED, "the platform sends no Referer header",
         "no Referer header"),
    _row("REFERER_ENABLED", "on", REFUSED, _NO_REFERER),
    _row("REFERRER_POLICY", "another policy", REFUSED, _NO_REFERER),
    _row("REFERRER_POLICIES", SET, REFUSED, _NO_REFERER),
    _row("CLOSESPIDER_ITEMCOUNT", ANY, MAPPED, "once the run has scraped that many items, the "
         "crawl ends with reason closespider_itemcount, pages in flight adding theirs as "
         "Scrapy's do", "the run's item count"),
    _row("CLOSESPIDER_ERRORCOUNT CLOSESPIDER_TIMEOUT "
         "CLOSESPIDER_PAGECOUNT_NO_ITEM CLOSESPIDER_TIMEOUT_NO_ITEM", SET, REFUSED,
         f"{_NO_EQUIVALENT}a job ends when its frontier is empty, at its max_pages "
         "(CLOSESPIDER_PAGECOUNT), or when a callback raises CloseSpider"),
    _row("URLLENGTH_LIMIT", ANY, MAPPED, "the platform leaves longer URLs out of the frontier by "
         "MAX_URL_LENGTH, which a job may lower in its settings", "`MAX_URL_LENGTH`"),
    _row("FILES_STORE FILES_STORE_S3_ACL FILES_STORE_GCS_ACL IMAGES_STORE IMAGES_STORE_S3_ACL "
         "IMAGES_STORE_GCS_ACL", SET, REFUSED, FETCHING_PIPELINES),
    _row("FTP_USER FTP_PASSWORD FTP_PASSIVE_MODE GCS_PROJECT_ID", ANY, MAPPED,
         "the platform fetches http(s) only and writes no ftp:// or gs:// feed, so nothing "
         "here reads them", "nothing"),
    _row("AWS_MAX_POOL_CONNECTIONS AWS_USE_SSL AWS_VERIFY", ANY, REFUSED,
         "the feeds' S3 client takes AWS_ENDPOINT_URL, AWS_REGION_NAME and the credentials, "
         "and keeps its own pool and TLS checks"),
    _row("MAIL_FROM MAIL_HOST MAIL_PORT MAIL_USER MAIL_PASS MAIL_SSL MAIL_TLS", ANY, MAPPED,
         NO_MAIL, "the job's webhook"),
    _row("STATSMAILER_RCPTS", SET, REFUSED, NO_MAIL),
    _row("DOWNLOADER_MIDDLEWARES_BASE SPIDER_MIDDLEWARES_BASE EXTENSIONS_BASE "
         "ITEM_PIPELINES_BASE DOWNLOAD_HANDLERS_BASE FEED_EXPORTERS_BASE FEED_STORAGES_BASE "
         "SPIDER_CONTRACTS_BASE", ANY, REFUSED,
         "a _BASE setting rewrites the list of Scrapy's built-in components, whose work is the "
         "platform's and cannot be taken out"),
)  # fmt: skip

NAMES = frozenset(name for row in SETTINGS for name in row.names)


def verdict(name: str, value: Any) -> Setting | None:
    """The row for Scrapy's setting ``name`` set to ``value``: the first whose values hold it
    (None: no row is for that value, or the name is not Scrapy's)."""
    for row in SETTINGS:
        if name in row.names and _WHEN[row.when](value):
            return row
    return None


def refusal(name: str, value: Any) -> str | None:
    """Why a spider's ``custom_settings`` cannot set ``name`` to ``value`` (None if it can)."""
    row = verdict(name, value)
    return row.why if row is not None and row.verdict == REFUSED else None
