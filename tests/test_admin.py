"""The admin pages render and the job actions report what they did."""

import pytest

from tasks.frontier import jobs, transitions
from web.models import CrawlJob, FrontierURL, JobState, URLState

pytestmark = pytest.mark.django_db


def test_admin_lists_and_job_actions(admin_client):
    job = jobs.create_job(["http://127.0.0.1:9/"], name="admin job")
    for page in ["crawljob", "frontierurl", "page"]:
        assert admin_client.get(f"/admin/web/{page}/").status_code == 200
    response = admin_client.post(
        "/admin/web/crawljob/",
        {"action": "started_jobs", "_selected_action": [job.pk], "index": 0},
        follow=True,
    )
    assert f"started: #{job.pk}" in response.content.decode().lower()
    assert CrawlJob.objects.get(pk=job.pk).state == JobState.RUNNING
    assert admin_client.get(f"/admin/web/crawljob/{job.pk}/change/").status_code == 200
    response = admin_client.post(
        "/admin/web/crawljob/",
        {"action": "resumed_jobs", "_selected_action": [job.pk], "index": 0},
        follow=True,
    )
    assert "not resumed" in response.content.decode().lower()


def _form(**overrides) -> dict:
    """An add/change form of the job admin as a browser posts it."""
    data = {
        "name": "form job", "seeds": "", "allowed_domains": "", "include_subdomains": "on",
        "include_patterns": "", "exclude_patterns": "", "max_depth": 5, "max_pages": "",
        "max_pages_per_host": "", "path_caps": "{}", "priority": 0, "delay": 0,
        "host_concurrency": 0, "obey_robots": "on", "user_agents": "", "proxies": "",
        "headers": "", "warmup_path": "", "render": "never", "store_bodies": "on",
        "extract": "[]", "schedule": "", "webhook_url": "", "settings": "{}",
        "checkpoints-TOTAL_FORMS": 0, "checkpoints-INITIAL_FORMS": 0,
    }  # fmt: skip
    return {**data, **overrides}


def test_job_form_takes_one_item_per_line_and_names_what_is_wrong(admin_client, admin_user):
    response = admin_client.post(
        "/admin/web/crawljob/add/",
        _form(seeds="http://127.0.0.1:9/a\n\n  http://127.0.0.1:9/b  \n",
              allowed_domains="127.0.0.1\nexample.org", headers="Accept-Language: de"),
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    job = CrawlJob.objects.get(name="form job")
    assert job.seeds == ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]
    assert job.allowed_domains == ["127.0.0.1", "example.org"]
    assert job.headers == {"Accept-Language": "de"}
    assert job.owner == admin_user
    page = admin_client.get(f"/admin/web/crawljob/{job.pk}/change/").content.decode()
    assert "http://127.0.0.1:9/a\nhttp://127.0.0.1:9/b</textarea>" in page

    response = admin_client.post(
        "/admin/web/crawljob/add/",
        _form(name="bad", seeds="not a url", include_patterns="(unclosed", headers="nocolon"),
    )
    errors = response.context["adminform"].form.errors
    assert set(errors) == {"seeds", "include_patterns", "headers"}
    assert "not a valid regular expression" in errors["include_patterns"][0]
    assert not CrawlJob.objects.filter(name="bad").exists()


def test_editing_a_running_job_adds_its_new_seeds_to_the_frontier(admin_client):
    job = jobs.create_job(["http://127.0.0.1:9/"], name="running")
    jobs.start(job)
    response = admin_client.post(
        f"/admin/web/crawljob/{job.pk}/change/",
        _form(name="running", seeds="http://127.0.0.1:9/\nhttp://127.0.0.1:9/new"),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert set(job.urls.values_list("url", flat=True)) == {
        "http://127.0.0.1:9/",
        "http://127.0.0.1:9/new",
    }


def test_job_list_shows_progress_rate_owner_and_the_index_a_fleet_summary(admin_client):
    job = jobs.create_job(["http://127.0.0.1:9/"], name="listed")
    jobs.start(job)
    transitions.insert_urls(job.pk, [f"http://127.0.0.1:9/{i}" for i in range(3)], depth=1)
    FrontierURL.objects.filter(job=job, url__endswith="/0").update(state=URLState.DONE)
    page = admin_client.get("/admin/web/crawljob/").content.decode().lower()
    assert "1 done / 3 queued / 0 failed / 0 skipped" in page
    assert "pages/s" in page and "last checkpoint" in page
    index = admin_client.get("/admin/").content.decode()
    assert 'id="fleet-summary"' in index and "1 running" in index


def test_clone_and_requeue_report_what_they_did(admin_client):
    job = jobs.create_job(["http://127.0.0.1:9/"], name="original", max_pages=7)
    response = admin_client.post(
        "/admin/web/crawljob/",
        {"action": "clone_jobs", "_selected_action": [job.pk], "index": 0},
        follow=True,
    )
    copy = CrawlJob.objects.get(name="original (copy)")
    assert f"#{job.pk} -&gt; #{copy.pk}" in response.content.decode()
    assert (copy.state, copy.max_pages, copy.seeds) == (JobState.DRAFT, 7, job.seeds)

    jobs.start(job)
    url = job.urls.get()
    FrontierURL.objects.filter(pk=url.pk).update(
        state=URLState.FAILED, error_reason="http_500", attempts=4
    )
    listed = admin_client.get("/admin/web/frontierurl/?state__exact=failed&error_reason=http_500")
    assert url.url in listed.content.decode()
    response = admin_client.post(
        "/admin/web/frontierurl/",
        {"action": "requeue", "_selected_action": [url.pk], "index": 0},
        follow=True,
    )
    assert "1 of 1 URLs requeued" in response.content.decode()
    url.refresh_from_db()
    assert (url.state, url.attempts, url.error_reason) == (URLState.QUEUED, 0, "")


def test_users_who_are_not_staff_work_on_their_own_jobs_only(client, django_user_model):
    alice = django_user_model.objects.create_user("alice", password="pw-alice-1")  # noqa: S106
    bob = django_user_model.objects.create_user("bob", password="pw-bob-1")  # noqa: S106
    theirs = jobs.create_job(["http://127.0.0.1:9/b"], name="bobs job", owner=bob)
    jobs.start(theirs)
    response = client.post(
        "/admin/login/?next=/admin/", {"username": "alice", "password": "pw-alice-1"}
    )
    assert response.status_code == 302  # signed in, though not staff
    response = client.post("/admin/web/crawljob/add/", _form(name="alices job",
                           seeds="http://127.0.0.1:9/a", owner=bob.pk))  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    mine = CrawlJob.objects.get(name="alices job")
    assert mine.owner == alice  # not the owner she tried to name
    listed = client.get("/admin/web/crawljob/").content.decode()
    assert "alices job" in listed and "bobs job" not in listed
    assert client.get(f"/admin/web/crawljob/{theirs.pk}/change/").status_code == 302
    urls = client.get("/admin/web/frontierurl/").content.decode()
    assert "127.0.0.1:9/b" not in urls and "bobs job" not in urls  # nor in the job filter
    client.post(
        "/admin/web/crawljob/",
        {"action": "cancelled_jobs", "_selected_action": [theirs.pk], "index": 0},
    )
    assert CrawlJob.objects.get(pk=theirs.pk).state == JobState.RUNNING
    assert client.get("/admin/auth/user/").status_code == 403
