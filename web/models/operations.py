"""The platform's operational state: scheduler fencing, health probes, live settings and
their audit, release channels and their events."""

from __future__ import annotations

from django.db import models


class SchedulerFence(models.Model):
    """The fencing token of scheduler leadership: the newest leader's epoch.

    A scheduler that becomes leader raises the epoch; every release it makes checks, in the
    same transaction as its writes, that the epoch is still its own. A leader that lost its
    lease during a slow pass finds a newer epoch and writes nothing.
    """

    name = models.CharField(max_length=40, unique=True)
    epoch = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name} epoch {self.epoch}"


class HealthProbe(models.Model):
    """One row per web process host, rewritten by the "database writable" health check."""

    name = models.CharField(max_length=255, unique=True)
    at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.at:%Y-%m-%d %H:%M:%S}"


class LiveSetting(models.Model):
    """A crawl setting changed at run time (``tasks/live.py``): in force in every process,
    after a job's own override and before the environment."""

    name = models.CharField(max_length=64, primary_key=True)
    value = models.JSONField()
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=150, blank=True)

    def __str__(self) -> str:
        return f"{self.name} = {self.value!r}"


class SettingChange(models.Model):
    """The audit of live settings: who changed what, when, from what to what (null: unset)."""

    name = models.CharField(max_length=64, db_index=True)
    old = models.JSONField(null=True, blank=True)
    new = models.JSONField(null=True, blank=True)
    who = models.CharField(max_length=150)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.who}: {self.name} {self.old!r} -> {self.new!r}"


class Channel(models.Model):
    """A release channel's share of the crawl (``tasks/frontier/channels.py``)."""

    name = models.CharField(max_length=40, primary_key=True)
    weight = models.PositiveSmallIntegerField(
        default=0, help_text="Percent of hosts whose URLs go to this channel's workers."
    )
    auto_step = models.BooleanField(
        default=False, help_text="A canary that steps up through CANARY_STEPS while healthy."
    )
    step_since = models.DateTimeField(null=True, blank=True, help_text="Its current step began.")
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=150, blank=True)

    def __str__(self) -> str:
        return f"{self.name} {self.weight}%"


class ChannelEvent(models.Model):
    """What happened to a channel: a canary started, stepped up, promoted or rolled back."""

    channel = models.CharField(max_length=40, db_index=True)
    kind = models.CharField(max_length=20)
    detail = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.channel} {self.kind}: {self.detail}"
