"""The operators' admin: crawl settings changed at run time and their audit, release
channels and their events."""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from tasks import defaults, live
from tasks.frontier import canary, channels
from web.models import Channel, ChannelEvent, LiveSetting, SettingChange


class LiveSettingForm(forms.ModelForm):
    name = forms.ChoiceField(help_text="A crawl setting of tasks/defaults.py.")
    text = forms.CharField(
        label="value",
        help_text="As on the command line: a number, true/false, or text. In force in every "
        "worker and scheduler within a second (tasks/live.py).",
    )

    class Meta:
        model = LiveSetting
        fields: list[str] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        choices = sorted(set(defaults.names()) - defaults.RESTART_ONLY)
        self.fields["name"].choices = [(n, n) for n in choices]
        if self.instance.pk:
            self.fields["name"].initial = self.instance.name
            self.fields["name"].disabled = True
            value = self.instance.value
            self.fields["text"].initial = value if isinstance(value, str) else json.dumps(value)

    def clean(self) -> dict:
        data = super().clean()
        if "name" in data and "text" in data:
            try:
                data["value"] = live.parse(data["name"], data["text"])
                live.check(data["name"], data["value"])
            except live.Refused as exc:
                raise forms.ValidationError(str(exc)) from None
        return data


@admin.register(LiveSetting)
class LiveSettingAdmin(admin.ModelAdmin):
    """Crawl settings changed at run time; every change is audited (Setting changes)."""

    form = LiveSettingForm
    list_display = ["name", "value", "default", "updated_by", "updated_at"]

    @admin.display(description="default")
    def default(self, row: LiveSetting) -> str:
        return repr(getattr(defaults, row.name, "?"))

    def save_model(self, request: HttpRequest, row: LiveSetting, form, change: bool) -> None:
        name, value = form.cleaned_data["name"], form.cleaned_data["value"]
        live.change(name, value, request.user.get_username())
        row.pk = name

    def delete_model(self, request: HttpRequest, row: LiveSetting) -> None:
        live.change(row.name, None, request.user.get_username())

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for name in list(queryset.values_list("name", flat=True)):
            live.change(name, None, request.user.get_username())


@admin.register(SettingChange)
class SettingChangeAdmin(admin.ModelAdmin):
    list_display = ["at", "who", "name", "old", "new"]
    list_filter = ["name", "who"]
    readonly_fields = ["at", "who", "name", "old", "new"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Channel)
class ChannelAdmin(admin.ModelAdmin):
    """Release channels and their share of the crawl; the weights change only through the
    actions (or ``manage.py channel``), so that they always add up to 100."""

    list_display = ["name", "weight", "auto_step", "step_since", "updated_by", "updated_at"]
    readonly_fields = ["name", "weight", "auto_step", "step_since", "updated_by", "updated_at"]
    actions = ["promote", "rollback", "start_canary"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def _one(self, request: HttpRequest, queryset: QuerySet) -> Channel | None:
        if queryset.count() != 1:
            self.message_user(request, "select one channel", messages.WARNING)
            return None
        return queryset.get()

    @admin.action(description="Promote: all new URLs to this channel (the others drain)")
    def promote(self, request: HttpRequest, queryset: QuerySet) -> None:
        if row := self._one(request, queryset):
            who = request.user.get_username()
            split = channels.promote(row.name, who)
            self.message_user(request, f"weights now {split}", messages.SUCCESS)

    @admin.action(description="Roll back: its weight to the stable channel, its queue moved")
    def rollback(self, request: HttpRequest, queryset: QuerySet) -> None:
        if row := self._one(request, queryset):
            who = request.user.get_username()
            split, moved = channels.rollback(row.name, who)
            self.message_user(request, f"weights now {split}; {moved} queued URLs moved")

    @admin.action(description="Start as a canary (CANARY_STEPS, rolled back when unhealthy)")
    def start_canary(self, request: HttpRequest, queryset: QuerySet) -> None:
        if row := self._one(request, queryset):
            split = canary.start(row.name, request.user.get_username())
            self.message_user(request, f"weights now {split}", messages.SUCCESS)


@admin.register(ChannelEvent)
class ChannelEventAdmin(admin.ModelAdmin):
    list_display = ["at", "channel", "kind", "detail"]
    list_filter = ["channel", "kind"]
    readonly_fields = ["at", "channel", "kind", "detail"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
