"""What becomes of each Scrapy 2.19 name a spider or its project imports, once its imports are
the platform's (``from scrapy.X import Y`` -> ``from crawlplatform.spiders import Y``): carried
over (the same name, Scrapy's behaviour), mapped (importable, and standing for the platform's
own feature of that purpose) or refused. A refused name's import raises ``ImportError`` with
its sentence (``crawlplatform.spiders.__getattr__``), so a spider module that imports one
fails to import and its job fails at start, saying why; the sentence names what to use
instead. The settings a spider's ``custom_settings`` may hold are in ``scrapysettings.py``.

``docs/spiders.md`` ("Porting a Scrapy spider") shows this table; ``tests/test_porting.py``
holds the two equal.
"""

from __future__ import annotations

from typing import NamedTuple

CARRIED = "carried over"
MAPPED = "mapped"
REFUSED = "refused"


class Name(NamedTuple):
    """Scrapy names that share a verdict and its reason."""

    paths: tuple[str, ...]  # each as Scrapy's docs import it: module and name
    verdict: str  # CARRIED, MAPPED or REFUSED
    to: str  # what stands for them here (MAPPED only)
    why: str  # one sentence; a refused name's import fails with it


def _name(paths: str, verdict: str, why: str, to: str = "") -> Name:
    return Name(tuple(paths.split()), verdict, to, why)


FETCHING_PIPELINES = (
    "a pipeline cannot fetch here, as every request goes through the frontier and the "
    "transport: yield requests for the files from the callback, and store_bodies keeps "
    "their bodies"
)
BUILT_IN_STATS = (
    "Scrapy's built-in stats are computed from the job's tables, and its progress is in "
    "manage.py job status, the API, the dashboard and the metrics"
)
_MEMORY = ("worker memory is the operator's to watch (WORKER_MAX_RSS_MB, the probes, the "
           "metrics)")  # fmt: skip
_CONSOLE = ("a worker runs pages of every job and has no console of one crawl: operators watch "
            "workers through the metrics, the probes and Flower")  # fmt: skip
_NO_TERMINAL = ("a worker has no terminal or browser to open: manage.py parse runs a callback on "
                "one URL and prints what it yields")  # fmt: skip
NO_MAIL = (
    "a worker sends no mail: a job's end is announced by its webhook (webhook_url), and "
    "its stats are in manage.py job status and the API"
)

