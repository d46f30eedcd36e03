"""The jobs' admin: jobs with their progress and start/pause/resume/cancel/clone/recrawl/export
actions, edited through a form of one item per line. Deleting jobs goes through
``tasks.frontier.jobs.delete`` (batches, bodies too), never through a collector that loads
every row."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, Max, QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from redis.exceptions import RedisError

from tasks.content import spiders
from tasks.fetch import ladder, proxies
from tasks.frontier import jobs, schedules, spiderjobs
from web import access, export, specs
from web.admin.ownership import OwnJobs
from web.models import Checkpoint, CrawlJob, FrontierURL, Item, Page

_CONTENT_TYPES = {"jsonl": "application/jsonl", "csv": "text/csv", "warc": "application/gzip"}


def _job_action(
    verb: str, operation: Callable[[CrawlJob], bool], allowed: frozenset[str]
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


def _lines(value) -> str:
    return "\n".join(value) if isinstance(value, list) else value or ""


class _TextForJSON(forms.CharField):
    """Text in the form for a JSON field of the model."""

    def __init__(self, *, encoder=None, decoder=None, **kwargs) -> None:
        super().__init__(**kwargs)


class LinesField(_TextForJSON):
    """A list of strings, one per line (blank lines ignored)."""

    widget = forms.Textarea(attrs={"rows": 4, "cols": 80})

    def prepare_value(self, value) -> str:
        return _lines(value)

    def to_python(self, value) -> list[str]:
        return [line.strip() for line in (value or "").splitlines() if line.strip()]


class HeadersField(_TextForJSON):
    """Request headers, one ``Name: value`` per line."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 80})

    def prepare_value(self, value) -> str:
        if isinstance(value, dict):
            return "\n".join(f"{k}: {v}" for k, v in value.items())
        return value or ""

    def to_python(self, value) -> dict[str, str]:
        headers = {}
        for line in (value or "").splitlines():
            if line.strip():
                name, colon, text = line.partition(":")
                if not colon or not name.strip():
                    raise forms.ValidationError(f"{line!r} is not Name: value")
                headers[name.strip()] = text.strip()
        return headers


_LINES = ["seeds", "allowed_domains", "include_patterns", "exclude_patterns", "user_agents",
          "proxies"]  # fmt: skip


class CrawlJobForm(forms.ModelForm):
    """Lists as one item per line, headers as ``Name: value`` lines; the job's own validation
    (``CrawlJob.clean``, the one the API, specs and the CLI go through) names what is wrong."""

    class Meta:
        model = CrawlJob
        fields = "__all__"
        field_classes = {**dict.fromkeys(_LINES, LinesField), "headers": HeadersField}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if "spider" in self.fields:  # the installed spiders to choose from
            names = spiders.names()
            current = self.instance.spider if self.instance else ""
            choices = [("", "none: a crawl by configuration"), *((n, n) for n in names)]
            if current and current not in names:
                choices.append((current, f"{current} (not installed here)"))
            self.fields["spider"] = forms.ChoiceField(
                choices=choices, required=False, help_text=self.fields["spider"].help_text
            )

    def clean_seeds(self) -> list[str]:
        return jobs.canonical_seeds(self.cleaned_data["seeds"])

    def clean_channel(self) -> str:
        name = self.cleaned_data["channel"]
        if name != self.initial.get("channel", ""):
            try:
                jobs.check_channel(name)
            except jobs.JobError as exc:
                raise forms.ValidationError(exc.fields["channel"]) from None
        return name


