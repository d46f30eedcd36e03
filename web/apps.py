from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class WebConfig(AppConfig):
    name = "web"
    verbose_name = "Crawling"


class CrawlAdminConfig(admin_apps.SimpleAdminConfig):
    """Django's admin on the platform's own site: every active user may sign in and works on
    their own jobs; staff see everyone's (web/access.py). The admin modules are discovered by
    the URL configuration (``crawlplatform/urls.py``), so that workers and the scheduler,
    which serve no page, start without loading them."""

    default = False  # "web" itself is WebConfig
    default_site = "web.admin_site.CrawlAdminSite"
