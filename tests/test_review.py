"""The review queue: parking a URL with the site's answer, and a person's decisions through the
shell (``manage.py review``) and the admin."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from tasks.fetch import identity, ladder, outcomes, sessions
from tasks.frontier import jobs, review, transitions
from web.models import FrontierURL, Review, URLState

pytestmark = pytest.mark.django_db(transaction=True)
HOST = "127.0.0.1:9"


@pytest.fixture
def job():
    j = jobs.create_job([f"http://{HOST}/"], max_depth=3)
    jobs.start(j)
    return j


def parked(job, path: str, level: int = ladder.PARK) -> FrontierURL:
    transitions.insert_urls(job.pk, [f"http://{HOST}{path}"], 1)
    url = FrontierURL.objects.get(job=job, url=f"http://{HOST}{path}")
    FrontierURL.objects.filter(pk=url.pk).update(state=URLState.SCHEDULED)
    claim = transitions.claim(url.pk, job.pk)
    claim.level = level
    ban = outcomes.Banned("challenge: g-recaptcha", status=200)
    ban.headers, ban.body = {"Content-Type": "text/html"}, b'<div class="g-recaptcha"></div>'
    assert transitions.park(claim, ban) == URLState.NEEDS_REVIEW
    return url


def test_a_parked_url_keeps_the_sites_answer_and_its_level(job):
    url = parked(job, "/offers/1")
    row = FrontierURL.objects.get(pk=url.pk)
    assert (row.state, row.error_reason, row.ladder_level) == ("needs_review", "banned", 4)
    item = Review.objects.get(url=url)
    assert (item.host, item.level, item.status) == (HOST, 4, 200)
    assert "g-recaptcha" in item.body and item.headers["Content-Type"] == "text/html"
    assert jobs.counts(job.pk).get("needs_review") == 1


def test_a_parked_url_of_an_ended_job_stays_parked_with_its_evidence(job, redis):
    url = parked(job, "/offers/1")
    jobs.cancel(job)
    assert review.requeue(FrontierURL.objects.filter(pk=url.pk)) == 0
    assert FrontierURL.objects.get(pk=url.pk).state == URLState.NEEDS_REVIEW
    assert Review.objects.filter(url=url).exists()


def test_review_command_lists_requeues_with_cookies_and_drops(job, redis):
    first, second = parked(job, "/offers/1"), parked(job, "/offers/2")
    for _ in range(12):
        ladder.signal(job, HOST, banned=True)
    out = StringIO()
    call_command("review", "list", "--job", str(job.pk), stdout=out)
    assert "2 URLs need review" in out.getvalue() and "/offers/1" in out.getvalue()
    out = StringIO()
    call_command("review", "requeue", "--job", str(job.pk), "--host", HOST,
                 "--cookies", "cf_clearance=solved; sid=42", stdout=out)  # fmt: skip
    assert "2 URLs requeued" in out.getvalue()
    for url in (first, second):
        row = FrontierURL.objects.get(pk=url.pk)
        assert (row.state, row.attempts) == ("queued", 0)
    assert not Review.objects.filter(job=job).exists()
    assert ladder.levels(job.pk) == {}  # its host starts from level 0 again
    who = identity.current(job, HOST)
    jar = sessions.load(job.pk, HOST, who.key).for_requests()
    assert (jar.get("cf_clearance"), jar.get("sid")) == ("solved", "42")
    third = parked(job, "/offers/3")
    call_command("review", "drop", "--job", str(job.pk), stdout=StringIO())
    row = FrontierURL.objects.get(pk=third.pk)
    assert row.state == "failed" and row.error_message.startswith("given up after review: ")


def test_admin_review_actions(admin_client, job, redis):
    first, second = parked(job, "/offers/1"), parked(job, "/offers/2")
    assert admin_client.get("/admin/web/review/").status_code == 200
    item = Review.objects.get(url=first)
    page = admin_client.get(f"/admin/web/review/{item.pk}/change/").content.decode()
    assert "g-recaptcha" in page and "not rendered" in page
    response = admin_client.post(f"/admin/web/review/{item.pk}/change/",
                                 {"cookies": "token=abc"}, follow=True)  # fmt: skip
    assert "jar" in response.content.decode()
    who = identity.current(job, HOST)
    assert sessions.load(job.pk, HOST, who.key).for_requests().get("token") == "abc"
    response = admin_client.post(
        "/admin/web/review/",
        {"action": "requeue", "_selected_action": [item.pk], "index": 0}, follow=True,
    )  # fmt: skip
    assert "1 URLs requeued" in response.content.decode()
    other = Review.objects.get(url=second)
    response = admin_client.post(
        "/admin/web/review/",
        {"action": "give_up", "_selected_action": [other.pk], "index": 0}, follow=True,
    )  # fmt: skip
    assert "1 URLs failed" in response.content.decode()
    states = dict(FrontierURL.objects.filter(pk__in=[first.pk, second.pk])
                  .values_list("pk", "state"))  # fmt: skip
    assert states == {first.pk: "queued", second.pk: "failed"}


def test_results_files_show_a_parked_url_as_needs_review(job):
    from web import export

    parked(job, "/offers/1")
    row = next(r for r in export.rows(job.pk) if r["url"].endswith("/offers/1"))
    assert row["error"] == "needs_review: challenge: g-recaptcha"


def test_metrics_show_the_review_queue_and_ladder_levels(client, job, redis):
    parked(job, "/offers/1")
    parked(job, "/offers/2")
    for level in (0, 0, 0, 1, 1, 1):
        ladder.signal(job, HOST, banned=True, ran_at=level)
    text = client.get("/metrics").content.decode()
    assert f'crawlplatform_review_queue{{crawl_job="{job.pk}"}} 2.0' in text
    assert f'crawlplatform_host_ladder_level{{crawl_job="{job.pk}",host="{HOST}"}} 2.0' in text
