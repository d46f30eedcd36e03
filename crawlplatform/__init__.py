"""crawlplatform: the Django project and its Celery application."""

from crawlplatform.celery import app as celery_app

__all__ = ["celery_app"]
