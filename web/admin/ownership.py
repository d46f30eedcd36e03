"""What a person may see in the admin: staff every row, anyone else the rows of their own
jobs (web/access.py); and the filter of rows by the jobs one may see."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from web import access


class OwnJobs:
    """Staff keep Django's permissions over every row; anyone else may look at the rows of
    their own jobs (and change and delete their jobs): ``job_path`` leads from a row to its
    job (empty for the job itself)."""

    job_path = "job__"

    def _own(self, request: HttpRequest) -> bool:
        return not access.sees_all(request.user) and request.user.is_active

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        rows = super().get_queryset(request)
        if access.sees_all(request.user):
            return rows
        return rows.filter(**{f"{self.job_path}owner": request.user})

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._own(request) or super().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._own(request) or super().has_view_permission(request, obj)


class JobFilter(admin.SimpleListFilter):
    """Rows by job, offering the jobs this person may see (the newest 100)."""

    title = "job"
    parameter_name = "job__id__exact"

    def lookups(self, request: HttpRequest, model_admin) -> list[tuple[int, str]]:
        return [(job.pk, str(job)) for job in access.jobs(request.user).only("id", "name")[:100]]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(job_id=self.value()) if self.value() else queryset