NAMES: tuple[Name, ...] = (
    _name("scrapy.spiders.Spider scrapy.spiders.CrawlSpider scrapy.spiders.Rule "
          "scrapy.spiders.SitemapSpider scrapy.spiders.XMLFeedSpider "
          "scrapy.spiders.CSVFeedSpider", CARRIED,
          "Scrapy's spider classes with their attributes and methods, made by from_crawler "
          "with the job's arguments, their callbacks run by the workers"),
    _name("scrapy.http.Request scrapy.http.FormRequest scrapy.http.JsonRequest "
          "scrapy.http.Headers", CARRIED,
          "Scrapy's requests, with callback, errback, cb_kwargs, meta, priority and "
          "dont_filter, kept as frontier rows until they are fetched"),
    _name("scrapy.http.Response scrapy.http.TextResponse scrapy.http.HtmlResponse "
          "scrapy.http.XmlResponse scrapy.http.JsonResponse", CARRIED,
          "a callback gets the class Scrapy would give the same answer, with Scrapy's encoding, "
          "text, selectors, urljoin and follow"),
    _name("scrapy.selector.Selector scrapy.selector.SelectorList", CARRIED,
          "made from a response or a text as Scrapy makes them, as subclasses of parsel's "
          "selectors, which are what response.css and response.xpath give"),
    _name("scrapy.item.Item scrapy.item.Field scrapy.loader.ItemLoader", CARRIED,
          "items with declared fields, which itemadapter and itemloaders see as Scrapy's"),
    _name("scrapy.linkextractors.LinkExtractor scrapy.linkextractors.IGNORED_EXTENSIONS "
          "scrapy.linkextractors.lxmlhtml.LxmlLinkExtractor scrapy.link.Link", CARRIED,
          "Scrapy's link extractor, with its arguments and the links it finds"),
    _name("scrapy.exceptions.CloseSpider scrapy.exceptions.DropItem "
          "scrapy.exceptions.IgnoreRequest scrapy.exceptions.NotConfigured "
          "scrapy.exceptions.NotSupported", CARRIED,
          "raised where Scrapy raises them and with the same effect: CloseSpider ends the job, "
          "DropItem drops an item under its reason, NotConfigured keeps a component off"),
    _name("scrapy.spidermiddlewares.httperror.HttpError "
          "scrapy.exceptions.DownloadConnectionRefusedError "
          "scrapy.exceptions.CannotResolveHostError scrapy.exceptions.DownloadTimeoutError "
          "scrapy.exceptions.DownloadFailedError scrapy.exceptions.ResponseDataLossError "
          "twisted.internet.error.DNSLookupError twisted.internet.error.TimeoutError "
          "twisted.internet.error.TCPTimedOutError "
          "twisted.internet.error.ConnectionRefusedError twisted.internet.error.ConnectError "
          "twisted.internet.error.ConnectionLost twisted.web._newclient.ResponseNeverReceived",
          CARRIED, "an errback's failure.check takes the branch it takes under Scrapy, for the "
          "exceptions of Scrapy 2.19 and of older Scrapy alike"),
    _name("scrapy.exceptions.DownloadCancelledError "
          "scrapy.exceptions.UnsupportedURLSchemeError", MAPPED,
          "no fetch is cancelled midway and a request that is not http(s) is left out as off "
          "the job's scope, so no errback gets these, though a check for them imports",
          "exceptions no outcome stands for"),
    _name("twisted.python.failure.Failure", MAPPED,
          "it has the value, request, response, check, trap and getErrorMessage of the "
          "Twisted failure Scrapy passes, without being one", "the failure an errback gets"),
    _name("scrapy.utils.sitemap.Sitemap scrapy.utils.sitemap.sitemap_urls_from_robots "
          "scrapy.utils.iterators.xmliter_lxml scrapy.utils.iterators.csviter "
          "scrapy.utils.gz.gunzip scrapy.utils.gz.gzip_magic_number", CARRIED,
          "the utilities behind the sitemap and feed spiders, with Scrapy's results on the "
          "same bytes"),
    _name("scrapy.utils.python.to_unicode scrapy.utils.python.to_bytes "
          "scrapy.utils.misc.arg_to_iter scrapy.utils.curl.curl_to_request_kwargs", CARRIED,
          "the same small functions, with Scrapy's arguments and results"),
    _name("scrapy.signals scrapy.signalmanager.SignalManager scrapy.signals.spider_opened "
          "scrapy.signals.spider_closed scrapy.signals.item_scraped scrapy.signals.item_dropped "
          "scrapy.signals.item_error scrapy.signals.request_scheduled "
          "scrapy.signals.response_received", CARRIED,
          "these signals are sent with Scrapy's arguments in the worker process that does the "
          "work, to receivers connected through crawler.signals"),
    _name("scrapy.signals.engine_started scrapy.signals.engine_stopped "
          "scrapy.signals.scheduler_empty scrapy.signals.spider_idle scrapy.signals.spider_error "
          "scrapy.signals.memusage_warning_reached scrapy.signals.request_dropped "
          "scrapy.signals.request_reached_downloader scrapy.signals.request_left_downloader "
          "scrapy.signals.response_downloaded scrapy.signals.headers_received "
          "scrapy.signals.bytes_received scrapy.signals.robots_parsed "
          "scrapy.signals.feed_slot_closed scrapy.signals.feed_exporter_closed", MAPPED,
          "a ported module imports them, and connecting to one fails the job at start with "
          "the reason the platform cannot send it", "signals the platform never sends"),
    _name("scrapy.crawler.Crawler", MAPPED,
          "it has the job's settings, spider, stats and signals, and a component that asks it "
          "for anything else, such as its engine, fails the job at start", "the job's crawler"),
    _name("scrapy.settings.Settings scrapy.settings.BaseSettings", MAPPED,
          "the job's settings with the spider's custom_settings under them, read with Scrapy's "
          "getters and never changed once the job runs", "read-only settings"),
    _name("scrapy.statscollectors.StatsCollector", MAPPED,
          "its getters and setters act on the job's stats over every worker, each page's "
          "changes committed with the page", "the job's stats"),
    _name("scrapy.__version__ scrapy.version_info", MAPPED,
          "the Scrapy release whose names and behaviour the API follows, so that a spider's "
          "version check takes the branch written for it", "2.19.0"),
    _name("scrapy.crawler.CrawlerProcess scrapy.crawler.CrawlerRunner "
          "scrapy.crawler.AsyncCrawlerProcess scrapy.crawler.AsyncCrawlerRunner "
          "scrapy.crawler.CrawlerProcessBase scrapy.crawler.CrawlerRunnerBase", REFUSED,
          "a spider runs as a job that the platform's workers share, started with manage.py "
          "crawl --spider, the API or the admin, not by a process of its own"),
    _name("scrapy.utils.project.get_project_settings scrapy.utils.project.data_path "
          "scrapy.utils.project.project_data_dir scrapy.utils.project.inside_project", REFUSED,
          "there is no Scrapy project: a job's settings are the operator's, the job's own and "
          "the spider's custom_settings, which self.settings reads"),
    _name("scrapy.settings.default_settings scrapy.settings.SettingsAttribute "
          "scrapy.settings.get_settings_priority scrapy.settings.iter_default_settings "
          "scrapy.settings.overridden_settings", REFUSED,
          "settings here have no priorities and no Scrapy defaults to list: a spider's own "
          "are its custom_settings, which self.settings reads"),
    _name("scrapy.utils.log.configure_logging scrapy.logformatter.LogFormatter", REFUSED,
          "a worker's logging is the operator's, with the job and URL on every line, and the "
          "spider's self.logger writes into it"),
    _name("scrapy.utils.reactor.install_reactor "
          "scrapy.utils.reactor.is_asyncio_reactor_installed "
          "scrapy.utils.defer.deferred_from_coro scrapy.utils.defer.deferred_to_future "
          "scrapy.utils.defer.maybe_deferred_to_future", REFUSED,
          "there is no Twisted reactor: an async def callback runs on asyncio and awaits "
          "asyncio code directly"),
    _name("scrapy.http.XmlRpcRequest", REFUSED,
          "yield a Request with method POST, the body xmlrpc.client.dumps(params, methodname) "
          "and a Content-Type of text/xml, as this class makes it"),
    _name("scrapy.http.cookies.CookieJar", REFUSED,
          "cookies live in the job's jar, shared by its workers: a request sets its own with "
          "cookies= and chooses a jar with meta cookiejar"),
    _name("scrapy.exceptions.DontCloseSpider", REFUSED,
          "a job ends when its frontier has no URL left, as the platform decides, so no "
          "spider_idle handler can keep it open: yield the requests that keep it going from a "
          "callback"),
    _name("scrapy.exceptions.StopDownload", REFUSED,
          "headers_received and bytes_received are never sent, as a fetch runs in the "
          "platform's transport, which runs no user code: FETCH_MAX_BYTES caps a body"),
    _name("scrapy.exceptions.UsageError", REFUSED,
          "Scrapy's commands are not carried over: manage.py crawl, parse, spiders and export "
          "do their work"),
    _name("scrapy.exceptions.ScrapyDeprecationWarning", REFUSED,
          "nothing here raises Scrapy's deprecation warnings, so there is none to filter"),
    _name("scrapy.exceptions.ContractFail scrapy.contracts.Contract", REFUSED,
          "spider contracts (scrapy check) are not run: manage.py parse runs a callback on one "
          "URL and prints what it yields"),
    _name("scrapy.item.ItemMeta", REFUSED,
          "an Item declares its fields as class attributes without Scrapy's metaclass: "
          "subclass Item instead"),
    _name("scrapy.statscollectors.MemoryStatsCollector "
          "scrapy.statscollectors.DummyStatsCollector", REFUSED,
          "a job's stats are one collector kept in the database over every worker "
          "(crawler.stats), which is why STATS_CLASS is refused too"),
    _name("scrapy.dupefilters.BaseDupeFilter scrapy.dupefilters.RFPDupeFilter "
          "scrapy.utils.request.fingerprint scrapy.utils.request.RequestFingerprinter", REFUSED,
          "requests are deduplicated by Scrapy's fingerprint in the frontier's unique index, "
          "which no filter of the spider's own replaces, and dont_filter skips it as in Scrapy"),
    _name("scrapy.utils.request.request_from_dict scrapy.utils.request.request_to_curl", REFUSED,
          "the platform keeps each request as a frontier row, with no dict or curl form for a "
          "spider to make or read"),
    _name("scrapy.exporters.BaseItemExporter scrapy.exporters.JsonLinesItemExporter "
          "scrapy.exporters.JsonItemExporter scrapy.exporters.CsvItemExporter "
          "scrapy.exporters.XmlItemExporter scrapy.exporters.PickleItemExporter "
          "scrapy.exporters.MarshalItemExporter scrapy.exporters.PprintItemExporter "
          "scrapy.exporters.PythonItemExporter", REFUSED,
          "items are written by the job's FEEDS from its stored items with these exporters' "
          "bytes, once for the whole job, where a pipeline writing files of its own would "
          "write a part on each worker"),
    _name("scrapy.pipelines.files.FilesPipeline scrapy.pipelines.files.FSFilesStore "
          "scrapy.pipelines.files.S3FilesStore scrapy.pipelines.files.GCSFilesStore "
          "scrapy.pipelines.files.FTPFilesStore scrapy.pipelines.files.FilesStoreProtocol "
          "scrapy.pipelines.files.StatInfo scrapy.pipelines.images.ImagesPipeline "
          "scrapy.pipelines.images.ImageException scrapy.pipelines.media.MediaPipeline "
          "scrapy.pipelines.media.FileException scrapy.pipelines.media.FileInfo",
          REFUSED, FETCHING_PIPELINES),
    _name("scrapy.pipelines.ItemPipelineManager scrapy.pipelines.ItemProcessorProtocol", REFUSED,
          "the platform runs the pipelines of ITEM_PIPELINES itself, in every worker that runs "
          "the spider's callbacks"),
    _name("scrapy.mail.MailSender scrapy.extensions.statsmailer.StatsMailer", REFUSED, NO_MAIL),
    _name("scrapy.shell.inspect_response scrapy.shell.Shell "
          "scrapy.utils.response.open_in_browser", REFUSED, _NO_TERMINAL),
    _name("scrapy.utils.response.get_base_url", REFUSED,
          "response.urljoin joins against the page's base, found as get_base_url finds it"),
    _name("scrapy.utils.response.get_meta_refresh", REFUSED,
          "the platform follows a page's meta refresh before its callback as "
          "MetaRefreshMiddleware does, and w3lib.html.get_meta_refresh reads one"),
    _name("scrapy.utils.response.response_status_message", REFUSED,
          "http.HTTPStatus(response.status).phrase is the reason phrase it adds to the status"),
    _name("scrapy.utils.url.url_is_from_any_domain scrapy.utils.url.url_is_from_spider "
          "scrapy.utils.url.url_has_any_extension scrapy.utils.url.add_http_if_no_scheme "
          "scrapy.utils.url.guess_scheme scrapy.utils.url.strip_url", REFUSED,
          "the job's scope leaves requests off its domains and patterns out before they are "
          "kept, and urllib.parse and w3lib.url hold the URL helpers a callback needs"),
    _name("scrapy.utils.misc.load_object scrapy.utils.misc.walk_modules "
          "scrapy.utils.misc.build_from_crawler", REFUSED,
          "the platform loads the components of ITEM_PIPELINES and EXTENSIONS and makes them "
          "by their from_crawler, and importlib loads anything else by its path"),
    _name("scrapy.utils.spider.iterate_spider_output", REFUSED,
          "the platform collects what a callback returns or yields, from generators, async "
          "generators and coroutines alike"),
    _name("scrapy.utils.test.get_crawler", REFUSED,
          "a test makes a spider with from_crawler(Crawler(Settings(custom_settings), None)) "
          "and calls its callbacks with a Response made from a body"),
    _name("scrapy.utils.trackref.object_ref scrapy.utils.trackref.print_live_refs", REFUSED,
          _MEMORY),
    _name("scrapy.utils.httpobj.urlparse_cached", REFUSED,
          "urllib.parse.urlsplit(response.url) gives the parts of a response's URL"),
    _name("scrapy.spidermiddlewares.base.BaseSpiderMiddleware "
          "scrapy.spidermiddlewares.metacopy.MetaCopyDetectionMiddleware", REFUSED,
          "spider middlewares do not run: what a callback yields goes to the frontier and its "
          "items to the pipelines, so their work belongs in the callback or an item pipeline"),
    _name("scrapy.spidermiddlewares.depth.DepthMiddleware", REFUSED,
          "the frontier counts a request's depth and the job's max_depth (DEPTH_LIMIT) caps it"),
    _name("scrapy.spidermiddlewares.httperror.HttpErrorMiddleware", REFUSED,
          "the platform lets error answers through to callbacks as it does "
          "(HTTPERROR_ALLOWED_CODES, HTTPERROR_ALLOW_ALL, handle_httpstatus_list)"),
    _name("scrapy.spidermiddlewares.referer.RefererMiddleware "
          "scrapy.spidermiddlewares.referer.ReferrerPolicy "
          "scrapy.spidermiddlewares.referer.DefaultReferrerPolicy "
          "scrapy.spidermiddlewares.referer.NoReferrerPolicy "
          "scrapy.spidermiddlewares.referer.NoReferrerWhenDowngradePolicy "
          "scrapy.spidermiddlewares.referer.SameOriginPolicy "
          "scrapy.spidermiddlewares.referer.OriginPolicy "
          "scrapy.spidermiddlewares.referer.StrictOriginPolicy "
          "scrapy.spidermiddlewares.referer.OriginWhenCrossOriginPolicy "
          "scrapy.spidermiddlewares.referer.StrictOriginWhenCrossOriginPolicy "
          "scrapy.spidermiddlewares.referer.UnsafeUrlPolicy", REFUSED,
          "the platform sends no Referer header: a request that needs one sets it in its "
          "headers"),
    _name("scrapy.spidermiddlewares.start.StartSpiderMiddleware", REFUSED,
          "the platform reads the start requests once, when the job starts, with no "
          "middleware chain to mark them in"),
    _name("scrapy.spidermiddlewares.urllength.UrlLengthMiddleware", REFUSED,
          "the platform leaves a URL longer than MAX_URL_LENGTH out of the frontier"),
    _name("scrapy.downloadermiddlewares.cookies.CookiesMiddleware", REFUSED,
          "cookies live in the job's jar, shared by its workers, with cookies=, meta cookiejar "
          "and dont_merge_cookies as in Scrapy"),
    _name("scrapy.downloadermiddlewares.defaultheaders.DefaultHeadersMiddleware", REFUSED,
          "the job's headers, which DEFAULT_REQUEST_HEADERS sets, go with every request"),
    _name("scrapy.downloadermiddlewares.downloadtimeout.DownloadTimeoutMiddleware", REFUSED,
          "a fetch is bounded by FETCH_CONNECT_TIMEOUT_S, FETCH_READ_TIMEOUT_S and "
          "FETCH_DEADLINE_S (DOWNLOAD_TIMEOUT), which a request's meta download_timeout lowers"),
    _name("scrapy.downloadermiddlewares.httpauth.HttpAuthMiddleware", REFUSED,
          "set the Authorization header on the requests that need it, since the job's headers "
          "would send it to every host"),
    _name("scrapy.downloadermiddlewares.httpcache.HttpCacheMiddleware "
          "scrapy.extensions.httpcache.DummyPolicy scrapy.extensions.httpcache.RFC2616Policy "
          "scrapy.extensions.httpcache.FilesystemCacheStorage "
          "scrapy.extensions.httpcache.DbmCacheStorage "
          "scrapy.extensions.httpcache.parse_cachecontrol "
          "scrapy.extensions.httpcache.rfc1123_to_epoch", REFUSED,
          "every fetch is live, and what a job fetched stays in its tables and, with "
          "store_bodies, in the body store"),
    _name("scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware", REFUSED,
          "the transport asks for compressed bodies and decodes them itself, within "
          "FETCH_MAX_BYTES"),
    _name("scrapy.downloadermiddlewares.httpproxy.HttpProxyMiddleware", REFUSED,
          "a request goes through one of the job's proxies (proxies, meta proxy), never one "
          "from a worker's environment"),
    _name("scrapy.downloadermiddlewares.offsite.OffsiteMiddleware", REFUSED,
          "the job's scope (allowed_domains, include and exclude patterns) leaves off-site "
          "requests out as it does, but for dont_filter and allow_offsite ones"),
    _name("scrapy.downloadermiddlewares.redirect.RedirectMiddleware "
          "scrapy.downloadermiddlewares.redirect.BaseRedirectMiddleware "
          "scrapy.downloadermiddlewares.redirect.MetaRefreshMiddleware", REFUSED,
          "the platform follows redirects and meta refreshes as they do, within "
          "FETCH_MAX_REDIRECTS (REDIRECT_MAX_TIMES), and meta dont_redirect stops it"),
    _name("scrapy.downloadermiddlewares.retry.RetryMiddleware "
          "scrapy.downloadermiddlewares.retry.get_retry_request", REFUSED,
          "the platform retries failed fetches with backoff (RETRY_MAX_ATTEMPTS, meta "
          "dont_retry), and a callback that wants a page again yields "
          "response.request.replace(dont_filter=True)"),
    _name("scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware", REFUSED,
          "the platform fetches, caches and obeys robots.txt for every worker when the job's "
          "obey_robots (ROBOTSTXT_OBEY) says so"),
    _name("scrapy.downloadermiddlewares.useragent.UserAgentMiddleware", REFUSED,
          "the user agent is the job's (USER_AGENT, user_agents), rotated by the anti-bot "
          "ladder when a host bans one"),
    _name("scrapy.downloadermiddlewares.stats.DownloaderStats "
          "scrapy.downloadermiddlewares.stats.get_header_size "
          "scrapy.downloadermiddlewares.stats.get_status_size "
          "scrapy.extensions.corestats.CoreStats scrapy.extensions.logstats.LogStats "
          "scrapy.extensions.logcount.LogCount scrapy.extensions.periodic_log.PeriodicLog",
          REFUSED, BUILT_IN_STATS),
    _name("scrapy.extensions.memusage.MemoryUsage scrapy.extensions.memdebug.MemoryDebugger",
          REFUSED, _MEMORY),
    _name("scrapy.extensions.throttle.AutoThrottle", REFUSED,
          "a host's pace adapts by itself across every worker (the THROTTLE settings), on top "
          "of the job's delay"),
    _name("scrapy.extensions.telnet.TelnetConsole scrapy.extensions.debug.Debugger "
          "scrapy.extensions.debug.StackTraceDump scrapy.extensions.remote_control.RemoteControl",
          REFUSED, _CONSOLE),
    _name("scrapy.extensions.spiderstate.SpiderState", REFUSED,
          "the attributes start() set go to every worker's spider (spider_state), and a job "
          "resumes from the database after a pause or a crash"),
    _name("scrapy.extensions.feedexport.FeedExporter scrapy.extensions.feedexport.ItemFilter "
          "scrapy.extensions.feedexport.FileFeedStorage "
          "scrapy.extensions.feedexport.S3FeedStorage "
          "scrapy.extensions.feedexport.GCSFeedStorage "
          "scrapy.extensions.feedexport.FTPFeedStorage "
          "scrapy.extensions.feedexport.StdoutFeedStorage "
          "scrapy.extensions.feedexport.BlockingFeedStorage "
          "scrapy.extensions.feedexport.FeedStorageProtocol scrapy.extensions.feedexport.FeedSlot "
          "scrapy.extensions.feedexport.apply_uri_params "
          "scrapy.extensions.postprocessing.PostProcessingManager", REFUSED,
          "the platform writes the job's FEEDS itself, to paths and s3:// URIs, from its "
          "stored items"),
    _name("scrapy.extensions.postprocessing.GzipPlugin "
          "scrapy.extensions.postprocessing.Bz2Plugin "
          "scrapy.extensions.postprocessing.LZMAPlugin", REFUSED,
          "name the plugin by its path, such as scrapy.extensions.postprocessing.GzipPlugin, "
          "in a feed's postprocessing, and the platform applies it"),
    _name("scrapy.spiderloader.SpiderLoader", REFUSED,
          "spiders are installed by operators (CRAWL_SPIDER_MODULES, the crawlplatform.spiders "
          "entry points) and chosen by name in a job"),
)  # fmt: skip

_REFUSED: dict[str, tuple[str, Name]] = {
    path.rpartition(".")[2]: (path, name)
    for name in NAMES
    if name.verdict == REFUSED
    for path in name.paths
}


def refusal(name: str) -> str | None:
    """Why ``name``, imported from the spider API, is refused (None if it is no refused Scrapy
    name): the message its ``ImportError`` carries."""
    found = _REFUSED.get(name)
    if found is None:
        return None
    path, row = found
    return f"{path} is not carried over: {row.why} (docs/spiders.md, Porting a Scrapy spider)"
