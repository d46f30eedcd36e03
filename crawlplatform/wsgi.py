"""WSGI entry point for gunicorn: ``gunicorn crawlplatform.wsgi``."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")
application = get_wsgi_application()
