"""What a job owner may set: a table of settings with bounds, permissions for what widens the
platform's reach, the same refusal through every door, and bounds that hold for values stored
before they did."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User

from tasks import defaults
from tasks.defaults import setting
from tasks.frontier import jobs
from tasks.rules import guard
from web.models import CrawlJob

pytestmark = pytest.mark.django_db

WIDENING = {"ALLOWED_NETWORKS": "0.0.0.0/0,::/0", "FETCH_MAX_BYTES": 10**12,
            "FETCH_DEADLINE_S": 1e9, "SCHEDULER_BATCH": 10**9, "READY_PER_JOB": 10**9}  # fmt: skip


@pytest.fixture
def owner() -> User:
    return User.objects.create_user("owner")  # an active user, not staff


def _refusals(owner: User, **fields) -> dict[str, list[str]]:
    return CrawlJob(seeds=["http://shop.test/"], owner=owner, **fields).problems(seeds=False)


def test_an_owner_cannot_widen_what_the_platform_reaches_or_holds(owner):
    found = " | ".join(_refusals(owner, settings=WIDENING)["settings"])
    assert "ALLOWED_NETWORKS: needs the web.change_crawl_network permission" in found
    for name in ("FETCH_MAX_BYTES", "FETCH_DEADLINE_S", "SCHEDULER_BATCH", "READY_PER_JOB"):
        assert f"{name}: " in found and "(at most the platform's value)" in found
    assert "priority" in _refusals(owner, priority=defaults.JOB_PRIORITY_BAND + 1)
    assert "web.pin_crawl_channel" in _refusals(owner, channel="canary")["channel"][0]


@pytest.mark.parametrize("name", ["DB_PREPARE", "CHROMIUM_PATH", "RESOLVE", "TASK_TIME_LIMIT_S"])
def test_operator_settings_are_refused_for_a_job(owner, name):
    value = {bool: True, str: "x", int: 1, float: 1.0}[type(getattr(defaults, name))]
    (refusal,) = _refusals(owner, settings={name: value})["settings"]
    assert refusal.startswith(f"{name}: an operator setting")


def test_a_stricter_value_is_a_jobs_to_choose(owner):
    assert not _refusals(owner, settings={"FETCH_DEADLINE_S": 5.0, "RETRY_MAX_ATTEMPTS": 2,
                                          "USER_AGENT": "shopbot/1"})  # fmt: skip


def test_permissions_granted_or_staff_let_it_through(owner):
    owner.user_permissions.add(
        *Permission.objects.filter(codename__in=["change_crawl_network", "pin_crawl_channel",
                                                  "raise_crawl_priority"])  # fmt: skip
    )
    owner = User.objects.get(pk=owner.pk)  # permissions are cached per instance
    assert not _refusals(owner, settings={"ALLOWED_NETWORKS": "10.0.0.0/8"}, channel="canary",
                         priority=9)  # fmt: skip
    staff = User.objects.create_user("ops", is_staff=True)
    assert not _refusals(staff, settings={"ALLOWED_NETWORKS": "10.0.0.0/8"})


def test_the_api_refuses_with_the_field(owner, client):
    client.force_login(owner)
    answer = client.post("/api/jobs/", {"seeds": ["http://shop.test/"], "settings": WIDENING},
                         content_type="application/json")  # fmt: skip
    assert answer.status_code == 400
    assert "web.change_crawl_network" in str(answer.json()["settings"])


def test_values_stored_before_the_bounds_held_are_not_used(owner):
    job = jobs.create_job(["http://shop.test/"], owner=owner)
    CrawlJob.objects.filter(pk=job.pk).update(settings=WIDENING)  # past every check
    job = CrawlJob.objects.get(pk=job.pk)
    assert setting("FETCH_DEADLINE_S", job) == setting("FETCH_DEADLINE_S")
    assert setting("SCHEDULER_BATCH", job) == setting("SCHEDULER_BATCH")
    assert setting("FETCH_MAX_BYTES", job) == setting("FETCH_MAX_BYTES")
    assert guard.allowed(job) == guard.allowed()  # the owner may not widen the guard
