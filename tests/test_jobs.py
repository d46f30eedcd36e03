"""Jobs refuse a configuration the crawl could not apply, naming the field, wherever they are
made (code, command line, admin); a running job whose configuration went bad fails alone."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tasks.frontier import jobs
from tasks.frontier.scheduler import Scheduler
from web.models import CrawlJob, FrontierURL, JobState, URLState

pytestmark = pytest.mark.django_db(transaction=True)
SEED = "http://127.0.0.1:9/"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"include_patterns": ["docs/(v1"]}, "include_patterns", "not a valid regular expression"),
        ({"exclude_patterns": ["*.pdf"]}, "exclude_patterns", "not a valid regular expression"),
        ({"path_caps": {"/cal/[": 5}}, "path_caps", "not a valid regular expression"),
        ({"path_caps": {"/cal/": "many"}}, "path_caps", "not a whole number"),
        ({"settings": {"FETCH_DEADLINE_S": "soon"}}, "settings", "not a number"),
        ({"settings": {"RETRY_MAX_ATTEMPTS": 2.5}}, "settings", "not a whole number"),
        ({"settings": {"NOPE": 1}}, "settings", "no such setting"),
        ({"max_depth": 100_000}, "max_depth", "less than or equal to 32767"),
        ({"delay": -1.0}, "delay", "between 0 and"),
        ({"proxies": ["ftp://127.0.0.1:21"]}, "proxies", "must be a list of http, https"),
        ({"proxies": ["http://"]}, "proxies", "must be a list of http, https"),
        ({"user_agents": ["Bot/1\r\nX-Injected: 1"]}, "user_agents", "one-line"),
        ({"headers": {"X-A": "1\nX-B: 2"}}, "headers", "one-line"),
        ({"render": "sometimes"}, "render", "not a valid choice"),
        ({"warmup_path": "http://169.254.169.254/latest"}, "warmup_path", "not a path"),
        ({"warmup_path": "//other.test/"}, "warmup_path", "not a path"),
    ],
)
def test_a_configuration_the_crawl_cannot_apply_is_refused_naming_its_field(fields, field, words):
    with pytest.raises(jobs.JobError) as refused:
        jobs.create_job([SEED], **fields)
    assert field in refused.value.fields
    assert words in " ".join(refused.value.fields[field])
    assert not CrawlJob.objects.exists()


@pytest.mark.parametrize("seeds", [True, [7], "http://example.com/"])
def test_seeds_that_are_not_a_list_of_urls_are_refused_naming_the_field(seeds):
    with pytest.raises(jobs.JobError) as refused:
        jobs.create_job(seeds)
    assert "seeds" in refused.value.fields


@pytest.mark.parametrize(
    "seed", ["ftp://example.com/", "http://" + "a" * 300 + ".test/", "http://example.com:99999/"]
)
def test_seeds_no_server_could_be_asked_for_are_refused(seed):
    with pytest.raises(jobs.JobError, match="seeds: .* is not an absolute http"):
        jobs.create_job([seed])


def test_the_command_line_names_the_option(redis):
    with pytest.raises(CommandError, match=r"--include: 'a\(' is not a valid regular expression"):
        call_command("crawl", SEED, "--include", "a(", "--workers", "0")
    assert not CrawlJob.objects.exists()


def test_the_command_line_names_the_identity_options(redis):
    with pytest.raises(CommandError, match=r"--proxy: must be a list of http"):
        call_command("crawl", SEED, "--proxy", "gopher://127.0.0.1:70", "--workers", "0")
    with pytest.raises(CommandError, match=r'--header: .* is not "Name: value"'):
        call_command("crawl", SEED, "--header", "no-colon", "--workers", "0")
    assert not CrawlJob.objects.exists()


def test_the_admin_shows_the_problem_on_its_field(admin_client):
    response = admin_client.post(
        "/admin/web/crawljob/add/",
        {"name": "bad", "seeds": f'["{SEED}"]', "allowed_domains": "[]",
         "include_patterns": '["a("]', "exclude_patterns": "[]", "path_caps": "{}",
         "max_depth": 5, "priority": 0, "delay": 0, "host_concurrency": 0, "settings": "{}"},
    )  # fmt: skip
    assert response.status_code == 200
    assert "is not a valid regular expression" in response.content.decode()
    assert not CrawlJob.objects.exists()


def test_a_running_job_whose_configuration_went_bad_fails_and_others_go_on(redis):
    bad, good = jobs.create_job([SEED]), jobs.create_job(["http://127.0.0.1:8/"])
    for job in (bad, good):
        jobs.start(job)
    CrawlJob.objects.filter(pk=bad.pk).update(exclude_patterns=["(unclosed"])  # behind our back
    Scheduler().tick()
    bad.refresh_from_db()
    assert bad.state == JobState.FAILED and "exclude_patterns" in bad.error
    assert FrontierURL.objects.get(job=bad).error_reason == "job_failed"
    assert FrontierURL.objects.get(job=good).state == URLState.SCHEDULED
    assert jobs.counts(good.pk)["scheduled"] == 1
