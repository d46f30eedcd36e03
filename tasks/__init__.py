"""The crawl engine (plain modules) and the thin Celery tasks that call it."""
