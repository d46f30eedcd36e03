"""The review queue's admin: URLs a site kept blocking, what it answered, and a person's
decision (cookies for the host's jar, requeue, give up)."""

from __future__ import annotations

import base64

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from tasks.frontier import review
from web.admin.ownership import JobFilter, OwnJobs
from web.models import FrontierURL, Review


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
class ReviewAdmin(OwnJobs, admin.ModelAdmin):
    """Parked URLs: what the site answered, and a person's decision."""

    form = ReviewForm
    list_display = ["url", "job", "host", "reason", "level", "status", "parked_at"]
    list_filter = ["host", "level", JobFilter]
    search_fields = ["url__url", "reason"]
    list_select_related = ["url", "job"]
    readonly_fields = ["url", "job", "host", "reason", "level", "status", "headers", "preview",
                       "picture", "parked_at"]  # fmt: skip
    fields = [*readonly_fields, "cookies"]
    actions = ["requeue", "give_up"]

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._own(request) or super().has_change_permission(request, obj)

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
