"""Live configuration: a setting changed at run time is in force in running workers within a
second, without a restart, measured at the site from the change to the first request that
uses it; a job's setting edited while it runs applies the same way; bad values are refused
and every change is audited."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
from django.core.management import CommandError, call_command

from tasks import defaults, live
from tasks.frontier import jobs
from tests.conftest import wait_for
from tests.site import LocalSite, send
from web.models import LiveSetting, SettingChange

pytestmark = pytest.mark.django_db(transaction=True)
IN_FORCE_WITHIN_S = 1.0


class AgentSite(LocalSite):
    """An endless chain of pages, recording when each request came and with what User-Agent."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str]] = []
        lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with lock:
                    site.seen.append((time.monotonic(), self.headers.get("User-Agent", "")))
                if self.path == "/robots.txt":
                    send(self, 404, {"Content-Type": "text/plain"}, b"")
                    return
                n = int(self.path.rsplit("/", 1)[-1] or 0)
                links = "".join(f'<a href="/p/{n * 3 + i}">x</a>' for i in (1, 2, 3))
                send(self, 200, {}, f"<html><body>{links}</body></html>".encode())

            def log_message(self, *args) -> None:
                pass

        super().__init__(Handler)

    def first_with(self, agent: str, after: float) -> float | None:
        return next((t for t, ua in list(self.seen) if t >= after and ua == agent), None)


def _time_to_first_request(site: AgentSite, agent: str, make_change) -> float:
    began = time.monotonic()
    make_change()
    wait_for(lambda: site.first_with(agent, began), 10, f"a request as {agent}")
    return site.first_with(agent, began) - began


def test_a_live_change_reaches_running_workers_within_a_second(workers, scheduler):
    workers(processes=2, concurrency=2)
    with AgentSite() as site:
        job = jobs.create_job([site.url("/p/0")], delay=0.02, max_depth=20)
        jobs.start(job)
        wait_for(lambda: len(site.seen) >= 20, 60, "the crawl to be under way")
        assert {ua for _, ua in site.seen} == {defaults.USER_AGENT}

        took = _time_to_first_request(
            site, "livebot/2", lambda: call_command("config", "set", "USER_AGENT", "livebot/2")
        )
        print(f"\nlive setting in force at the site {took * 1000:.0f} ms after the change")
        assert took < IN_FORCE_WITHIN_S

        took_job = _time_to_first_request(
            site, "jobbot/3", lambda: jobs.update(job, settings={"USER_AGENT": "jobbot/3"})
        )
        print(f"job setting in force at the site {took_job * 1000:.0f} ms after the edit")
        assert took_job < IN_FORCE_WITHIN_S  # and the job's own value wins over the live one
        jobs.cancel(job)
    change = SettingChange.objects.get(name="USER_AGENT")
    assert (change.old, change.new) == (None, "livebot/2") and "manage.py config" in change.who


def test_bad_values_are_refused_and_unset_goes_back_to_the_default(redis):
    for args, why in [
        (("RETRY_BACKOFF_BASE_S", "soon"), "'soon' is not a number >= 0"),
        (("RETRY_BACKOFF_BASE_S", "-1"), "-1 is not a number >= 0"),
        (("RETRY_MAX_ATTEMPTS", "2.5"), "2.5 is not a whole number >= 0"),
        (("OBEY_NOTHING", "1"), "no such setting"),
        (("TASK_TIME_LIMIT_S", "500"), "read when a process starts"),
    ]:
        with pytest.raises(CommandError, match=why):
            call_command("config", "set", *args)
    assert not LiveSetting.objects.exists() and not SettingChange.objects.exists()

    call_command("config", "set", "RETRY_BACKOFF_BASE_S", "0.5", "--by", "ops")
    live.load()
    assert defaults.setting("RETRY_BACKOFF_BASE_S") == 0.5
    call_command("config", "unset", "RETRY_BACKOFF_BASE_S", "--by", "ops")
    live.load()
    assert defaults.setting("RETRY_BACKOFF_BASE_S") == defaults.RETRY_BACKOFF_BASE_S
    assert [(c.old, c.new, c.who) for c in SettingChange.objects.order_by("id")] == [
        (None, 0.5, "ops"),
        (0.5, None, "ops"),
    ]


def test_the_admin_changes_live_settings_through_the_same_checks(redis, admin_client):
    response = admin_client.post(
        "/admin/web/livesetting/add/", {"name": "RETRY_BACKOFF_BASE_S", "text": "soon"}
    )
    assert "is not a number" in response.content.decode()
    response = admin_client.post(
        "/admin/web/livesetting/add/", {"name": "RETRY_BACKOFF_BASE_S", "text": "0.25"}
    )
    assert response.status_code == 302
    assert LiveSetting.objects.get(name="RETRY_BACKOFF_BASE_S").value == 0.25
    response = admin_client.post(
        "/admin/web/livesetting/RETRY_BACKOFF_BASE_S/change/", {"text": "0.5"}, follow=True
    )
    assert LiveSetting.objects.get(name="RETRY_BACKOFF_BASE_S").value == 0.5
    audit = [(c.old, c.new, c.who) for c in SettingChange.objects.order_by("id")]
    assert audit == [(None, 0.25, "admin"), (0.25, 0.5, "admin")]
    assert "0.5" in admin_client.get("/admin/web/settingchange/").content.decode()


def test_the_listener_outlives_a_message_it_does_not_understand(redis):
    live.start()
    live.announce("job not-a-number")  # once a crash of the listener thread
    live.announce("")
    LiveSetting.objects.create(name="RETRY_BACKOFF_BASE_S", value=0.75, updated_by="test")
    live.announce("setting RETRY_BACKOFF_BASE_S")
    wait_for(lambda: defaults.setting("RETRY_BACKOFF_BASE_S") == 0.75, 5, "the listener to reload")
