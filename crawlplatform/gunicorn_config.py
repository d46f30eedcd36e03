"""gunicorn settings for the web process.

    gunicorn -c crawlplatform/gunicorn_config.py crawlplatform.wsgi

Every value can be overridden from the environment (``GUNICORN_*``). ``kill -HUP`` reloads
the workers gracefully (new code, same socket). Before it serves anything it refuses unsafe
settings: a missing or weak ``SECRET_KEY``, ``ALLOWED_HOSTS=*`` (``crawlplatform/security.py``).

With ``LOG_FORMAT=json`` gunicorn's error and access lines are the platform's JSON lines
(``logconfig_dict``: ``crawlplatform/logs.py``; an access line names its request's fields),
and what it writes outside logging goes through the relay; ``LOG_LEVEL`` is the root level.
"""

import os

from crawlplatform import logrelay, logs

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
worker_class = "gthread"
workers = int(os.environ.get("GUNICORN_WORKERS", "2"))
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "25"))
keepalive = 5
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "2000"))
max_requests_jitter = int(os.environ.get("GUNICORN_MAX_REQUESTS_JITTER", "200"))
# Heartbeat files of gunicorn's workers: in memory, so a slow disk cannot stall them.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None  # noqa: S108
accesslog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms "%(a)s"'
# Text: gunicorn's own lines, as ever. JSON: from its first line on, through the platform's.
logconfig_dict = (
    logs.config("json", os.environ.get("LOG_LEVEL", "INFO"))
    if os.environ.get("LOG_FORMAT") == "json"
    else {}
)


def on_starting(server) -> None:
    import django

    if logconfig_dict:  # one relay for both streams (before Django's setup asks for one)
        logrelay.capture(1, 2, process="gunicorn")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")
    django.setup()
    from crawlplatform.security import refuse_unsafe

    refuse_unsafe()
