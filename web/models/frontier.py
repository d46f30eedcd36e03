"""Frontier URLs, pages, checkpoints and reviews: what a crawl found, fetched and parked.

A URL's states are ``URLState``; every transition is a compare-and-set ``UPDATE`` that returns
whether this caller won, so two workers (or a worker and the sweep) never both act on one row.
The transitions all live in ``tasks/frontier/transitions.py``::

    queued -> scheduled (scheduler) -> leased (worker claim) -> done | failed | skipped
    leased -> queued (retry later, deferred, or the lease expired)
    leased(expired) -> leased (redelivery) ; scheduled -> queued (job paused)
    queued | scheduled -> skipped (cancel, max_pages, caps) ; queued -> failed (host circuit open)
"""

from __future__ import annotations

from django.db import models
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone

from web.models.jobs import CrawlJob


class URLState(models.TextChoices):
    QUEUED = "queued", "queued (waiting in the frontier)"
    SCHEDULED = "scheduled", "scheduled (message in the broker)"
    LEASED = "leased", "leased (a worker is fetching it)"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"
    NEEDS_REVIEW = "needs_review", "needs review (parked: blocked whatever the ladder tried)"


# URLs in these states still owe work: a job with none of them left is finished.
PENDING_STATES = (URLState.QUEUED, URLState.SCHEDULED, URLState.LEASED)
# The pending states as SQL text, for statements that name them (``pending_only``, the counts
# of scheduled and leased URLs on SQLite).
PENDING_STATES_SQL = "state IN ({})".format(", ".join(f"'{state}'" for state in PENDING_STATES))
NOT_MODIFIED = "not_modified"  # a done URL's note: the site answered 304 to a recrawl


class FrontierURL(models.Model):
    # No index of its own: the unique (job, url) and (job, state, ...) indexes lead with the
    # job, and every state change of a URL would write one more index entry for nothing.
    job = models.ForeignKey(CrawlJob, on_delete=models.CASCADE, related_name="urls", db_index=False)
    url = models.CharField(max_length=2048, help_text="Canonical URL (w3lib).")
    host = models.CharField(max_length=255, help_text="Lower-case host[:port] of the URL.")
    depth = models.PositiveSmallIntegerField(default=0)
    priority = models.SmallIntegerField(
        default=0,
        db_default=0,
        help_text="A spider request's priority: higher is released first, then shallower.",
    )
    state = models.CharField(max_length=16, choices=URLState.choices, default=URLState.QUEUED)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Fetch attempts started.")
    released = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Handed to a worker at least once: counts against max_pages and caps once.",
    )
    ladder_level = models.PositiveSmallIntegerField(
        default=0,
        db_default=0,
        help_text="Its host's anti-bot ladder level when its last attempt ran (0: normal).",
    )
    not_before = models.DateTimeField(
        default=timezone.now, help_text="Not released to workers before this time."
    )
    banned_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When its current run of refusals began (its identities banned, attempts "
        "given back); it is parked as banned after BAN_PATIENCE_S of them.",
    )
    scheduled_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    error_reason = models.CharField(max_length=40, blank=True, help_text="Outcome code.")
    error_message = models.TextField(blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    discovered_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    request = models.JSONField(
        null=True,
        blank=True,
        help_text="A spider's request: method, headers, body, callback, cb_kwargs, meta "
        "(empty: a plain GET of the URL, handled by parse).",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "url"], name="frontier_unique_job_url"),
        ]
        indexes = [
            # The scheduler's next due URLs in (priority descending, depth, id) order (the
            # priority is a spider request's; 0 for every other URL), and a job's pending counts:
            # equality on (job, state), then the order itself, so the scan stops after a batch
            # whatever the planner's statistics say (a growing crawl outruns autovacuum's
            # ANALYZE). Pending URLs only: an ended URL leaves it (one index write less each),
            # and a lookup of a job's URL by address, which names no state, can only take the
            # unique (job, url) index, never a scan of the whole job through this one.
            models.Index(
                fields=["job", "state", "-priority", "depth", "id"],
                name="frontier_pending_rank",
                condition=Q(state__in=PENDING_STATES),
            ),
            models.Index(
                fields=["lease_until"], name="frontier_leased", condition=Q(state="leased")
            ),
            models.Index(
                fields=["scheduled_at"], name="frontier_scheduled", condition=Q(state="scheduled")
            ),
        ]
        verbose_name = "frontier URL"

    def __str__(self) -> str:
        return self.url


