"""The admin: jobs with start/pause/resume/cancel/recrawl/export actions, URLs and pages to
inspect (stored bodies, extraction rules tried on them), and the review queue of URLs a site
kept blocking. Deleting jobs goes through ``tasks.frontier.jobs.delete`` (batches, bodies
too), never through a collector that loads every row."""

from __future__ import annotations

import base64
from collections.abc import Callable

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.utils.html import format_html, format_html_join
from redis.exceptions import RedisError

from tasks.content import bodies, extraction
from tasks.fetch import ladder, proxies
from tasks.frontier import jobs, review, schedules
from web import export
from web.models import Checkpoint, CrawlJob, FrontierURL, JobState, Page, Review

_PREVIEW_BYTES = 20_000
_CONTENT_TYPES = {"jsonl": "application/jsonl", "csv": "text/csv", "warc": "application/gzip"}


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


def _export_action(fmt: str) -> Callable[..., HttpResponse | None]:
    def action(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet):
        if queryset.count() != 1:
            modeladmin.message_user(request, "select one job to export", messages.WARNING)
            return None
        job = queryset.get()
        name = f"job{job.pk}.{fmt}" + (".gz" if fmt == "warc" else "")
        running = export.Export(job, fmt, filename=name)
        response = StreamingHttpResponse(running.chunks(), content_type=_CONTENT_TYPES[fmt])
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

    action.__name__ = f"export_{fmt}"
    return admin.action(description=f"Export the selected job as {fmt.upper()} (download)")(action)


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
    readonly_fields = ["state", "run", "released", "stats", "created_at", "started_at",
                       "finished_at", "error", "anti_bot"]  # fmt: skip
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
        ("Politeness", {"fields": ["delay", "host_concurrency", "obey_robots"]}),
        (
            "Identities and anti-bot",
            {"fields": ["user_agents", "proxies", "headers", "warmup_path", "render", "anti_bot"]},
        ),
        ("Content", {"fields": ["store_bodies", "extract", "obey_nofollow", "schedule"]}),
        ("Advanced", {"fields": ["settings"], "classes": ["collapse"]}),
        (
            "Progress",
            {
                "fields": [
                    "run",
                    "released",
                    "stats",
                    "error",
                    "created_at",
                    "started_at",
                    "finished_at",
                ]
            },
        ),  # fmt: skip
    ]

    @admin.display(description="ladder and proxies now")
    def anti_bot(self, job: CrawlJob) -> str:
        try:
            hosts = ladder.levels(job.pk)
            pids = {proxies.proxy_id(t): proxies.label(t) for t in job.proxies or []}
            health = proxies.health(job.pk, list(pids))
        except RedisError as exc:
            return f"Redis unavailable: {exc}"
        lines = [(f"{host}: level {level}",) for host, level in sorted(hosts.items())]
        lines += [(f"{pids[pid]}: {int(h.get('ok', 0))} ok, {int(h.get('bans', 0))} bans, "
                   f"{int(h.get('errors', 0))} errors",) for pid, h in health.items()]  # fmt: skip
        return format_html_join("", "<div>{}</div>", lines) or "every host at level 0"

    inlines = [CheckpointInline]
    actions = [
        _job_action("started", jobs.start, {JobState.DRAFT}),
        _job_action("paused", jobs.pause, {JobState.RUNNING}),
        _job_action("resumed", jobs.resume, {JobState.PAUSED}),
        _job_action("cancelled", jobs.cancel, {JobState.DRAFT, JobState.RUNNING, JobState.PAUSED}),
        _job_action("recrawled", jobs.recrawl, set(jobs.RECRAWLABLE)),
        *(_export_action(fmt) for fmt in export.FORMATS),
    ]

    def save_model(self, request: HttpRequest, job: CrawlJob, form, change: bool) -> None:
        super().save_model(request, job, form, change)
        schedules.sync(job)

    def get_deleted_objects(self, objs, request: HttpRequest):
        """What a deletion takes, counted, not collected row by row (jobs can be huge)."""
        ids = [job.pk for job in objs]
        lines = [
            f"{job}: {FrontierURL.objects.filter(job_id=job.pk).count()} URLs, "
            f"{Page.objects.filter(job_id=job.pk).count()} pages and their stored bodies"
            for job in objs
        ]
        return lines, {"crawl jobs": len(ids)}, set(), []

    def delete_model(self, request: HttpRequest, job: CrawlJob) -> None:
        jobs.delete(job.pk)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for pk in list(queryset.values_list("pk", flat=True)):
            jobs.delete(pk)


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
            rules = extraction.applies(extraction.rules_of(page.job.extract), page.url.url)
            found = extraction.extract(rules, self._text(page))
        except Exception as exc:  # noqa: BLE001
            return f"cannot apply the rules: {type(exc).__name__}: {exc}"
        return format_html_join("", "<div><b>{}</b>: {}</div>", sorted(found.items()))


class ReviewForm(forms.ModelForm):
    cookies = forms.CharField(
        required=False,
        help_text="After solving the site's challenge in a browser: its cookies for this host "
        "(name=value; name2=value2). They go into the host's jar; then requeue.",
    )

    class Meta:
        model = Review
        fields: list[str] = []


@admin.register(Review)
class ReviewAdmin(admin.ModelAdmin):
    """Parked URLs: what the site answered, and a person's decision."""

    form = ReviewForm
    list_display = ["url", "job", "host", "reason", "level", "status", "parked_at"]
    list_filter = ["host", "level", "job"]
    search_fields = ["url__url", "reason"]
    list_select_related = ["url", "job"]
    readonly_fields = ["url", "job", "host", "reason", "level", "status", "headers", "preview",
                       "picture", "parked_at"]  # fmt: skip
    fields = [*readonly_fields, "cookies"]
    actions = ["requeue", "give_up"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="body (start)")
    def preview(self, item: Review) -> str:
        return format_html("<pre style='white-space:pre-wrap'>{}</pre>", item.body[:20000])

    @admin.display(description="screenshot")
    def picture(self, item: Review) -> str:
        if not item.screenshot:
            return "not rendered"
        data = base64.b64encode(bytes(item.screenshot)).decode()
        return format_html('<img style="max-width:800px" src="data:image/png;base64,{}">', data)

    def save_model(self, request, item: Review, form, change) -> None:
        if form.cleaned_data.get("cookies"):
            version = review.put_cookies(item.job, item.host, form.cleaned_data["cookies"])
            self.message_user(request, f"cookies put into {item.host}'s jar (v{version})")

    @admin.action(description="Requeue: try the selected URLs again")
    def requeue(self, request: HttpRequest, queryset: QuerySet) -> None:
        n = review.requeue(FrontierURL.objects.filter(review__in=queryset))
        self.message_user(request, f"{n} URLs requeued", messages.SUCCESS)

    @admin.action(description="Give up: fail the selected URLs with their reason")
    def give_up(self, request: HttpRequest, queryset: QuerySet) -> None:
        n = review.drop(FrontierURL.objects.filter(review__in=queryset))
        self.message_user(request, f"{n} URLs failed", messages.SUCCESS)
