from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class WebConfig(AppConfig):
    name = "web"
    verbose_name = "Crawling"


class CrawlAdminConfig(admin_apps.AdminConfig):
    """Django's admin on the platform's own site: every active user may sign in and works on
    their own jobs; staff see everyone's (web/access.py)."""

    default = False  # "web" itself is WebConfig
    default_site = "web.admin_site.CrawlAdminSite"
