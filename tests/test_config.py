"""The configuration keeps its promises: no loss in Celery, time budgets that nest."""

import re
from pathlib import Path

from django.conf import settings

from crawlplatform.celery import app
from tasks import defaults
from tasks.defaults import setting
from tasks.tasks import fetch_url, fetch_urls


def test_time_budgets_nest():
    # A page fails on its own deadline before its task is killed, a killed task's message is
    # not handed out again while it could still be running, and a lease survives two missed
    # renewals.
    chain = ["FETCH_DEADLINE_S", "TASK_SOFT_TIME_LIMIT_S", "TASK_TIME_LIMIT_S",
             "VISIBILITY_TIMEOUT_S"]  # fmt: skip
    values = [setting(name) for name in chain]
    assert values == sorted(values) and len(set(values)) == len(values), dict(
        zip(chain, values, strict=True)
    )
    assert 3 * setting("LEASE_RENEW_S") <= setting("LEASE_S")
    # The last URL of a message starts within the budget and ends within its page's deadline.
    last_start = setting("BATCH_BUDGET_S") + setting("FETCH_DEADLINE_S")
    assert last_start < setting("TASK_SOFT_TIME_LIMIT_S")


def test_a_spider_page_ends_within_its_task_budget_by_default():
    # The last URL of a message: its fetch and then its callback, before the soft limit.
    steps = ["BATCH_BUDGET_S", "FETCH_DEADLINE_S", "SPIDER_CALLBACK_TIMEOUT_S"]
    last_end = sum(map(setting, steps))
    assert last_end < setting("TASK_SOFT_TIME_LIMIT_S")


def test_the_test_budgets_nest_as_well(monkeypatch):
    from tests.budgets import FAST

    for key, value in FAST.items():
        monkeypatch.setenv(key, value)
    test_time_budgets_nest()


def test_celery_is_configured_for_no_loss():
    conf = app.conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_ignore_result
    for task in (fetch_url, fetch_urls):
        assert task.acks_late and task.reject_on_worker_lost
    options = conf.broker_transport_options
    assert options["visibility_timeout"] > conf.task_time_limit
    assert options["visibility_timeout"] > setting("DB_RETRY_S")  # the longest countdown used
    assert conf.worker_soft_shutdown_timeout > setting("FETCH_DEADLINE_S")
    assert conf.task_default_queue == settings.CRAWL_QUEUE


def test_per_job_settings_override_the_environment(monkeypatch):
    class Job:
        settings = {"FETCH_DEADLINE_S": 7}

    monkeypatch.setenv("CRAWL_FETCH_DEADLINE_S", "9")
    assert setting("FETCH_DEADLINE_S") == 9.0
    assert setting("FETCH_DEADLINE_S", Job()) == 7.0


def test_every_setting_is_read_by_the_code():
    """A knob that nothing reads would be documented, settable live, and change nothing."""
    root = Path(__file__).resolve().parent.parent
    code = "\n".join(
        p.read_text()
        for package in ("tasks", "web", "crawlplatform")
        for p in (root / package).rglob("*.py")
        if p != root / "tasks" / "defaults.py" and "migrations" not in p.parts
    )
    read = re.compile(
        r'setting\(\s*"(\w+)"|(?:defaults|crawl)\.([A-Z][A-Z0-9_]+)\b|"([A-Z][A-Z0-9_]+)"'
    )
    used = {name for found in read.findall(code) for name in found if name}
    assert sorted(set(defaults.names()) - used) == []
