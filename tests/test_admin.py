"""The admin pages render and the job actions report what they did."""

import pytest

from tasks.frontier import jobs
from web.models import CrawlJob, JobState

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
