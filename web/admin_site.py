"""The admin site: Django's, with a sign-in open to every active user (each works on their
own jobs, web/access.py) and a fleet summary on its index page."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.contrib.auth.forms import AuthenticationForm
from django.db import DatabaseError
from django.http import HttpRequest
from django.utils import timezone
from redis.exceptions import RedisError

from tasks.frontier import channels
from tasks.worker import registry
from web import access
from web.models import JobState, Page, Review


def fleet(request: HttpRequest) -> dict[str, Any]:
    """The numbers on the admin's index: workers, broker, jobs, review queue, recent pages."""
    summary: dict[str, Any] = {"problems": []}
    mine = access.jobs(request.user)
    try:
        summary["running"] = mine.filter(state=JobState.RUNNING).count()
        summary["paused"] = mine.filter(state=JobState.PAUSED).count()
        since = timezone.now() - timedelta(minutes=5)
        recent = Page.objects.filter(job__in=mine, fetched_at__gte=since).count()
        summary["pages_per_s"] = round(recent / 300, 1)
        summary["review"] = Review.objects.filter(job__in=mine).count()
    except DatabaseError as exc:
        summary["problems"].append(f"database: {exc}")
    try:
        summary["queue"] = channels.depth()
        now = time.time()
        summary["workers"] = sum(registry.online(w, now) for w in registry.workers())
    except RedisError as exc:
        summary["problems"].append(f"Redis: {exc}")
    return summary


class CrawlAdminSite(admin.AdminSite):
    site_header = "crawlplatform"
    site_title = "crawlplatform"
    index_title = "Crawls"
    site_url = "/dashboard/"  # "view site": the live dashboard
    index_template = "admin/crawl_index.html"
    login_form = AuthenticationForm

    def has_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_authenticated

    def index(self, request: HttpRequest, extra_context: dict | None = None):
        return super().index(request, {**(extra_context or {}), "fleet": fleet(request)})