class Page(models.Model):
    # No index of its own: page_job_fetched (job, fetched_at) serves a job's pages.
    job = models.ForeignKey(
        CrawlJob, on_delete=models.CASCADE, related_name="pages", db_index=False
    )
    url = models.OneToOneField(
        FrontierURL,
        on_delete=models.CASCADE,
        related_name="page",
        help_text="At most one page per frontier URL: enforced by the database.",
    )
    final_url = models.CharField(max_length=2048, help_text="After redirects.")
    status = models.PositiveSmallIntegerField()
    content_type = models.CharField(max_length=200, blank=True)
    title = models.TextField(blank=True)
    size = models.PositiveIntegerField(help_text="Decoded body bytes stored.")
    truncated = models.BooleanField(default=False, help_text="Body cut at FETCH_MAX_BYTES.")
    elapsed_ms = models.PositiveIntegerField()
    fetched_at = models.DateTimeField()
    content_hash = models.CharField(max_length=64, help_text="SHA-256 of the decoded body.")
    data = models.JSONField(default=dict, blank=True, help_text="Extracted fields.")
    body_key = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="The raw body's name in the body store; empty: not stored.",
    )
    http = models.JSONField(
        default=dict,
        blank=True,
        db_default={},
        help_text="The exchange as sent and received: protocol, reason phrase, request and "
        "response headers (name, value pairs in order).",
    )
    run = models.PositiveIntegerField(
        default=1, db_default=1, help_text="The job's last run that fetched or confirmed it."
    )
    first_run = models.PositiveIntegerField(
        default=1, db_default=1, help_text="The run that found it."
    )
    modified_run = models.PositiveIntegerField(
        default=1, db_default=1, help_text="The run that last saw its content change."
    )
    checked_at = models.DateTimeField(
        null=True, blank=True, help_text="When a run last confirmed it (200 or 304)."
    )
    channel = models.CharField(
        max_length=40, blank=True, help_text="The release channel of the worker that fetched it."
    )
    worker_version = models.CharField(
        max_length=40, blank=True, help_text="The version of the worker that fetched it."
    )

    class Meta:
        indexes = [models.Index(fields=["job", "fetched_at"], name="page_job_fetched")]

    def __str__(self) -> str:
        return self.final_url


class Checkpoint(models.Model):
    job = models.ForeignKey(CrawlJob, on_delete=models.CASCADE, related_name="checkpoints")
    version = models.PositiveIntegerField(help_text="Monotonic per job.")
    created_at = models.DateTimeField(auto_now_add=True)
    reason = models.CharField(max_length=40, help_text="pause, shutdown, periodic, finish, ...")
    counters = models.JSONField(default=dict)
    frontier = models.JSONField(default=dict, help_text="URL count by state.")
    sessions = models.JSONField(
        default=dict, blank=True, help_text="The job's cookie jars, restored on resume."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "version"], name="checkpoint_unique_version"),
        ]
        ordering = ["-job_id", "-version"]

    def __str__(self) -> str:
        return f"job {self.job_id} v{self.version} ({self.reason})"


