"""Crawl jobs: their configuration, their validation and their state machine.

A job's states are ``JobState``; a transition is allowed by ``JOB_TRANSITIONS`` and made by
:meth:`CrawlJob.transition`, a compare-and-set ``UPDATE`` that returns whether this caller won.
A job validates itself (:meth:`CrawlJob.clean`): the admin, the API and ``tasks.frontier.jobs``
refuse a configuration the crawl could not apply, with a message naming the field.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.db import models
from django.utils import timezone

from tasks import defaults
from tasks.rules import channels, guard, patterns, proxy_urls, schedules, selectors
from tasks.rules.urls import path_problem, seed_problem

MAX_DEPTH_LIMIT = 32767  # depths are stored as small integers


class JobState(models.TextChoices):
    DRAFT = "draft"
    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"


JOB_TRANSITIONS: dict[str, set[str]] = {
    JobState.DRAFT: {JobState.RUNNING, JobState.CANCELLED},
    JobState.RUNNING: {JobState.PAUSED, JobState.FINISHED, JobState.CANCELLED, JobState.FAILED},
    JobState.PAUSED: {JobState.RUNNING, JobState.CANCELLED},
    JobState.FINISHED: set(),
    JobState.CANCELLED: set(),
    JobState.FAILED: set(),
}
TERMINAL_STATES = frozenset({JobState.FINISHED, JobState.CANCELLED, JobState.FAILED})


class InvalidTransition(ValueError):
    """A transition the state table does not allow."""


class CrawlJob(models.Model):
    name = models.CharField(max_length=200, help_text="A label for people; need not be unique.")
    seeds = models.JSONField(
        default=list, blank=True, help_text="Start URLs (depth 0); a spider job may have none."
    )
    allowed_domains = models.JSONField(
        default=list,
        blank=True,
        help_text="Hosts the crawl may visit. Empty: the seeds' hosts.",
    )
    include_subdomains = models.BooleanField(
        default=True, help_text="Subdomains of the allowed domains are in scope too."
    )
    include_patterns = models.JSONField(
        default=list, blank=True, help_text="Regexes; if any is given, a URL must match one."
    )
    exclude_patterns = models.JSONField(
        default=list, blank=True, help_text="Regexes; a URL matching any is not followed."
    )
    max_depth = models.PositiveIntegerField(
        default=5,
        validators=[MaxValueValidator(MAX_DEPTH_LIMIT)],
        help_text="Links followed from a seed.",
    )
    max_pages = models.PositiveIntegerField(
        null=True, blank=True, help_text="URLs fetched at most; empty for no limit."
    )
    max_pages_per_host = models.PositiveIntegerField(
        null=True, blank=True, help_text="URLs fetched per host at most; empty for no limit."
    )
    path_caps = models.JSONField(
        default=dict,
        blank=True,
        help_text='URLs fetched at most per regex, e.g. {"/calendar/": 50}: a brake on traps.',
    )
    use_sitemaps = models.BooleanField(
        default=False,
        help_text="Also start from the seeds' hosts' sitemaps (robots.txt, /sitemap.xml).",
    )
    priority = models.PositiveSmallIntegerField(
        default=0, help_text="0-9: a higher priority's URLs are fetched ahead of other jobs'."
    )
    delay = models.FloatField(
        default=0.0, help_text="Minimum seconds between two requests to one host."
    )
    host_concurrency = models.PositiveIntegerField(
        default=0, help_text="Requests in flight to one host at most; 0 for no limit."
    )
    obey_robots = models.BooleanField(
        default=True, help_text="Honour robots.txt (matched by the crawler's product token)."
    )
    user_agents = models.JSONField(
        default=list,
        blank=True,
        help_text="User-Agent headers to present; one: fixed; several: rotated per host when "
        "a site blocks. Empty: the platform's own.",
    )
    proxies = models.JSONField(
        default=list,
        blank=True,
        help_text="Proxy URLs (http, https, socks5); ${VAR} is read from the workers' "
        "environment, so credentials stay in a Secret. Empty: direct.",
    )
    headers = models.JSONField(
        default=dict, blank=True, help_text='Extra request headers, e.g. {"Accept-Language": "de"}.'
    )
    warmup_path = models.CharField(
        max_length=500,
        blank=True,
        help_text="Fetched first on each new session of a host (e.g. / that sets a cookie).",
    )
    render = models.CharField(
        max_length=8,
        choices=[("never", "never"), ("auto", "auto"), ("always", "always")],
        default="never",
        help_text="Render pages in headless Chromium: never, when the ladder or a page that "
        "needs JavaScript asks (auto), or always.",
    )
    store_bodies = models.BooleanField(
        default=True,
        help_text="Keep each page's raw body and headers in the body store (zstd, stored once "
        "per identical body); bodies above BODY_MAX_BYTES are not kept.",
    )
    extract = models.JSONField(
        default=list,
        blank=True,
        help_text='Extraction rules: [{"name": "title", "selector": "h1", "attr": "", '
        '"all": false, "pattern": ""}, ...] (CSS selectors; "attr": an attribute instead of '
        'the text; "all": every match; "pattern": only on URLs matching this regex). The CLI '
        "writes them NAME=SELECTOR[@ATTR][[]].",
    )
    spider = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="The installed spider that handles this job's responses (manage.py spiders "
        "lists them); empty: a crawl by configuration (links and extraction rules).",
    )
    spider_args = models.JSONField(
        default=dict,
        blank=True,
        db_default={},
        help_text="Arguments set as the spider's attributes (Scrapy's -a key=value), e.g. "
        '{"category": "books"}.',
    )
    spider_state = models.JSONField(
        default=dict,
        blank=True,
        db_default={},
        help_text="Attributes the spider's start() set (JSON), given to the spider in every "
        "worker, as a Scrapy spider's one process keeps them.",
    )
    obey_nofollow = models.BooleanField(
        default=False, help_text='Links marked rel="nofollow" are not followed.'
    )
    schedule = models.CharField(
        max_length=100,
        blank=True,
        help_text='Run the job again on this schedule: a cron line ("0 3 * * *", UTC) or an '
        'interval ("every 6h"; s, m, h or d). Empty: no schedule.',
    )
    owner = models.ForeignKey(
        django_settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="crawl_jobs",
        help_text="Whose job it is: users who are not staff see and operate only their own.",
    )
    webhook_url = models.CharField(
        max_length=2000,
        blank=True,
        help_text="Called (POST, JSON summary) when the job finishes, fails or is cancelled; "
        "signed with X-Crawl-Signature: sha256=HMAC(webhook secret, body). Empty: none.",
    )
    webhook_secret = models.CharField(
        max_length=128,
        blank=True,
        help_text="The webhook's HMAC-SHA256 key; one is made when a webhook URL is set "
        "without it.",
    )
    webhook_status = models.CharField(
        max_length=300, blank=True, help_text="The last webhook call's outcome."
    )
    channel = models.CharField(
        max_length=40,
        blank=True,
        help_text="Release channel whose workers fetch this job (e.g. canary); empty: the "
        "channels' weighted split of hosts.",
    )
    run = models.PositiveIntegerField(
        default=1, db_default=1, help_text="1 for the first crawl, one more for each recrawl."
    )
    settings = models.JSONField(
        default=dict,
        blank=True,
        help_text="Per-job overrides of crawl settings (see tasks/defaults.py), e.g. "
        '{"FETCH_DEADLINE_S": 30}.',
    )
    state = models.CharField(
        max_length=16, choices=JobState.choices, default=JobState.DRAFT, db_index=True
    )
    released = models.PositiveIntegerField(
        default=0,
        help_text="URLs handed to workers for a first attempt (counts against max_pages).",
    )
    stats = models.JSONField(default=dict, blank=True, help_text="Counters at the last finish.")
    close_reason = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="Why the spider ended this run early (CloseSpider): nothing more is fetched.",
    )
    error = models.TextField(
        blank=True, help_text="Why the job failed: a configuration the crawl could not apply."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        permissions = [
            ("change_crawl_network", "Can let a job reach networks beyond public addresses"),
            ("pin_crawl_channel", "Can pin a job to a release channel"),
            ("raise_crawl_priority", "Can give a job a priority above the default band"),
            ("skip_tls_verify", "Can let a job fetch without checking TLS certificates"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"

    def may(self, permission: str) -> bool:
        """Whether this job's owner holds ``permission`` (staff do; a job without an owner was
        made by an operator, with manage.py)."""
        owner = self.owner
        return owner is None or owner.is_staff or owner.has_perm(permission)

    def problems(self, seeds: bool = True) -> dict[str, list[str]]:
        """What in this job's configuration the crawl could not apply, by field (``seeds``:
        check the seeds too; a running job's are in its frontier already)."""
        found: dict[str, list[str]] = {}

        def add(name: str, message: str) -> None:
            found.setdefault(name, []).append(message)

        if seeds:
            if not isinstance(self.seeds, list) or (not self.seeds and not self.spider):
                add("seeds", "give at least one start URL, or a spider")
            for seed in self.seeds if isinstance(self.seeds, list) else []:
                if problem := seed_problem(seed):
                    add("seeds", problem)
        for name in ("allowed_domains", "include_patterns", "exclude_patterns"):
            value = getattr(self, name)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                add(name, "must be a list of strings")
        for name in ("include_patterns", "exclude_patterns"):
            for pattern in getattr(self, name) if isinstance(getattr(self, name), list) else []:
                if problem := patterns.problem(pattern):
                    add(name, problem)
        caps = self.path_caps
        if not isinstance(caps, dict):
            add("path_caps", 'must be an object of REGEX: count, e.g. {"/calendar/": 50}')
        else:
            for pattern, limit in caps.items():
                if problem := patterns.problem(pattern):
                    add("path_caps", problem)
                if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
                    add("path_caps", f"{pattern!r}: {limit!r} is not a whole number >= 0")
        for problem in defaults.job_problems(self.settings, self.may):
            add("settings", problem)
        if not isinstance(self.spider_args, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.spider_args.items()
        ):
            add("spider_args", "must be an object of text arguments, e.g. {\"page\": \"2\"}")
        elif self.spider_args and not self.spider:
            add("spider_args", "arguments need a spider")
        for problem in selectors.problems(self.extract):
            add("extract", problem)
        if problem := schedules.problem(self.schedule or ""):
            add("schedule", problem)
        if not isinstance(self.user_agents, list) or not all(
            isinstance(u, str) and u.strip() and "\n" not in u for u in self.user_agents
        ):
            add("user_agents", "must be a list of one-line user agents")
        if not isinstance(self.proxies, list):
            add("proxies", f"must be a list of {', '.join(proxy_urls.SCHEMES)} URLs")
        else:
            for problem in filter(None, map(proxy_urls.problem, self.proxies)):
                add("proxies", problem)
        if not isinstance(self.headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and "\n" not in k + v
            for k, v in self.headers.items()
        ):
            add("headers", "must be an object of one-line header names and values")
        if isinstance(self.settings, dict) and isinstance(
            self.settings.get("ALLOWED_NETWORKS"), str
        ):
            try:
                guard.networks(self.settings["ALLOWED_NETWORKS"])
            except ValueError as exc:
                add("settings", f"ALLOWED_NETWORKS: {exc}")
        if problem := path_problem(self.warmup_path or ""):
            add("warmup_path", problem)
        if self.webhook_url and (problem := webhook_problem(self.webhook_url)):
            add("webhook_url", problem)
        if self.channel and (problem := channels.name_problem(self.channel)):
            add("channel", problem)
        if self.channel and not self.may("web.pin_crawl_channel"):
            add("channel", "pinning a job to a channel needs the web.pin_crawl_channel permission")
        band = defaults.JOB_PRIORITY_BAND
        if self.priority is not None and not 0 <= self.priority <= 9:
            add("priority", "must be between 0 and 9")
        elif (self.priority or 0) > band and not self.may("web.raise_crawl_priority"):
            add("priority", f"above {band} needs the web.raise_crawl_priority permission")
        if self.delay is not None and (self.delay < 0 or self.delay > 86400):
            add("delay", "must be between 0 and 86400 seconds")
        return found

    def clean(self) -> None:
        if self.webhook_url and not self.webhook_secret:
            self.webhook_secret = secrets.token_hex(32)
        problems = self.problems()
        if problems:
            raise ValidationError(problems)

    def transition(self, to: str) -> bool:
        """Move to state ``to`` if this caller is the one who does it; False if another did."""
        sources = [s for s, targets in JOB_TRANSITIONS.items() if to in targets]
        if not sources:
            raise InvalidTransition(f"no state leads to {to}")
        changes: dict = {"state": to}
        now = timezone.now()
        if to == JobState.RUNNING:
            changes["started_at"] = self.started_at or now
        if to in (JobState.FINISHED, JobState.CANCELLED, JobState.FAILED):
            changes["finished_at"] = now
        won = CrawlJob.objects.filter(pk=self.pk, state__in=sources).update(**changes) == 1
        self.refresh_from_db()
        return won


def webhook_problem(url: str) -> str:
    """Why ``url`` cannot be a webhook (the address guard is applied when it is called)."""
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        ok = False
    return "" if ok else f"{url!r} is not an http(s) URL"


