"""Django settings, twelve-factor: everything comes from the environment.

``DATABASE_URL``
    default: SQLite (WAL) in ``CRAWL_DATA_DIR``; production: ``postgres://user@host:5432/db``
``REDIS_URL``
    default: a private redis-server on a unix socket in ``CRAWL_DATA_DIR``; broker, locks,
    rate limits
``CRAWL_DATA_DIR``
    default ``.crawldata`` beside ``manage.py``: SQLite file, private Redis, worker logs

Other variables (default in brackets):

- ``CELERY_BROKER_URL`` [``REDIS_URL``]: the broker: Redis, or RabbitMQ with an ``amqp://``
  URL (``docs/reliability.md`` says which to choose); Redis stays for everything else
- ``CRAWL_AMQP_QUEUE_TYPE`` [``quorum``]: on RabbitMQ, ``quorum`` (replicated) or ``classic``
  queues (a single copy, but all ten priority levels; ``tasks/broker.py``)
- ``CRAWL_QUEUE`` [``crawl``]: the crawl queue of the ``main`` channel; channel X's queue is
  ``crawl.X`` (``tasks/frontier/channels.py``)
- ``CRAWL_CHANNEL`` [``main``]: the release channel this process's workers belong to (e.g.
  ``blue``, ``green``, ``canary``): they consume its queue and mark the pages they store
- ``CRAWL_VERSION`` [the release, ``crawlplatform.__version__``]: the version workers report
  and mark their pages with (an image's tag)
- ``SECRET_KEY`` [a random key made once and kept in ``CRAWL_DATA_DIR``]: set it in every
  deployment; the web process refuses to start without a strong one
- ``DEBUG`` [``false``]: Django debug pages
- ``ALLOWED_HOSTS`` [``localhost,127.0.0.1,[::1]``]: comma-separated; the web process
  refuses ``*``
- ``CSRF_TRUSTED_ORIGINS`` [none]: e.g. ``https://crawl.example.com``, the admin's origin
  behind a TLS proxy
- ``SECURE_PROXY_SSL_HEADER`` [unset]: ``HTTP_X_FORWARDED_PROTO,https`` trusts the TLS
  proxy's header
- ``SECURE_COOKIES`` [``false``]: session and CSRF cookies only over HTTPS
- ``SECURE_SSL_REDIRECT`` [``false``]: redirect HTTP to HTTPS (probes and ``/metrics`` exempt)
- ``SECURE_HSTS_SECONDS`` [``0``]: ``Strict-Transport-Security`` max-age, subdomains included
- ``LOG_LEVEL`` [``INFO``]: root log level (also of the workers ``manage.py crawl`` starts;
  deployed workers take ``--loglevel`` from their command line)
- ``LOG_FORMAT`` [``text``]: ``json`` makes every line a process writes one JSON object, with
  ``crawl_job``, ``url_id``, ``url``, ``task_id``, ``spider``, ``worker``, ``channel`` and
  ``version`` wherever a line has them (``json`` on Kubernetes, ``k8s/platform/config.yaml``;
  the fields: ``docs/operations.md``)
- ``CELERY_WORKER_SEND_TASK_EVENTS`` [``false``]: task events for Flower's task list (on in
  compose and k8s)
- ``HEALTH_TOKEN`` [unset]: bearer token for ``/healthz/details`` (staff users need none)
- ``METRICS_TOKEN`` [unset]: bearer token for ``/metrics``; unset, only loopback clients
  are served
- ``DB_POOL_MAX_SIZE`` [``0``]: >0, a pool of at most this many connections per process
- ``DB_CONN_MAX_AGE`` [``300``]: without a pool, one connection per thread, kept this long
- ``BODY_STORE`` [``CRAWL_DATA_DIR/bodies``]: where raw page bodies are kept: a directory,
  or ``s3://BUCKET/PREFIX`` for S3-compatible object storage, with ``AWS_S3_ENDPOINT_URL``
  (e.g. ``http://minio:9000``; unset: AWS), ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``
  and ``AWS_S3_REGION_NAME`` [``us-east-1``]

Crawl knobs (timeouts, retries, leases, ...) live in ``tasks/defaults.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from crawlplatform import logs
from crawlplatform.embedded import socket_path
from crawlplatform.security import local_secret_key
from tasks import defaults as crawl

env = environ.Env()
BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env.str("CRAWL_DATA_DIR", default=str(BASE_DIR / ".crawldata"))).resolve()

SECRET_KEY = env.str("SECRET_KEY", default="") or local_secret_key(DATA_DIR)
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
if proxy_header := env.list("SECURE_PROXY_SSL_HEADER", default=[]):
    SECURE_PROXY_SSL_HEADER = tuple(proxy_header[:2])
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env.bool("SECURE_COOKIES", default=False)
SESSION_COOKIE_HTTPONLY = True
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
SECURE_REDIRECT_EXEMPT = [r"^livez$", r"^readyz$", r"^startupz$", r"^metrics$"]  # in-cluster
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_PRELOAD = SECURE_HSTS_SECONDS > 0
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    "web.apps.CrawlAdminConfig",  # Django's admin, on the platform's site (web/admin_site.py)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    "django_filters",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "web",
    "tasks",
]

MIDDLEWARE = [
    "web.middleware.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "web.middleware.NulMiddleware",
    # Static files (the admin's styles) in every mode, DEBUG off included: nothing else
    # serves them when the web runs alone (runserver, gunicorn, compose, k8s).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "web.middleware.JobLogMiddleware",
]

ROOT_URLCONF = "crawlplatform.urls"
WSGI_APPLICATION = "crawlplatform.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

EMBEDDED_DATABASE = "DATABASE_URL" not in os.environ
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'crawl.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    # WAL lets the progress line read while workers write; IMMEDIATE takes the write lock at
    # BEGIN so concurrent writers queue on busy_timeout instead of failing on upgrade.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test.sqlite3")}
elif not DATABASES["default"]["ENGINE"].endswith(("postgresql", "postgis")):
    # The frontier's statements are written for these two (tasks/frontier/).
    raise ImproperlyConfigured("DATABASE_URL must name a PostgreSQL database (unset: SQLite)")
elif DB_POOL_MAX_SIZE := env.int("DB_POOL_MAX_SIZE", default=0):
    # A pool per process (psycopg_pool, through Django): a PostgreSQL connection costs a
    # backend process, and workers with hundreds of threads must not open hundreds of them
    # (PostgreSQL's max_connections is 100 by default). Threads borrow a connection for each
    # database step and give it back while they wait on the network (tasks/engine.py); a
    # broken connection is discarded when it is given back. A thread waits for a free
    # connection up to 10 s (then the task retries), so during a database outage the first
    # attempts take that long to fail.
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django's rule with a pool
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DB_POOL_MAX_SIZE,
        "timeout": 10,
        "max_idle": 300,
    }
else:
    # Persistent connections, one per thread. A broken one is closed by
    # close_old_connections() after its first error (each task calls it).
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=300)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

EMBEDDED_REDIS = "REDIS_URL" not in os.environ
REDIS_URL = env.str("REDIS_URL", default=f"unix://{socket_path(DATA_DIR)}")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
LOGIN_URL = "admin:login"
# WhiteNoise serves the apps' static folders directly (no collectstatic before the first run);
# STATIC_ROOT is only for a collectstatic of your own (a CDN, a proxy that serves files).
STATIC_ROOT = env.str("STATIC_ROOT", default="") or None
WHITENOISE_USE_FINDERS = True


# The JSON API (web/api.py): DRF tokens (manage.py drf_create_token USER) or the admin's
# session; cursor pagination, so pages stay stable while a crawl adds rows.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.CursorPagination",
    "PAGE_SIZE": 100,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "crawlplatform API",
    "DESCRIPTION": "Crawl jobs, their actions, pages and frontier URLs.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",  # served by the platform itself: clusters are often offline
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "web.models.JobState",
        "URLStateEnum": "web.models.URLState",
    },
}


def _body_store(where: str) -> dict:
    """The body store's backend (``tasks/content/bodies.py``): a directory or an S3 bucket."""
    if not where.startswith("s3://"):
        return {"BACKEND": "tasks.content.bodies.BodyFileStorage", "OPTIONS": {"location": where}}
    bucket, _, prefix = where.removeprefix("s3://").partition("/")
    return {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": bucket,
            "location": prefix.strip("/"),
            "endpoint_url": env.str("AWS_S3_ENDPOINT_URL", default="") or None,
            "region_name": env.str("AWS_S3_REGION_NAME", default="us-east-1"),
            "file_overwrite": True,  # a body's name is its hash: the same name, the same bytes
            "default_acl": None,
            "querystring_auth": False,
        },
    }


STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "bodies": _body_store(env.str("BODY_STORE", default=str(DATA_DIR / "bodies"))),
}

# Celery: configured for no loss. A message is acknowledged only after the task returned
# (acks_late), a worker killed mid-task puts it back (reject_on_worker_lost), each process
# holds one message beyond those it runs (prefetch 1), results are never stored.
CRAWL_QUEUE = env.str("CRAWL_QUEUE", default="crawl")
RENDER_QUEUE = env.str("RENDER_QUEUE", default="render")  # pages for headless Chromium
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="") or REDIS_URL.replace(
    "unix://", "redis+socket://", 1
)  # set and empty (compose without the rabbitmq profile): Redis
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
if CELERY_BROKER_URL.split("://", 1)[0] in ("amqp", "amqps", "pyamqp"):
    # RabbitMQ: replicated (quorum) queues; a message published only once the broker confirms
    # it; a connection that dies gives its unacknowledged messages back at once.
    AMQP_QUEUE_TYPE = env.str("CRAWL_AMQP_QUEUE_TYPE", default="quorum")
    CELERY_BROKER_TRANSPORT_OPTIONS = {"confirm_publish": True}
    CELERY_BROKER_HEARTBEAT = 30
    CELERY_TASK_DEFAULT_QUEUE_TYPE = AMQP_QUEUE_TYPE
    CELERY_TASK_CREATE_MISSING_QUEUE_TYPE = AMQP_QUEUE_TYPE
    # Topic exchanges: Celery's native delayed delivery (retries with a countdown) needs them.
    CELERY_TASK_DEFAULT_EXCHANGE_TYPE = "topic"
    CELERY_TASK_CREATE_MISSING_QUEUE_EXCHANGE_TYPE = "topic"
    if AMQP_QUEUE_TYPE == "classic":
        CELERY_TASK_QUEUE_MAX_PRIORITY = 10
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": crawl.setting("VISIBILITY_TIMEOUT_S"),
        "unacked_restore_interval": crawl.setting("UNACKED_RESTORE_INTERVAL_S"),
        "unacked_restore_throttle": 1,
        "queue_order_strategy": "priority",
        "priority_steps": [0, 3, 6, 9],
        "socket_timeout": 30,
        "socket_connect_timeout": 10,
        "health_check_interval": 25,
    }
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Tasks keep running through a broker reconnect: their acks are lost with the connection, the
# messages come back after the visibility timeout, and the claim makes the redelivery a no-op.
# (Cancelling them on reconnect races with the transport teardown: celery/celery#9250.)
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# A worker consumes its channel's queue (no --queues needed); the scheduler routes each URL to
# a channel's queue by the channel weights (tasks/frontier/channels.py).
CRAWL_CHANNEL = env.str("CRAWL_CHANNEL", default="main")
CELERY_TASK_DEFAULT_QUEUE = (
    CRAWL_QUEUE if CRAWL_CHANNEL == "main" else f"{CRAWL_QUEUE}.{CRAWL_CHANNEL}"
)
CELERY_TASK_SOFT_TIME_LIMIT = crawl.setting("TASK_SOFT_TIME_LIMIT_S")
CELERY_TASK_TIME_LIMIT = crawl.setting("TASK_TIME_LIMIT_S")
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Celery's Django fixup closes every database connection around every task unless this is
# set: that is a new PostgreSQL backend per page. Connections are kept for this many tasks.
CELERY_DB_REUSE_MAX = env.int("CELERY_DB_REUSE_MAX", default=10_000)
# Beat's schedule lives in the database (django-celery-beat): jobs' recrawl schedules are
# rows there (tasks/frontier/schedules.py), beside the entries below. Its scheduler, made
# safe to stop while it waits on a query (crawlplatform/beat.py).
CELERY_BEAT_SCHEDULER = "crawlplatform.beat:Scheduler"
# Lease sweep and reconcile, also done by the scheduler: beat makes them independent of it.
CELERY_BEAT_SCHEDULE = {
    "maintain": {"task": "tasks.maintain", "schedule": env.float("MAINTAIN_EVERY_S", default=30.0)},
}
# A second SIGTERM (or SIGQUIT) still gives in-flight tasks their whole time limit before a
# cold stop. Grace periods (k8s, compose) are above this.
CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT = crawl.setting("TASK_TIME_LIMIT_S") + 10
# Task events (received, succeeded, failed, retried) are what Flower lists tasks from. They
# cost about 1 ms of worker CPU and two Redis PUBLISHes a page (docs/operations.md), so they
# are on where Flower runs (compose, k8s) and off for the embedded crawl command.
CELERY_WORKER_SEND_TASK_EVENTS = env.bool("CELERY_WORKER_SEND_TASK_EVENTS", default=False)

# Text (the default) or one JSON object a line with the job, URL, task, worker, channel and
# version of each line; in JSON, warnings, uncaught exceptions and what a process writes
# outside logging are JSON lines too (crawlplatform/logs.py).
LOG_FORMAT = env.str("LOG_FORMAT", default="text")
LOGGING = logs.config(LOG_FORMAT, env.str("LOG_LEVEL", default="INFO"))
LOGGING_CONFIG = "crawlplatform.logs.configure"
