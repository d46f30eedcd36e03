"""The frontier's admin: URLs (read-only, requeued by action) and pages to inspect (stored
bodies, extraction rules tried on them)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from tasks.content import bodies, extraction
from tasks.frontier import review
from tasks.rules import selectors
from web.admin.ownership import JobFilter, OwnJobs
from web.models import FrontierURL, Page

_PREVIEW_BYTES = 20_000


@admin.register(FrontierURL)
class FrontierURLAdmin(OwnJobs, admin.ModelAdmin):
    list_display = [
        "url",
        "job",
        "state",
        "depth",
        "attempts",
        "http_status",
        "error_reason",
        "updated_at",
    ]
    list_filter = ["state", "error_reason", JobFilter]
    search_fields = ["url"]
    list_select_related = ["job"]
    raw_id_fields = ["job", "discovered_from"]
    # States move through the state machine (tasks/frontier/transitions.py), never by hand.
    readonly_fields = [f.name for f in FrontierURL._meta.fields]
    actions = ["requeue"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Requeue: fetch the selected failed, skipped or parked URLs again")
    def requeue(self, request: HttpRequest, queryset: QuerySet) -> None:
        chosen = queryset.count()
        n = review.requeue_chosen(queryset)
        self.message_user(request, f"{n} of {chosen} URLs requeued", messages.SUCCESS)
        if n < chosen:
            self.message_user(
                request,
                f"{chosen - n} not requeued: only failed, skipped or parked URLs of running or "
                "paused jobs go back to the queue (recrawl an ended job instead)",
                messages.WARNING,
            )


@admin.register(Page)
class PageAdmin(OwnJobs, admin.ModelAdmin):
    list_display = ["final_url", "job", "status", "title", "content_type", "size", "fetched_at"]
    list_filter = ["status", "content_type", JobFilter]
    search_fields = ["final_url", "title"]
    list_select_related = ["job"]
    raw_id_fields = ["job", "url"]
    readonly_fields = [f.name for f in Page._meta.fields] + ["body", "extraction_now"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # pages are what a crawl fetched, nothing else

    def _text(self, page: Page) -> str:
        return bodies.text(page.body_key, page.http, _PREVIEW_BYTES * 50)[0]

    @admin.display(description="body (start, decoded)")
    def body(self, page: Page) -> str:
        if not page.body_key:
            return "not stored"
        try:
            text = self._text(page)
        except Exception as exc:  # noqa: BLE001 (shown to the person, whatever it was)
            return f"cannot read the stored body: {type(exc).__name__}: {exc}"
        return format_html("<pre style='white-space:pre-wrap'>{}</pre>", text[:_PREVIEW_BYTES])

    @admin.display(description="the job's extraction rules, tried now on the stored body")
    def extraction_now(self, page: Page) -> str:
        if not page.job.extract:
            return "the job has no extraction rules"
        if not page.body_key:
            return "no stored body to try them on"
        try:
            rules = selectors.applies(selectors.rules_of(page.job.extract), page.url.url)
            found = extraction.extract(rules, self._text(page))
        except Exception as exc:  # noqa: BLE001
            return f"cannot apply the rules: {type(exc).__name__}: {exc}"
        return format_html_join("", "<div><b>{}</b>: {}</div>", sorted(found.items()))
