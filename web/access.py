"""Whose jobs a person may see and operate: staff every job, everyone else their own.

The admin, the dashboard and the API all ask here, so the rule is one rule.
"""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet

from web.models import CrawlJob, FrontierURL, Page


def sees_all(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.is_authenticated and (user.is_staff or user.is_superuser))


def jobs(user: AbstractBaseUser | AnonymousUser) -> QuerySet[CrawlJob]:
    """The jobs ``user`` may see and operate."""
    if sees_all(user):
        return CrawlJob.objects.all()
    if not user.is_authenticated:
        return CrawlJob.objects.none()
    return CrawlJob.objects.filter(owner=user)


def urls(user: AbstractBaseUser | AnonymousUser) -> QuerySet[FrontierURL]:
    return (
        FrontierURL.objects.all()
        if sees_all(user)
        else FrontierURL.objects.filter(job__in=jobs(user))
    )


def pages(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Page]:
    return Page.objects.all() if sees_all(user) else Page.objects.filter(job__in=jobs(user))
