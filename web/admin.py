"""The admin: jobs with start/pause/resume/cancel actions, URLs and pages to inspect."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from tasks.frontier import jobs
from web.models import Checkpoint, CrawlJob, FrontierURL, JobState, Page


def _job_action(
    verb: str, operation: Callable[[CrawlJob], bool], allowed: set[str]
) -> Callable[..., None]:
    def action(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
        done, refused = [], []
        for job in queryset:
            ok = job.state in allowed and operation(job)
            (done if ok else refused).append(f"#{job.pk}")
        if done:
            modeladmin.message_user(request, f"{verb}: {', '.join(done)}", messages.SUCCESS)
        if refused:
            modeladmin.message_user(
                request,
                f"not {verb} (state does not allow it): {', '.join(refused)}",
                messages.WARNING,
            )

    action.__name__ = f"{verb}_jobs"
    return admin.action(description=f"{verb.capitalize()} selected jobs")(action)


class CheckpointInline(admin.TabularInline):
    model = Checkpoint
    extra = 0
    can_delete = False
    fields = ["version", "created_at", "reason", "frontier", "counters"]
    readonly_fields = fields
    ordering = ["-version"]
    max_num = 0


@admin.register(CrawlJob)
class CrawlJobAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "state", "released", "max_pages", "created_at", "finished_at"]
    list_filter = ["state", "created_at"]
    search_fields = ["name"]
    readonly_fields = ["state", "released", "stats", "created_at", "started_at", "finished_at"]
    fieldsets = [
        (None, {"fields": ["name", "seeds", "state"]}),
        (
            "Scope",
            {
                "fields": [
                    "allowed_domains",
                    "include_patterns",
                    "exclude_patterns",
                    "max_depth",
                    "max_pages",
                ]
            },
        ),
        ("Politeness", {"fields": ["delay", "host_concurrency", "obey_robots", "user_agent"]}),
        ("Advanced", {"fields": ["settings"], "classes": ["collapse"]}),
        ("Progress", {"fields": ["released", "stats", "created_at", "started_at", "finished_at"]}),
    ]
    inlines = [CheckpointInline]
    actions = [
        _job_action("started", jobs.start, {JobState.DRAFT}),
        _job_action("paused", jobs.pause, {JobState.RUNNING}),
        _job_action("resumed", jobs.resume, {JobState.PAUSED}),
        _job_action("cancelled", jobs.cancel, {JobState.DRAFT, JobState.RUNNING, JobState.PAUSED}),
    ]


@admin.register(FrontierURL)
class FrontierURLAdmin(admin.ModelAdmin):
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
    list_filter = ["state", "error_reason", "job"]
    search_fields = ["url"]
    list_select_related = ["job"]
    raw_id_fields = ["job", "discovered_from"]
    # States move through the state machine (tasks/frontier/transitions.py), never by hand.
    readonly_fields = [f.name for f in FrontierURL._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(Page)
class PageAdmin(admin.ModelAdmin):
    list_display = ["final_url", "job", "status", "title", "content_type", "size", "fetched_at"]
    list_filter = ["status", "content_type", "job"]
    search_fields = ["final_url", "title"]
    list_select_related = ["job"]
    raw_id_fields = ["job", "url"]
    readonly_fields = [f.name for f in Page._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # pages are what a crawl fetched, nothing else
