"""The frontier's admin: URLs (read-only, requeued by action), pages to inspect (stored
bodies, extraction rules tried on them, the items a spider yielded for them) and items."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from tasks.content import bodies, extraction
from tasks.frontier import review
from tasks.rules import selectors
from web.admin.ownership import JobFilter, OwnJobs
from web.models import FrontierURL, Item, Page

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
    readonly_fields = [f.name for f in Page._meta.fields] + ["body", "extraction_now", "items"]

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

    @admin.display(description="items")
    def items(self, page: Page) -> str:
        n = Item.objects.filter(url_id=page.url_id).count()
        return format_html('<a href="{}?url__id__exact={}">{} items</a>',
                           reverse("admin:web_item_changelist"), page.url_id, n)  # fmt: skip

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


class DroppedFilter(admin.SimpleListFilter):
    title = "kept or dropped"
    parameter_name = "kept"

    def lookups(self, request: HttpRequest, model_admin) -> list[tuple[str, str]]:
        return [("yes", "kept"), ("no", "dropped")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return queryset.filter(dropped="")
        if self.value() == "no":
            return queryset.exclude(dropped="")
        return queryset


@admin.register(Item)
class ItemAdmin(OwnJobs, admin.ModelAdmin):
    """What spiders yielded: a job's items (``?job__id__exact=``), a page's
    (``?url__id__exact=``), kept or dropped with the reason."""

    list_display = ["id", "job", "spider", "short", "dropped", "run", "created"]
    list_filter = [DroppedFilter, "spider", JobFilter]
    list_select_related = ["job"]
    raw_id_fields = ["job", "url"]
    readonly_fields = [f.name for f in Item._meta.fields]
    show_full_result_count = False  # a job may have millions: no second count

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # items are what spiders yielded, nothing else

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    @admin.display(description="data")
    def short(self, item: Item) -> str:
        text = ", ".join(f"{k}={v!r}" for k, v in list(item.data.items())[:6])
        return text[:200]
