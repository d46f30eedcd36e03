"""Every crawl knob in one place, with its unit and meaning.

Read a value with :func:`setting`. The value in force is, in order of precedence: the job's
own ``settings`` JSON (per-job override), the live value (``manage.py config set``, the
admin; ``tasks/live.py``), the environment variable ``CRAWL_<NAME>``, and the default below.
Environment values are parsed to the default's type; per-job and live values are checked by
:func:`problems` when they are saved.

The time budgets nest, and ``tests/test_config.py`` checks that they do:
``FETCH_DEADLINE_S < TASK_SOFT_TIME_LIMIT_S < TASK_TIME_LIMIT_S < VISIBILITY_TIMEOUT_S``,
``BATCH_BUDGET_S + FETCH_DEADLINE_S < TASK_SOFT_TIME_LIMIT_S`` (a message of several URLs
starts its last one within the budget; with the defaults a spider's callback fits in too:
``+ SPIDER_CALLBACK_TIMEOUT_S``), and ``LEASE_RENEW_S`` fits three times into
``LEASE_S``. A page that runs over its fetch deadline fails on its own; a task that hangs past
its time limit is killed (or, in a thread, left behind: its lease is no longer renewed); a
worker renews the leases of the pages it works on, so a lease expires ``LEASE_S`` after its
worker died, not after the longest page could take.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# Fetching
FETCH_CONNECT_TIMEOUT_S = 10.0  # TCP + TLS connect, seconds
FETCH_READ_TIMEOUT_S = 20.0  # longest silence while reading, seconds
FETCH_DEADLINE_S = 60.0  # whole fetch, all redirects included, seconds
FETCH_MAX_BYTES = 10 << 20  # decoded bodies above this are cut off, stored and marked truncated
FETCH_MAX_REDIRECTS = 10  # hops followed before the URL fails as too_many_redirects
EVIDENCE_MAX_BYTES = 64 << 10  # of an error answer's body, kept for ban detection and review
POOL_HOSTS = 256  # hosts whose idle connections a process keeps (least recently used go first)
POOL_PER_HOST = 32  # idle connections kept per host and guard policy
POOL_POLICIES = 16  # guard policies with pools of their own at once (a job's networks make one)
USER_AGENT = "crawlplatform/1.0 (+https://github.com/crawlplatform)"  # default job user agent
ROBOTS_AGENT = "crawlplatform"  # robots.txt groups match this token, whatever UA is presented

RESOLVE = ""  # host=address overrides of name resolution, comma-separated ("host=": no address)
ALLOWED_NETWORKS = ""  # CIDRs that may be fetched besides public addresses, comma-separated

# TLS trust of the fetcher (see tasks/fetch/trust.py); REQUESTS_CA_BUNDLE and SSL_CERT_FILE
# in the environment replace the default bundle (certifi's), as in requests and OpenSSL
CA_BUNDLE = ""  # PEM file, or directory of PEM files, of CAs trusted besides the default ones
CA_BUNDLE_ONLY = False  # trust CA_BUNDLE alone, not the default bundle
CLIENT_CERT = ""  # PEM client certificate chain presented to servers that ask for one (mTLS)
CLIENT_KEY = ""  # PEM private key of CLIENT_CERT ("": the key is in CLIENT_CERT's file)
TLS_VERIFY = True  # check certificates; a job may turn it off only with web.skip_tls_verify

# Content: the body store and extraction (see tasks/content/bodies.py, extraction.py)
BODY_MAX_BYTES = 10 << 20  # raw bodies above this are not kept in the body store (the page is)
BODY_ZSTD_LEVEL = 1  # zstd level of stored bodies (1 fastest .. 19; 3: 5% smaller, 70% more CPU)

# Retries of one URL (transient outcomes: timeouts, resets, 5xx, 429, 408); see tasks/frontier/
RETRY_MAX_ATTEMPTS = 4  # total attempts, not retries; checked at every claim, sweep and retry
RETRY_TIMEOUT_ATTEMPTS = 2  # a timeout ends the URL from this attempt on (it holds a worker long)
RETRY_BACKOFF_BASE_S = 2.0  # first wait; doubles each attempt, half of it random (equal jitter)
RETRY_BACKOFF_MAX_S = 600.0  # cap on one wait, and on an honoured Retry-After, seconds

# Scope
MAX_URL_LENGTH = 2048  # longer URLs are not added to the frontier
TITLE_MAX_CHARS = 1000  # a page's title is cut to this many characters
PATTERN_MAX_LENGTH = 1000  # a job's regexes (scope, path caps, extraction) are this long at most
LINK_CACHE_SIZE = 20_000  # entries per link cache, per worker process and job (a few MB each)
LINK_CACHE_JOBS = 16  # jobs whose link caches a worker process keeps (more: all are dropped)
SEED_CHUNK = 50_000  # seed-file lines canonicalized and committed together (manage.py seed)

# Politeness (per host, across every worker; see tasks/fetch/politeness.py and robots.py)
HOST_MAX_WAIT_S = 2.0  # a worker waits this long for its host's slot at most; else re-queued
THROTTLE_WINDOW_S = 30.0  # half-life of a host's recent outcome counts, seconds
THROTTLE_MIN_SIGNALS = 3.0  # overload signals (decayed count) before a host can be struggling
THROTTLE_SIGNAL_RATIO = 0.5  # share of recent outcomes that are overload signals: struggling
THROTTLE_START_DELAY_S = 0.5  # a struggling host's first adaptive delay, seconds
THROTTLE_HALF_LIFE_S = 10.0  # the adaptive delay halves every this many seconds
THROTTLE_MAX_DELAY_S = 60.0  # cap on a host's adaptive delay, seconds
THROTTLE_SLOW_LATENCY_S = 5.0  # a response slower than this is an overload signal, seconds
THROTTLE_LATENCY_FACTOR = (
    1.0  # a struggling host waits at least its latency x this between requests
)
ROBOTS_TTL_S = 86400  # robots.txt is fetched again after this, seconds
ROBOTS_ERROR_TTL_S = 2.0  # a 5xx or unreachable robots.txt is asked for again after this, seconds
ROBOTS_LOCAL_S = 60.0  # a parsed robots.txt is kept in a process this long before Redis is asked, s
ROBOTS_LOCAL_MAX = 10_000  # parsed robots.txt files kept per process

# Anti-bot: identities, ban detection and the ladder (see tasks/fetch/ladder.py)
PROXY_REST_S = 300.0  # a banned or failing proxy gets no requests this long (doubling), seconds
IDENTITY_BURN_S = 3600.0  # a host does not go back to an identity it rotated away from, seconds
IDENTITY_REST_S = 5.0  # a banned identity's first park on a host until a ban's length is seen, s
IDENTITY_REST_MAX_S = 45.0  # cap on one park (doubling while refused), unless Retry-After says, s
# How long a host may refuse every identity (no page let in meanwhile), and a URL be refused,
# before its waiting URLs end as banned (parked for review); a ban never spends an attempt
BAN_PATIENCE_S = 300.0  # seconds
PROXY_FAILURES = 3  # bans or connection errors in a row (any host) that send a proxy to rest
BAN_MARKERS = (  # body markers of a CAPTCHA or challenge page (comma-separated, any case)
    "g-recaptcha,grecaptcha,h-captcha,hcaptcha.com,cf-turnstile,challenges.cloudflare.com,"
    "cf-chl-,cf_chl_,verify you are human,are you a robot,unusual traffic from your,"
    "confirm you are a human,confirm you are human,pardon our interruption,"
    "access to this page has been denied,px-captcha,captcha-delivery.com,"
    "incapsula incident id,_incapsula_resource,checking your browser before accessing"
)
BAN_URL_MARKERS = (  # in a final URL (comma-separated, any case)
    "/captcha,/challenge,cdn-cgi/challenge-platform,/blocked,/are-you-human,/px-captcha,"
    "/_incapsula_resource"
)
BAN_WORDS = (  # phrases of a tiny block page (comma-separated, any case)
    "access denied,been blocked,request blocked,forbidden,not allowed to access,"
    'automated requests,automated access,unusual activity,"rate limited",been rate limited,'
    "rate limit exceeded,too many requests,requests too quickly,request unsuccessful,"
    "temporarily blocked,are you a human,are you human,zugriff verweigert,accès refusé,"
    "acces refuse,acceso denegado,accesso negato,acesso negado,toegang geweigerd"
)
BAN_TINY_MAX_BYTES = 16 << 10  # a 2xx page below this size that speaks of a block (BAN_WORDS) ...
BAN_TEXT_MAX_CHARS = 500  # ... is a block page if its visible text is this short, its title or
BAN_TINY_RATIO = 0.1  # h1 says so, or it is below this share of the host's usual page size
BAN_SCAN_BYTES = 256 << 10  # ban markers are looked for in this many first bytes of a body
LADDER_CLIMB_BANS = 3  # identity bans in a row, no page let in between, that climb a level
LADDER_DESCEND_SUCCESSES = 20  # successes in a row, after LADDER_QUIET_S, for one level down
LADDER_QUIET_S = 300.0  # no ban for this long before a host steps down, seconds
LADDER_BACKOFF_DELAY_S = 5.0  # level 1 and up, every identity parked: the host's pace, at least, s
LADDER_MAX_LEVEL = 4  # 0 normal, 1 back off, 2 rotate identity, 3 render, 4 top (all refused)
REVIEW_BODY_CHARS = 256 << 10  # of a parked URL's last answer, kept for the person reviewing it
CHROMIUM_PATH = "/usr/bin/chromium"  # the browser render workers drive (Debian's package)
RENDER_SOCKET_WAIT_S = 3.0  # s after network idle a page's unanswered WebSockets are waited for
RENDER_CONCURRENCY = 2  # pages a render worker (manage.py crawl starts one) renders at once
# false: no render worker serves this platform, so no page is handed to one (a job's render
# acts as never); manage.py crawl sets it for its workers where Chromium is missing
RENDER_WORKERS = True
# true: Chromium runs without its sandbox. Only where the container cannot give it one (its
# user namespaces, or a worker running as root); docs/operations.md, "Security"
RENDER_NO_SANDBOX = False

# Circuit breaker (per job and host; see tasks/fetch/circuit.py)
CIRCUIT_FAILURES = 3  # consecutive host-level failures (refused, DNS, TLS, connect timeout) ...
CIRCUIT_MIN_SPAN_S = 2.0  # ... spread over at least this long open the circuit, seconds
CIRCUIT_COOLDOWN_S = 30.0  # an open circuit lets one probe through after this, seconds
CIRCUIT_ANSWERED_S = 86400.0  # a host is "answered before" this long after its last answer, s
ROBOTS_MAX_BYTES = 500 << 10  # robots.txt beyond this is ignored (RFC 9309 asks for 500 KiB)

# Scheduler, leases and the broker
SCHEDULER_TICK_S = 0.05  # passes are at most two of these apart while workers take messages, s
SCHEDULER_IDLE_S = 5.0  # longest sleep of an idle scheduler (a wake-up or due work ends it)
SCHEDULER_WAKE_S = 1.0  # a job's own sleep up to this long is not cut short by a worker's nudge, s
SCHEDULER_BATCH = 500  # URLs released per job per pass at most
LEADER_TTL_S = 5.0  # a dead leader's lease runs out after this; a standby then takes over, s
DUE_CACHE_S = 1.0  # a job's next due time is read at most this often (a wake-up rereads), s
SLOTS_CACHE_S = 2.0  # the workers' slots are read from their registry at most this often, s ...
NO_SLOTS_CACHE_S = 0.25  # ... or this often while none is registered or their count moves, s
READY_PER_JOB = 256  # messages of one job waiting in the broker at most
READY_MIN = 8  # messages of one job the broker may hold whatever its consumption rate
DISPATCH_LOOKAHEAD_S = 0.03  # ready messages per job = its consumption rate x this, seconds
DISPATCH_BATCH = 16  # URLs one message may carry (fast pages of a job; 1: a message per URL)
DISPATCH_BATCH_S = 1.0  # a message holds about this much of a worker slot's time at most, s
DISPATCH_AT_ONCE_S = 0.01  # a message may reach a URL this long before its host's slot opens, s
SLOT_TIME_KEEP_S = 600.0  # a job's slot time its workers report is kept this long after the last, s
SLOT_TIME_MEMORY = 32  # URLs: a job's slot time is smoothed over about this many of its last
BATCH_BUDGET_S = 5.0  # a message starts no URL after working this long: the rest go back, s
JOB_STATE_CHECK_S = 1.0  # a message looks whether its job still runs at most this often, s
SLOT_ASIDE_S = 0.05  # a URL whose slot opens this much later waits aside: the next URLs go first, s
SLOT_LATE_S = 0.002  # a request leaving this late for its slot holds the host's next a pace away, s
JOB_CACHE_S = 10.0  # a worker reads a job's configuration at most this often (edits: at once), s
# Probe files live in the container's own /tmp (an emptyDir in k8s): only it writes there.
SCHEDULER_HEARTBEAT_FILE = "/tmp/crawl-scheduler-heartbeat"  # noqa: S108 touched every turn
SCHEDULER_HORIZON_S = 2.0  # a polite host gets URLs released this far ahead of its slots
LEASE_S = 10.0  # a worker's claim on a URL, renewed while it works; expired: back to the queue
LEASE_RENEW_S = 3.0  # how often a worker renews the leases of the pages it works on, seconds
SWEEP_INTERVAL_S = 2.0  # how often expired leases and lost messages are looked for, seconds
SCHEDULED_STALE_S = 10.0  # a released URL nobody claimed this long has its message sent again
LEASE_RENEW_CHUNK = 200  # leases renewed per statement (SQLite caps an expression's depth)
JOB_DELETE_BATCH = 5000  # rows deleted per statement when a job is deleted
CHANNEL_WEIGHTS_CACHE_S = 1.0  # the weights are read at most this often (a change is announced), s
CHANNEL_SERVED_CACHE_S = 5.0  # which channels have online workers is read at most this often, s
TASK_SOFT_TIME_LIMIT_S = 90.0  # a page still running after this raises SoftTimeLimitExceeded
TASK_TIME_LIMIT_S = 120.0  # hard kill of a stuck task (prefork pool)
VISIBILITY_TIMEOUT_S = 300  # an unacked message goes back to the queue after this, seconds
UNACKED_RESTORE_INTERVAL_S = 10  # how often a worker looks for unacked messages to restore

# Worker process
WORKER_MAX_RSS_MB = 1024  # a worker above this resident memory restarts itself between tasks
MEMORY_CHECK_EVERY = 50  # tasks between two memory checks
HEARTBEAT_FILE = "/tmp/crawl-worker-heartbeat"  # noqa: S108 touched by the worker's loop
READY_FILE = "/tmp/crawl-worker-ready"  # noqa: S108 exists while the worker consumes
HEARTBEAT_INTERVAL_S = 5.0  # how often the heartbeat is written
HEARTBEAT_STALE_S = 30.0  # an older heartbeat fails the liveness probe
WORKER_METRICS_PORT = 0  # a worker serves Prometheus metrics on this port (0: off)
WORKER_PROBE_PORT = 0  # a worker serves /livez and /readyz on this port (0: off)
WORKER_MEMORY_GROWTH_MB_PER_MIN = 100.0  # /livez fails (and the worker exits warm) above this
WORKER_BACKLOG_MAX = 100_000  # /readyz fails above this many messages (ready + in flight) queued
DB_RETRY_S = 5  # a task that cannot reach the database is retried after this (a countdown)
WORKER_HEAP_TRIM_S = 30.0  # a threads-pool worker gives its free heap back this often (0: never), s
WORKER_STARTUP_GRACE_S = 15.0  # a crawl command's worker that exits sooner has "died at start", s
WORKER_QUICK_DEATHS = 3  # workers dead at start in a row before the crawl command gives up
# The statements every page and release runs are prepared once per PostgreSQL connection;
# off behind a pooler in transaction mode that does not keep them (PgBouncer before 1.21).
# A property of the connections: read from the environment or live settings, not per job.
DB_PREPARE = True

# Checkpoints
CHECKPOINT_INTERVAL_S = 60.0  # periodic checkpoint of every running job, seconds

# Outages of the database or Redis (tasks/outage.py), and the crawl command
OUTAGE_BACKOFF_MIN_S = 0.5  # first wait between two tries while the database or Redis is away
OUTAGE_BACKOFF_MAX_S = 10.0  # longest wait between two tries, seconds
OUTAGE_PATIENCE_S = 600.0  # a database away longer than this ends manage.py crawl (exit 1), s
PROGRESS_POLL_S = 0.25  # manage.py crawl reads its job's state this often between progress lines

# Live configuration (tasks/live.py)
LIVE_RESYNC_S = 30.0  # live values are read again this often whatever the channel said, seconds
LIVE_FIRST_LOAD_WAIT_S = 5.0  # a process starting waits this long at most for the live values, s

# Metrics (web/metrics.py)
METRICS_THROTTLE_HOSTS_MAX = 1000  # hosts whose adaptive delay is reported at most
METRICS_DUE_COUNT_MAX = 10_000  # due URLs counted per job at most: plenty to size any worker fleet
METRICS_STATS_PER_JOB = 50  # crawler.stats names exported per running or paused job (by name)

# Canary analysis (tasks/frontier/canary.py): a channel with part of the weight against the
# channel with the most, over a sliding window
CANARY_WINDOW_S = 120.0  # outcomes of this long ago and since are compared, seconds
CANARY_MIN_SAMPLES = 30  # attempts a canary makes in the window before it is judged
CANARY_FAIL_MARGIN = 0.15  # failed share above the stable channel's that rolls it back
CANARY_BAN_MARGIN = 0.10  # ban-detected share above the stable channel's that rolls it back
CANARY_PARSE_MARGIN = 0.05  # parse-error share above the stable channel's that rolls it back
CANARY_LATENCY_FACTOR = 2.0  # a p95 latency above the stable one's x this (and +1 s): back
CANARY_STEPS = "5,10,30,100"  # weights a canary steps up through while it stays healthy, %
CANARY_STEP_MIN_S = 300.0  # a step lasts at least this long (and its window is full), seconds
CANARY_SLOT_S = 10  # outcome counts are kept per channel in slots this long, seconds
CANARY_FLUSH_S = 1.0  # a worker process adds its counts to Redis at most this often, seconds
CANARY_ANALYSE_EVERY_S = 2.0  # the scheduler judges canaries this often, seconds

# Spiders (tasks/content/spiders.py, callbacks.py, rows.py, items.py, stats.py; docs/spiders.md)
SPIDER_MODULES = ""  # modules scanned for Spider subclasses, comma-separated (CRAWL_SPIDER_MODULES)
ITEM_PIPELINES = ""  # the operator's item pipelines: dotted class paths, comma-separated, in order
EXTENSIONS = ""  # the operator's extensions (Scrapy's EXTENSIONS): as ITEM_PIPELINES, every spider
SPIDER_CALLBACK_TIMEOUT_S = 20.0  # one callback's run, all it yields included, seconds
SPIDER_MAX_YIELDS = 50_000  # items and requests one callback may yield; more fail the URL
SPIDER_REQUEST_MAX_BYTES = 64 << 10  # a stored request's headers, cb_kwargs and meta as JSON
SPIDER_BODY_MAX_BYTES = 1 << 20  # a request's body, bytes
ITEM_MAX_BYTES = 1 << 20  # one item as JSON, bytes; a bigger one is dropped as too_large
SPIDER_TRACEBACK_LINES = 12  # last lines of a callback's traceback kept on its URL
PIPELINES_CHECK_S = 5.0  # a worker closes the pipelines of jobs that ended this often, seconds
STATS_CACHE_S = 2.0  # a page's read of its job's crawler.stats is kept this long, seconds ...
STATS_READ_SHARE = 0.05  # ... or longer: a read is kept its cost / this (a pass over the rows)
STATS_PAGE_MAX_NAMES = 1000  # stats one page (or one open, close, start) may change; more raise

# Feeds of spider jobs, Scrapy's settings of these names (tasks/content/feeds.py, docs/spiders.md):
# a spider's custom_settings of the same name win, as in Scrapy; a job cannot set them (it may
# turn them off: SPIDER_FEEDS)
FEEDS = ""  # JSON {URI: options} as Scrapy's FEEDS, written when a spider job's run finishes
SPIDER_FEEDS = True  # a spider job writes its FEEDS; crawl --output turns it off, as Scrapy's -o
FEED_EXPORT_ENCODING = ""  # encoding of the feeds ("": UTF-8, JSON's non-ASCII as \u escapes)
FEED_EXPORT_FIELDS = ""  # fields written, in order: comma-separated or JSON ("": every field)
FEED_EXPORT_INDENT = 0  # spaces per level in json and xml feeds (0: an item a line)
FEED_STORE_EMPTY = True  # a feed of a run without items is written (empty) all the same
FEED_EXPORT_BATCH_ITEM_COUNT = 0  # items per file of a feed (0: one file; else %(batch_id)d)

# Completion webhooks (tasks/frontier/webhooks.py)
WEBHOOK_ATTEMPTS = 6  # calls of a job's webhook at most (a 5xx, 408, 429 or no answer: again)
WEBHOOK_RETRY_S = 5.0  # first wait before calling again; doubles each attempt, seconds
WEBHOOK_TIMEOUT_S = 10.0  # connect and read timeout of one call, seconds
WEBHOOK_RESEND_S = 120.0  # a notification still pending this long is sent again, seconds
WEBHOOK_RESENDS = 3  # ... this many times at most; then it is recorded as failed
WEBHOOK_DEADLINE_S = 30.0  # one call's whole exchange, however slowly the receiver answers, s


def _parse(raw: str, default: Any) -> Any:
    if isinstance(default, bool):
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    return raw


# Read once, when a process starts (Celery's time limits and transport options, probe files,
# ports, pools): a live change of these would not take effect, so it is refused.
RESTART_ONLY = frozenset({
    "TASK_SOFT_TIME_LIMIT_S", "TASK_TIME_LIMIT_S", "VISIBILITY_TIMEOUT_S",
    "UNACKED_RESTORE_INTERVAL_S", "HEARTBEAT_INTERVAL_S", "HEARTBEAT_FILE", "READY_FILE",
    "SCHEDULER_HEARTBEAT_FILE", "WORKER_METRICS_PORT", "WORKER_PROBE_PORT",
    "RENDER_CONCURRENCY", "LINK_CACHE_SIZE", "POOL_HOSTS", "POOL_PER_HOST",
    "RENDER_NO_SANDBOX", "WORKER_HEAP_TRIM_S",
})  # fmt: skip
_SETTING_TYPES = bool | int | float | str
live: dict[str, Any] = {}  # live values in force in this process (tasks/live.py keeps them)


# What a job may set in its own ``settings``, and within which bounds; every other setting is
# the operator's (environment and live configuration only). ``PLATFORM`` as the upper bound: at
# most the operator's value, so a job may be stricter than the platform, never looser. A string
# setting's bounds are its length. Settings that widen what the platform may reach need the
# permission named in ``JOB_PERMISSIONS`` (staff have it and can grant it).
PLATFORM = None  # as an upper bound: the operator's value
JOB_SETTINGS: dict[str, tuple[float, float | str]] = {
    "USER_AGENT": (1, 512), "ROBOTS_AGENT": (1, 100), "ALLOWED_NETWORKS": (0, 2000),
    "FETCH_CONNECT_TIMEOUT_S": (0.1, PLATFORM), "FETCH_READ_TIMEOUT_S": (0.1, PLATFORM),
    "FETCH_DEADLINE_S": (0.1, PLATFORM), "FETCH_MAX_BYTES": (1024, PLATFORM),
    "FETCH_MAX_REDIRECTS": (0, PLATFORM), "BODY_MAX_BYTES": (0, PLATFORM),
    "MAX_URL_LENGTH": (16, PLATFORM), "TITLE_MAX_CHARS": (0, PLATFORM),
    "RETRY_MAX_ATTEMPTS": (1, 20), "RETRY_TIMEOUT_ATTEMPTS": (1, 20),
    "RETRY_BACKOFF_BASE_S": (0, 3600), "RETRY_BACKOFF_MAX_S": (0, 86400),
    "HOST_MAX_WAIT_S": (0, PLATFORM), "THROTTLE_WINDOW_S": (1, 3600),
    "THROTTLE_MIN_SIGNALS": (1, 1000), "THROTTLE_SIGNAL_RATIO": (0, 1),
    "THROTTLE_START_DELAY_S": (0, 3600), "THROTTLE_HALF_LIFE_S": (0.1, 3600),
    "THROTTLE_MAX_DELAY_S": (0, 3600), "THROTTLE_SLOW_LATENCY_S": (0.1, 600),
    "THROTTLE_LATENCY_FACTOR": (0, 100), "ROBOTS_TTL_S": (60, 30 * 86400),
    "ROBOTS_ERROR_TTL_S": (0.1, 86400), "PROXY_REST_S": (0.1, 86400),
    "IDENTITY_BURN_S": (0, 7 * 86400), "IDENTITY_REST_S": (0, 3600),
    "IDENTITY_REST_MAX_S": (0, 3600), "BAN_PATIENCE_S": (0, 86400),
    "PROXY_FAILURES": (1, 100), "BAN_MARKERS": (0, 4000),
    "BAN_URL_MARKERS": (0, 4000), "BAN_WORDS": (0, 4000), "BAN_TINY_RATIO": (0, 1),
    "BAN_TINY_MAX_BYTES": (0, 1 << 20), "BAN_TEXT_MAX_CHARS": (0, 100_000),
    "LADDER_CLIMB_BANS": (1, 100),
    "LADDER_DESCEND_SUCCESSES": (1, 100_000), "LADDER_QUIET_S": (0.1, 86400),
    "LADDER_BACKOFF_DELAY_S": (0, 3600), "LADDER_MAX_LEVEL": (0, PLATFORM),
    "CIRCUIT_FAILURES": (1, 1000), "CIRCUIT_MIN_SPAN_S": (0, 3600),
    "CIRCUIT_COOLDOWN_S": (1, 86400), "SCHEDULER_BATCH": (1, PLATFORM),
    "READY_PER_JOB": (1, PLATFORM), "READY_MIN": (1, PLATFORM), "DISPATCH_BATCH": (1, PLATFORM),
    "DISPATCH_BATCH_S": (0.01, PLATFORM), "SCHEDULER_HORIZON_S": (0, PLATFORM),
    "LINK_CACHE_SIZE": (0, PLATFORM), "TLS_VERIFY": (0, 1),
    "SPIDER_CALLBACK_TIMEOUT_S": (0.1, PLATFORM), "SPIDER_MAX_YIELDS": (1, PLATFORM),
    "ITEM_MAX_BYTES": (2, PLATFORM), "SPIDER_FEEDS": (0, 1),
}  # fmt: skip
JOB_PERMISSIONS = {"ALLOWED_NETWORKS": "web.change_crawl_network",
                   "TLS_VERIFY": "web.skip_tls_verify"}  # fmt: skip
JOB_PRIORITY_BAND = 4  # job priorities above this need the web.raise_crawl_priority permission


# os.environ's own mapping of encoded names: a setting read 30-odd times a page is mostly unset,
# and os.environ.get raises and catches two KeyErrors for each miss (2-4% of a worker's time).
_ENVIRON = os.environ._data  # noqa: SLF001
_ENV_NAMES: dict[str, bytes] = {}


def _operators(name: str, default: Any) -> Any:
    if name in live:
        return live[name]
    key = _ENV_NAMES.get(name)
    if key is None:
        key = _ENV_NAMES[name] = os.environ.encodekey(f"CRAWL_{name}")
    if key not in _ENVIRON:
        return default
    raw = os.environ.get(f"CRAWL_{name}")
    return default if raw is None else _parse(raw, default)


def _job_value(name: str, value: Any, default: Any) -> Any:
    """A job's stored override as the setting's type, or None when it is not one a job may
    have (out of its bounds or the table: values saved before the bounds held are ignored)."""
    if name not in JOB_SETTINGS or _value_problem(name, value, default):
        return None
    low, high = JOB_SETTINGS[name]
    if isinstance(default, str):
        return value if low <= len(value) <= high else None
    typed = type(default)(value)
    ceiling = _operators(name, default) if high == PLATFORM else high
    return typed if low <= typed <= ceiling else None


def setting(name: str, job: Any = None) -> Any:
    """The value of crawl setting ``name``: the job's override (when the job may set it, within
    its bounds), then the live value (``tasks/live.py``), then ``CRAWL_<NAME>``, then the
    default."""
    default = globals()[name]
    overrides = getattr(job, "settings", None) or {}
    if name in overrides and (value := _job_value(name, overrides[name], default)) is not None:
        return value
    return _operators(name, default)


def names() -> list[str]:
    """All setting names, for validation of per-job overrides."""
    return [n for n, v in globals().items() if n.isupper() and isinstance(v, _SETTING_TYPES)]


def _value_problem(name: str, value: Any, default: Any) -> str:
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, (int, float)):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok and 0 <= value <= sys.float_info.max  # JSON has whole numbers floats have not
        ok = ok and (isinstance(default, float) or float(value).is_integer())
    else:
        ok = isinstance(value, str)
    return "" if ok else f"{name}: {value!r} is not a {KIND[type(default)]}"


def problems(overrides: Any) -> list[str]:
    """Why ``overrides`` (live values) cannot be used: unknown names, values of the wrong
    type."""
    if not isinstance(overrides, dict):
        return ["must be an object of SETTING: value"]
    known = set(names())
    found = []
    for name, value in overrides.items():
        if name not in known:
            found.append(f"{name}: no such setting")
        elif problem := _value_problem(name, value, globals()[name]):
            found.append(problem)
    return found


def job_problems(overrides: Any, may: Any = lambda permission: True) -> list[str]:
    """Why a job cannot have ``overrides`` as its ``settings``: what :func:`problems` says,
    settings only an operator sets, values beyond their bounds, and settings that need a
    permission ``may(permission)`` says the job's owner lacks."""
    found = problems(overrides)
    if found:
        return found
    for name, value in overrides.items():
        default = globals()[name]
        if name not in JOB_SETTINGS:
            found.append(f"{name}: an operator setting (the environment or manage.py config), "
                         "not a job's")  # fmt: skip
            continue
        low, high = JOB_SETTINGS[name]
        if high == PLATFORM:
            ceiling, what = _operators(name, default), "the platform's value"
        else:
            ceiling, what = high, str(high)
        size = len(value) if isinstance(default, str) else value
        if not low <= size <= ceiling:
            unit = " characters" if isinstance(default, str) else ""
            found.append(f"{name}: {value!r} is outside {low:g}..{ceiling:g}{unit} "
                         f"(at most {what})")  # fmt: skip
        if (permission := JOB_PERMISSIONS.get(name)) and not may(permission):
            found.append(f"{name}: needs the {permission} permission")
    return found


KIND = {bool: "true/false", int: "whole number >= 0", float: "number >= 0", str: "string"}
