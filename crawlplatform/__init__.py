"""crawlplatform: the Django project and its Celery application."""

from crawlplatform.celery import app as celery_app
from crawlplatform.release import VERSION

__version__ = VERSION

__all__ = ["__version__", "celery_app"]
