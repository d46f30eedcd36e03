"""What the JSON API reads and writes: jobs, their pages and frontier URLs, their stats.

A job's values are judged in one place, the model (``CrawlJob.clean``, reached through
``tasks.frontier.jobs.create_job`` and ``jobs.update``), so the API, the admin, the CLI and
job specs refuse the same things with the same messages. The serializer checks only what
DRF checks of a JSON value's type (a number is a number, a flag a boolean), and that text
can be stored at all (no NUL or lone surrogate). Its JSON fields are documented with the
job spec's shapes (``web/specs.py``), so the two descriptions of a job cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from django.core.validators import ProhibitNullCharactersValidator
from django.db import models
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from rest_framework import serializers
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from tasks.frontier import jobs
from web import specs
from web.models import CrawlJob, FrontierURL, Item, Page

_TEXT_CHECKS = (ProhibitNullCharactersValidator(), ProhibitSurrogateCharactersValidator())


def _storable(value: Any) -> None:
    """Every string in a JSON value (keys too) passes DRF's text checks: PostgreSQL refuses
    NUL in ``jsonb`` and lone surrogates in UTF-8."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            for check in _TEXT_CHECKS:
                check(item)


class Specified:
    """A job field documented with its shape in the job spec's JSON Schema."""


class JSONValue(Specified, serializers.JSONField):
    """Any storable JSON value; whether it is a valid one is the model's to say."""

    default_validators = [_storable]


class SpecText(Specified, serializers.CharField):
    """Text the spec lists the choices of; whether it is one is the model's to say."""


class SpecShapes(OpenApiSerializerFieldExtension):
    target_class = Specified
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction) -> dict:
        node = specs.schema()["properties"]["spec"]
        for part in specs.PATH_OF[self.target.field_name].split("."):
            node = node["properties"][part]
        return {key: value for key, value in node.items() if key != "description"}


CONFIG = ["name", *specs.FIELDS.values()]  # what a job is configured with: all a spec holds
PROGRESS = [
    "state", "run", "released", "stats", "error", "created_at", "started_at", "finished_at",
    "webhook_secret", "webhook_status",
]  # fmt: skip


class JobSerializer(serializers.ModelSerializer):
    """A job: its configuration (writable) and its progress (read-only)."""

    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = CrawlJob
        fields = ["id", "owner", *CONFIG, *PROGRESS]
        read_only_fields = PROGRESS
        extra_kwargs = {"name": {"required": False}, "seeds": {"required": False}}

    def build_standard_field(self, field_name: str, model_field: models.Field) -> tuple:
        field_class, kwargs = super().build_standard_field(field_name, model_field)
        if field_name not in CONFIG:
            return field_class, kwargs
        for rule in ("max_length", "min_value", "max_value", "validators", "choices"):
            kwargs.pop(rule, None)  # the model's rules, applied by the model
        if isinstance(model_field, models.JSONField):
            return JSONValue, kwargs
        if issubclass(field_class, serializers.CharField | serializers.ChoiceField):
            kwargs["allow_blank"] = True
            return (SpecText if model_field.choices else serializers.CharField), kwargs
        return field_class, kwargs

    def create(self, validated_data: dict) -> CrawlJob:
        seeds = validated_data.pop("seeds", [])  # a spider job may have none
        owner = self.context["request"].user
        try:
            return jobs.create_job(seeds, owner=owner, **validated_data)
        except jobs.JobError as exc:
            raise serializers.ValidationError(exc.fields) from None

    def update(self, job: CrawlJob, validated_data: dict) -> CrawlJob:
        try:
            jobs.update(job, **validated_data)
        except jobs.JobError as exc:
            raise serializers.ValidationError(exc.fields) from None
        return job


class PageSerializer(serializers.ModelSerializer):
    """A fetched page: what came back and what the extraction rules found."""

    url = serializers.CharField(source="url.url", read_only=True, help_text="The URL asked for.")
    body_stored = serializers.SerializerMethodField(
        help_text="The raw body is in the body store (the WARC export holds it)."
    )

    class Meta:
        model = Page
        fields = [
            "id", "url", "final_url", "status", "content_type", "title", "size", "truncated",
            "elapsed_ms", "fetched_at", "checked_at", "content_hash", "data", "body_stored",
            "run", "first_run", "modified_run",
        ]  # fmt: skip
        read_only_fields = fields

    def get_body_stored(self, page: Page) -> bool:
        return bool(page.body_key)


class FrontierURLSerializer(serializers.ModelSerializer):
    """A URL of a job's frontier: its state and, once it ended, its outcome."""

    class Meta:
        model = FrontierURL
        fields = [
            "id", "url", "host", "depth", "state", "attempts", "released", "ladder_level",
            "not_before", "scheduled_at", "lease_until", "error_reason", "error_message",
            "http_status", "discovered_from", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields


class ItemSerializer(serializers.ModelSerializer):
    """An item a spider yielded, as its pipelines left it."""

    url = serializers.CharField(
        source="url.url", read_only=True, default=None,
        help_text="The URL whose page yielded it (null: yielded by the spider's start).",
    )  # fmt: skip

    class Meta:
        model = Item
        fields = ["id", "url", "spider", "data", "dropped", "run", "created"]
        read_only_fields = fields


class StatsSerializer(serializers.Serializer):
    """Where a job stands now."""

    state = serializers.ChoiceField(choices=CrawlJob._meta.get_field("state").choices)
    run = serializers.IntegerField()
    frontier = serializers.DictField(
        child=serializers.IntegerField(), help_text="URLs by state (every state, zeros too)."
    )
    pages = serializers.IntegerField(help_text="Pages stored.")
    outcomes = serializers.DictField(
        child=serializers.IntegerField(), help_text="URLs by outcome code (error_reason)."
    )
    stats = serializers.DictField(help_text="Counters at the last finish.")
    items = serializers.IntegerField(help_text="Items a spider yielded and its pipelines kept.")
    drops = serializers.DictField(
        child=serializers.IntegerField(), help_text="Items dropped, by reason."
    )
    spider_stats = serializers.DictField(
        help_text="A spider job's crawler.stats as get_stats() gives them, by name: Scrapy's "
        "built-in stats (item_scraped_count, finish_reason, ...: computed from the job's "
        "tables) and those the spider's code set, summed over every worker and counted once "
        "per page; dates as ISO 8601 text. Empty for a job without a spider."
    )


class DetailSerializer(serializers.Serializer):
    detail = serializers.CharField()
