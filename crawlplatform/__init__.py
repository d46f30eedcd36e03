"""crawlplatform: the Django project and its Celery application."""

from crawlplatform.celery import app as celery_app

__version__ = "1.0.0"  # the release; images are tagged with it (crawlplatform:1.0.0)
__all__ = ["__version__", "celery_app"]