class Review(models.Model):
    """What a person needs to decide about a parked URL: why, and what the site answered."""

    url = models.OneToOneField(FrontierURL, on_delete=models.CASCADE, related_name="review")
    job = models.ForeignKey(CrawlJob, on_delete=models.CASCADE, related_name="reviews")
    host = models.CharField(max_length=255)
    reason = models.CharField(max_length=200, help_text="What the ban detector saw.")
    level = models.PositiveSmallIntegerField(help_text="The ladder level it was parked at.")
    status = models.PositiveSmallIntegerField(null=True, blank=True, help_text="Last HTTP status.")
    headers = models.JSONField(default=dict, blank=True, help_text="Last response headers.")
    body = models.TextField(blank=True, help_text="Last response body (first 256 KiB).")
    screenshot = models.BinaryField(null=True, blank=True, help_text="PNG, when rendered.")
    parked_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["job", "host"], name="review_job_host")]

    def __str__(self) -> str:
        return f"{self.url_id} ({self.reason})"


class Item(models.Model):
    """What a spider's callback yielded for a page: committed with the page, many per page.
    An item a pipeline dropped is kept with its reason (``dropped``), so drops are counted
    exactly once too; exports and the API give the kept ones."""

    job = models.ForeignKey(CrawlJob, on_delete=models.CASCADE, related_name="items",
                            db_index=False)  # fmt: skip
    url = models.ForeignKey(
        FrontierURL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="items",
        help_text="The URL whose page yielded it (its page: url.page); empty: yielded by the "
        "spider's start.",
    )
    spider = models.CharField(max_length=200)
    data = models.JSONField(help_text="The item as the pipelines left it.")
    fields = models.JSONField(
        null=True, blank=True,
        help_text="Its field names in the order feeds write them (an Item's or a dataclass's "
        "declared fields, a dict's keys), with the key order of the objects its values hold: "
        "PostgreSQL's jsonb keeps none. Empty: the data's order.",
    )  # fmt: skip
    dropped = models.CharField(
        max_length=200, blank=True, default="", help_text="Why a pipeline dropped it; empty: kept."
    )
    run = models.PositiveIntegerField(default=1, help_text="The job's run that yielded it.")
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["job", "id"], name="item_job_id")]

    def __str__(self) -> str:
        return f"item {self.pk} of job {self.job_id}"


class StatKind(models.TextChoices):
    """How a stat row changes its stat, as Scrapy's collector's methods do."""

    INC = "inc", "inc_value: added"
    START = "start", "inc_value's start: the stat's value before the first inc"
    MAX = "max", "max_value: the highest"
    MIN = "min", "min_value: the lowest"
    SET = "set", "set_value: replaces what came before"
    CLEAR = "clear", "clear_stats: every stat starts again"


class Stat(models.Model):
    """A change a spider made to its job's ``crawler.stats``: written with the page whose
    callback, pipelines or signal handlers made it (and replaced with the page's items when
    the URL is crawled again), or on its own outside a page (its ``url`` empty). A job's stats
    are its rows aggregated on read (``tasks/frontier/stats.py``)."""

    job = models.ForeignKey(CrawlJob, on_delete=models.CASCADE, related_name="stat_rows",
                            db_index=False)  # fmt: skip
    url = models.ForeignKey(
        FrontierURL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="stat_rows",
        help_text="The URL whose page made the change; empty: made outside a page (the job's "
        "start, a worker opening or closing the job's pipelines and extensions).",
    )
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=5, choices=StatKind.choices)
    value = models.JSONField(
        null=True, help_text="The change's value: a count, a value to keep or to compare."
    )

    class Meta:
        indexes = [models.Index(fields=["job", "kind", "name"], name="stat_job_kind_name")]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} of job {self.job_id}"


def pending_only(urls: QuerySet) -> QuerySet:
    """``urls`` limited to pending ones, the states written out rather than bound: SQLite uses
    a partial index (``frontier_pending_rank``) only for a query whose condition repeats the
    index's own, literally. With the states bound it read and sorted every URL of the job
    instead (0.15 s a query at 100,000 hosts, a scheduler's pass several of them)."""
    table = FrontierURL._meta.db_table
    condition = RawSQL(f'"{table}".{PENDING_STATES_SQL}', [], output_field=BooleanField())  # noqa: S611
    return urls.filter(condition)