def _progress(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    if not total:
        return "-"
    parts = [("done", "#5a5"), ("failed", "#c44"), ("skipped", "#bbb"), ("needs_review", "#e90")]
    bar = format_html_join(
        "",
        '<span title="{} {}" style="display:inline-block;height:10px;width:{}px;'
        'background:{}"></span>',
        ((counts.get(k, 0), k, round(120 * counts.get(k, 0) / total), color)
         for k, color in parts),
    )  # fmt: skip
    pending = sum(counts.get(k, 0) for k in ("queued", "scheduled", "leased"))
    return format_html(
        '<span style="display:inline-block;width:120px;background:#eee">{}</span> '
        "{} done / {} queued / {} failed / {} skipped",
        bar, counts.get("done", 0), pending, counts.get("failed", 0), counts.get("skipped", 0),
    )  # fmt: skip


RATE_WINDOW_S = 60  # the job list's pages/s: pages stored in the last minute


# What a job is configured with (what clone copies and an edit may change): all a spec holds.
CONFIG_FIELDS = list(specs.FIELDS.values())


def _clone(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    made = []
    for job in queryset:
        config = {f: getattr(job, f) for f in CONFIG_FIELDS}
        copy = jobs.create_job(config.pop("seeds"), **{**config, "name": f"{job.name} (copy)",
                               "owner": request.user})  # fmt: skip
        made.append(f"#{job.pk} -> #{copy.pk}")
    modeladmin.message_user(request, f"cloned as drafts: {', '.join(made)}", messages.SUCCESS)


_clone.__name__ = "clone_jobs"
clone = admin.action(description="Clone selected jobs (as drafts)")(_clone)


class CheckpointInline(admin.TabularInline):
    model = Checkpoint
    extra = 0
    can_delete = False
    fields = ["version", "created_at", "reason", "frontier", "counters"]
    readonly_fields = fields
    ordering = ["-version"]
    max_num = 0

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return True  # shown with its job, to whoever may see the job


@admin.register(CrawlJob)
class CrawlJobAdmin(OwnJobs, admin.ModelAdmin):
    job_path = ""
    form = CrawlJobForm
    list_display = ["id", "name", "state", "progress", "rate", "owner", "last_checkpoint",
                    "created_at", "finished_at"]  # fmt: skip
    list_filter = ["state", "created_at"]
    search_fields = ["name"]
    list_select_related = ["owner"]
    readonly_fields = ["state", "run", "released", "stats", "created_at", "started_at",
                       "finished_at", "error", "anti_bot", "webhook_secret",
                       "webhook_status", "items"]  # fmt: skip
    fieldsets = [
        (None, {"fields": ["name", "owner", "seeds", "state"]}),
        ("Scope", {"fields": ["allowed_domains", "include_subdomains", "include_patterns",
                              "exclude_patterns", "max_depth", "max_pages",
                              "max_pages_per_host", "path_caps", "use_sitemaps",
                              "priority", "channel"]}),
        ("Politeness", {"fields": ["delay", "host_concurrency", "obey_robots",
                                   "obey_nofollow"]}),
        ("Identities and anti-bot", {"fields": ["user_agents", "proxies", "headers",
                                                "warmup_path", "render", "anti_bot"]}),
        ("Content", {"fields": ["store_bodies", "extract", "schedule"]}),
        ("Spider", {"fields": ["spider", "spider_args", "items"]}),
        ("Notifications", {"fields": ["webhook_url", "webhook_secret", "webhook_status"]}),
        ("Advanced", {"fields": ["settings"], "classes": ["collapse"]}),
        ("Progress", {"fields": ["run", "released", "stats", "error", "created_at",
                                 "started_at", "finished_at"]}),
    ]  # fmt: skip

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        return fields if access.sees_all(request.user) else [*fields, "owner"]

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._own(request) or super().has_change_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._own(request) or super().has_add_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._own(request) or super().has_delete_permission(request, obj)

    def get_changelist_instance(self, request: HttpRequest):
        """The page's jobs get their URL counts, rate and last checkpoint in three grouped
        queries (not three per row)."""
        changelist = super().get_changelist_instance(request)
        page = list(changelist.result_list)
        ids = [job.pk for job in page]
        counts: dict[int, dict[str, int]] = {}
        rows = FrontierURL.objects.filter(job_id__in=ids).values_list("job_id", "state")
        for job_id, state, n in rows.annotate(n=Count("id")):
            counts.setdefault(job_id, {})[state] = n
        since = timezone.now() - timedelta(seconds=RATE_WINDOW_S)
        recent = dict(Page.objects.filter(job_id__in=ids, fetched_at__gte=since)
                      .values_list("job_id").annotate(n=Count("id")))  # fmt: skip
        last = dict(Checkpoint.objects.filter(job_id__in=ids).values_list("job_id")
                    .annotate(at=Max("created_at")))  # fmt: skip
        for job in page:
            job.url_counts = counts.get(job.pk, {})
            job.recent_pages = recent.get(job.pk, 0)
            job.checkpoint_at = last.get(job.pk)
        return changelist

    @admin.display(description="progress")
    def progress(self, job: CrawlJob) -> str:
        return _progress(getattr(job, "url_counts", None) or jobs.counts(job.pk))

    @admin.display(description="items")
    def items(self, job: CrawlJob) -> str:
        if not job.pk or not job.spider:
            return "-"
        kept = Item.objects.filter(job_id=job.pk, dropped="").count()
        drops = spiderjobs.drops(job.pk)
        where = reverse("admin:web_item_changelist")
        link = format_html('<a href="{}?job__id__exact={}">{} items</a>', where, job.pk, kept)
        if not drops:
            return link
        return format_html("{}; dropped: {}", link,
                           ", ".join(f"{n} {why}" for why, n in sorted(drops.items())))  # fmt: skip

    @admin.display(description="pages/s")
    def rate(self, job: CrawlJob) -> str:
        return f"{getattr(job, 'recent_pages', 0) / RATE_WINDOW_S:.1f}"

    @admin.display(description="last checkpoint")
    def last_checkpoint(self, job: CrawlJob):
        return getattr(job, "checkpoint_at", None) or "-"

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
        _job_action("started", jobs.start, jobs.STARTS_FROM["start"]),
        _job_action("paused", jobs.pause, jobs.STARTS_FROM["pause"]),
        _job_action("resumed", jobs.resume, jobs.STARTS_FROM["resume"]),
        _job_action("cancelled", jobs.cancel, jobs.STARTS_FROM["cancel"]),
        clone,
        _job_action("recrawled", jobs.recrawl, jobs.STARTS_FROM["recrawl"]),
        *(_export_action(fmt) for fmt in export.FORMATS),
    ]

    def save_model(self, request: HttpRequest, job: CrawlJob, form, change: bool) -> None:
        """A new job belongs to whoever made it (staff may name another owner); an edit goes
        through ``jobs.update``, so a running job's new seeds join its frontier."""
        if not change:
            if not (access.sees_all(request.user) and job.owner):
                job.owner = request.user
            super().save_model(request, job, form, change)
            schedules.sync(job)
            return
        jobs.update(CrawlJob.objects.get(pk=job.pk),
                    **{f: getattr(job, f) for f in form.changed_data})  # fmt: skip
        job.refresh_from_db()

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
