"""The JSON API: jobs through one validation path, actions and their refusals, who sees which
job, cursor pages of pages and URLs, tokens, exports, the schema, and a fuzzer against the
real web process finding no server error."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from io import StringIO

import openapi_spec_validator
import pytest
import requests
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from tasks.frontier import jobs, transitions
from tests.webserver import WebServer
from web.export import Export
from web.models import CrawlJob, FrontierURL, JobState, Page, URLState

JOB = {
    "name": "docs",
    "seeds": ["http://127.0.0.1:9/docs/"],
    "max_depth": 2,
    "extract": [{"name": "title", "selector": "h1"}],
}
# Wrong in ways the model checks (CrawlJob.clean): one message or more for each field.
BAD = {
    "name": "x" * 201,
    "seeds": ["ftp://127.0.0.1/", "http://127.0.0.1:9/"],
    "include_patterns": ["(unclosed"],
    "max_depth": 40000,
    "delay": -1,
    "render": "sometimes",
    "extract": [{"name": "title"}],
    "schedule": "now and then",
    "proxies": ["gopher://127.0.0.1:70/"],
}


# Values the fuzzer below found the model's validation crashing on (a 500) instead of refusing.
MALFORMED = {
    "rule name not a string": {"extract": [{"name": {}, "selector": "h1"}]},
    "pseudo-element selector": {"extract": [{"name": "title", "selector": "h1::before"}]},
    "seed not a string": {"seeds": [{}]},
    "whole number beyond floats": {"settings": {"RETRY_MAX_ATTEMPTS": 10**400}},
    "interval beyond the database": {"schedule": "every 99999999999999999999d"},
}


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob")


def _signed_in(user) -> APIClient:
    api = APIClient()
    api.force_login(user)
    return api


def _create(api: APIClient, **fields) -> dict:
    response = api.post("/api/jobs/", {**JOB, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def _fetched(job: CrawlJob, n: int, status: int = 200, content_type: str = "text/html") -> None:
    """``n`` URLs of ``job`` fetched, each with its page (as a worker would leave them)."""
    urls = [f"http://127.0.0.1:9/{status}/{i}" for i in range(n)]
    transitions.insert_urls(job.pk, urls, depth=1)
    done = FrontierURL.objects.filter(job=job, url__in=urls).order_by("id")
    done.update(state=URLState.DONE, http_status=status)
    Page.objects.bulk_create(
        Page(job=job, url=u, final_url=u.url, status=status, content_type=content_type,
             title=f"title {u.pk}", size=10, elapsed_ms=1, fetched_at=timezone.now(),
             content_hash="0" * 64, data={"title": f"h1 {u.pk}"})
        for u in done
    )  # fmt: skip


def _all(api: APIClient, url: str) -> tuple[list[dict], list[int]]:
    """Every row of a cursor-paginated list, following ``next``, and each page's size."""
    rows, sizes = [], []
    while url:
        response = api.get(url)
        assert response.status_code == 200, response.json()
        rows += response.json()["results"]
        sizes.append(len(response.json()["results"]))
        url = response.json()["next"]
    return rows, sizes


@pytest.mark.django_db
def test_create_read_update_and_delete_a_job(alice, redis):
    api = _signed_in(alice)
    created = api.post("/api/jobs/", JOB, format="json")
    assert created.status_code == 201, created.json()
    job = created.json()
    assert created["Location"] == f"/api/jobs/{job['id']}/"
    assert job["owner"] == "alice" and job["state"] == "draft" and job["run"] == 1
    assert job["seeds"] == JOB["seeds"] and job["extract"] == JOB["extract"]
    assert job["webhook_secret"] == "" and job["obey_robots"] is True  # a default
    assert CrawlJob.objects.get(pk=job["id"]).owner == alice
    url = f"/api/jobs/{job['id']}/"
    assert api.get(url).json() == job
    assert [j["id"] for j in api.get("/api/jobs/").json()["results"]] == [job["id"]]

    hook = "http://127.0.0.1:9/hook"
    patched = api.patch(url, {"max_depth": 4, "webhook_url": hook, "state": "finished"},
                        format="json")  # fmt: skip
    assert patched.status_code == 200, patched.json()
    assert patched.json()["max_depth"] == 4 and patched.json()["webhook_url"] == hook
    assert len(patched.json()["webhook_secret"]) == 64  # made for the new webhook, shown
    assert patched.json()["state"] == "draft"  # progress is read-only
    put = api.put(url, {**JOB, "name": "docs v2", "seeds": ["http://127.0.0.1:9/v2/"]},
                  format="json")  # fmt: skip
    assert put.status_code == 200, put.json()
    stored = CrawlJob.objects.get(pk=job["id"])
    assert stored.name == "docs v2" and stored.seeds == ["http://127.0.0.1:9/v2/"]
    assert stored.max_depth == 2  # PUT sets the whole configuration it is given

    assert api.post(f"{url}start/").status_code == 200
    _fetched(stored, 2)
    assert api.delete(url).status_code == 204  # a running job: cancelled, then deleted
    assert not CrawlJob.objects.filter(pk=job["id"]).exists()
    assert not FrontierURL.objects.filter(job_id=job["id"]).exists()
    assert not Page.objects.filter(job_id=job["id"]).exists()
    assert api.get(url).status_code == 404


@pytest.mark.django_db
def test_a_refused_job_is_a_400_with_the_messages_create_job_gives(alice):
    api = _signed_in(alice)
    response = api.post("/api/jobs/", BAD, format="json")
    assert response.status_code == 400
    with pytest.raises(jobs.JobError) as refused:
        jobs.create_job(BAD["seeds"], **{k: v for k, v in BAD.items() if k != "seeds"})
    assert response.json() == refused.value.fields
    assert set(response.json()) == set(BAD)
    assert not CrawlJob.objects.exists()


@pytest.mark.django_db
def test_a_refused_change_is_a_400_with_the_messages_update_gives_and_changes_nothing(alice):
    api = _signed_in(alice)
    created = _create(api)
    url = f"/api/jobs/{created['id']}/"
    wrong = {"include_patterns": ["(unclosed"], "settings": {"NO_SUCH_SETTING": 1}}
    response = api.patch(url, wrong, format="json")
    assert response.status_code == 400
    with pytest.raises(jobs.JobError) as refused:
        jobs.update(CrawlJob.objects.get(pk=created["id"]), **wrong)
    assert response.json() == refused.value.fields
    assert api.get(url).json() == created


@pytest.mark.django_db
def test_values_of_the_wrong_json_type_or_unstorable_text_are_a_400(alice):
    api = _signed_in(alice)
    url = f"/api/jobs/{_create(api)['id']}/"
    for field, value in [("max_depth", "deep"), ("obey_robots", "maybe"), ("delay", [1]),
                         ("headers", {"X-Nul": "a\x00b"}), ("seeds", ["http://\x00/"]),
                         ("extract", [{"name": "t\ud800", "selector": "h1"}])]:  # fmt: skip
        body = json.dumps({field: value})  # \u0000 and \ud800 escaped, as JSON allows
        response = api.patch(url, body, content_type="application/json")
        assert response.status_code == 400, (field, response.content)
        assert list(response.json()) == [field]
    assert api.post("/api/jobs/", {"name": "no seeds"}, format="json").json() == {
        "seeds": ["give at least one start URL, or a spider"]
    }


@pytest.mark.django_db
@pytest.mark.parametrize("wrong", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_values_are_refused_with_a_message_not_a_server_error(alice, wrong):
    api = _signed_in(alice)
    body = json.dumps({**JOB, **wrong})
    response = api.post("/api/jobs/", body, content_type="application/json")
    assert response.status_code == 400 and list(response.json()) == list(wrong)
    assert not CrawlJob.objects.exists()


@pytest.mark.django_db
def test_actions_move_the_job_and_one_its_state_refuses_is_a_409(alice, redis):
    api = _signed_in(alice)
    job_id = _create(api)["id"]
    url = f"/api/jobs/{job_id}/"

    def act(verb: str, status: int = 200) -> dict:
        response = api.post(f"{url}{verb}/")
        assert response.status_code == status, response.json()
        return response.json()

    assert act("start")["state"] == JobState.RUNNING
    refused = act("start", 409)
    assert refused == {"detail": f"cannot start job #{job_id}: it is running (it must be draft)"}
    assert act("pause")["state"] == JobState.PAUSED
    assert "it is paused" in act("pause", 409)["detail"]
    assert act("resume")["state"] == JobState.RUNNING
    assert "it is running" in act("recrawl", 409)["detail"]
    assert act("cancel")["state"] == JobState.CANCELLED
    assert "it is cancelled" in act("resume", 409)["detail"]
    again = act("recrawl")
    assert (again["state"], again["run"]) == (JobState.RUNNING, 2)
    assert api.post("/api/jobs/999999/start/").status_code == 404


@pytest.mark.django_db
def test_someone_elses_job_is_not_found_and_staff_see_every_job(alice, bob, admin_user, redis):
    theirs = _create(_signed_in(alice))
    url = f"/api/jobs/{theirs['id']}/"
    api = _signed_in(bob)
    mine = _create(api, name="bob's")
    assert [j["id"] for j in api.get("/api/jobs/").json()["results"]] == [mine["id"]]
    assert api.get(url).status_code == 404
    assert api.patch(url, {"max_depth": 9}, format="json").status_code == 404
    assert api.put(url, JOB, format="json").status_code == 404
    for verb in ["start", "pause", "resume", "cancel", "recrawl"]:
        assert api.post(f"{url}{verb}/").status_code == 404
    for part in ["stats/", "pages/", "urls/", "export/?format=jsonl"]:
        response = api.get(url + part)
        assert response.status_code == 404, part
        assert response["Content-Type"] == "application/json"
    assert api.delete(url).status_code == 404
    job = CrawlJob.objects.get(pk=theirs["id"])
    assert (job.state, job.max_depth) == (JobState.DRAFT, 2)

    staff = _signed_in(admin_user)
    everyone = staff.get("/api/jobs/").json()["results"]
    assert {j["id"] for j in everyone} == {theirs["id"], mine["id"]}
    assert staff.get(url).json()["owner"] == "alice"
    assert staff.post(f"{url}cancel/").json()["state"] == JobState.CANCELLED


@pytest.mark.django_db
def test_jobs_pages_and_urls_are_cursor_paginated_and_filtered(alice):
    api = _signed_in(alice)
    created = [_create(api, name=f"job {i}") for i in range(3)]
    job = CrawlJob.objects.get(pk=created[0]["id"])
    _fetched(job, 150)
    _fetched(job, 30, status=404, content_type="text/plain")
    transitions.insert_urls(job.pk, [f"http://127.0.0.1:9/later/{i}" for i in range(70)], depth=2)

    urls, sizes = _all(api, f"/api/jobs/{job.pk}/urls/")
    assert sizes == [100, 100, 50]
    assert [u["id"] for u in urls] == sorted(FrontierURL.objects.values_list("id", flat=True))
    queued, _ = _all(api, f"/api/jobs/{job.pk}/urls/?state=queued&depth=2")
    assert len(queued) == 70 and {u["url"] for u in queued} == {
        f"http://127.0.0.1:9/later/{i}" for i in range(70)
    }
    pages, sizes = _all(api, f"/api/jobs/{job.pk}/pages/")
    assert sizes == [100, 80] and len({p["id"] for p in pages}) == 180
    first = pages[0]
    assert first["url"] == "http://127.0.0.1:9/200/0" and first["status"] == 200
    assert first["data"] == {"title": f"h1 {FrontierURL.objects.get(url=first['url']).pk}"}
    assert first["body_stored"] is False
    missing, _ = _all(api, f"/api/jobs/{job.pk}/pages/?status=404&content_type=text/plain")
    assert len(missing) == 30 and {p["status"] for p in missing} == {404}
    assert api.get(f"/api/jobs/{job.pk}/urls/?state=nonsense").status_code == 400
    # what a hand-made cursor or a NUL would fail as a server error is refused as bad input
    for cursor in ("cD1hYmM%3D", "cD05OTk5OTk5OTk5OTk5OTk5OTk5OTk%3D"):  # p=abc, p=9999...
        assert api.get(f"/api/jobs/{job.pk}/urls/?cursor={cursor}").status_code == 404
    for query in ("urls/?state=%00", "items/?dropped=%00", "pages/?content_type=a%00b"):
        assert api.get(f"/api/jobs/{job.pk}/{query}").status_code == 400

    listed = api.get("/api/jobs/").json()
    assert [j["id"] for j in listed["results"]] == [c["id"] for c in reversed(created)]
    assert api.get(f"/api/jobs/?state={JobState.RUNNING}").json()["results"] == []


@pytest.mark.django_db
def test_stats_count_the_frontier_pages_and_outcomes(alice):
    api = _signed_in(alice)
    job = CrawlJob.objects.get(pk=_create(api)["id"])
    _fetched(job, 5)
    transitions.insert_urls(job.pk, [f"http://127.0.0.1:9/gone/{i}" for i in range(3)], depth=1)
    FrontierURL.objects.filter(url__contains="/gone/").update(
        state=URLState.FAILED, error_reason="http_4xx"
    )
    FrontierURL.objects.filter(url__endswith="/200/0").update(error_reason="not_modified")
    stats = api.get(f"/api/jobs/{job.pk}/stats/").json()
    assert stats["frontier"] == {**dict.fromkeys(URLState.values, 0), "done": 5, "failed": 3}
    assert stats["pages"] == 5 and stats["state"] == "draft" and stats["run"] == 1
    assert stats["outcomes"] == {"http_4xx": 3, "not_modified": 1}
    assert stats["stats"] == {}


@pytest.mark.django_db
def test_a_token_made_by_drf_create_token_signs_requests_in(alice):
    out = StringIO()
    call_command("drf_create_token", "alice", stdout=out)
    token = re.search(r"Generated token (\w+) for user alice", out.getvalue())[1]
    api = APIClient()
    refused = api.get("/api/jobs/")
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == "Token"
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    created = api.post("/api/jobs/", JOB, format="json")
    assert created.status_code == 201 and created.json()["owner"] == "alice"
    assert api.get("/api/jobs/").json()["results"][0]["id"] == created.json()["id"]
    api.credentials(HTTP_AUTHORIZATION=f"Token {token[::-1]}")
    assert api.get("/api/jobs/").status_code == 401


@pytest.mark.django_db
def test_export_streams_the_same_bytes_as_the_admins_export(alice):
    api = _signed_in(alice)
    job = CrawlJob.objects.get(pk=_create(api)["id"])
    _fetched(job, 3)
    response = api.get(f"/api/jobs/{job.pk}/export/?format=jsonl")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "application/jsonl"
    assert response["Content-Disposition"] == f'attachment; filename="job{job.pk}.jsonl"'
    body = b"".join(response.streaming_content)
    assert body == b"".join(Export(job, "jsonl", filename=f"job{job.pk}.jsonl").chunks())
    rows = [json.loads(line) for line in body.splitlines()]
    assert [r["url"] for r in rows] == [f"http://127.0.0.1:9/200/{i}" for i in range(3)]
    assert rows[0]["data"]["title"].startswith("h1 ")

    csv = api.get(f"/api/jobs/{job.pk}/export/?format=csv")
    assert csv["Content-Type"] == "text/csv"
    assert b"".join(csv.streaming_content).startswith(b"url,final_url,status")
    assert api.get(f"/api/jobs/{job.pk}/export/?format=xml").status_code == 404


@pytest.mark.django_db
def test_the_served_schema_is_valid_openapi_and_the_docs_page_is_local(client):
    schema = client.get("/api/schema/?format=json")
    assert schema.status_code == 200
    spec = schema.json()
    openapi_spec_validator.validate(spec)
    assert "/api/jobs/{id}/start/" in spec["paths"] and "/api/jobs/{job_id}/urls/" in spec["paths"]
    export = spec["paths"]["/api/jobs/{job_id}/export/"]["get"]["responses"]["200"]["content"]
    assert set(export) == {"application/jsonl", "text/csv", "application/gzip"}
    seeds = spec["components"]["schemas"]["JobRequest"]["properties"]["seeds"]
    assert seeds["type"] == "array" and seeds["items"] == {"type": "string"}
    docs = client.get("/api/docs/").content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in docs
    assert "cdn." not in docs and "//unpkg" not in docs


def test_fuzzing_the_jobs_api_on_the_real_web_process_finds_no_server_error(
    worker_env, django_user_model, tmp_path
):
    """Schemathesis against gunicorn (DEBUG off) on the test database: every jobs endpoint but
    the actions, so no job ever runs and nothing is fetched (no worker or scheduler runs
    either). Paths name a job of the fuzzer's with URLs and pages (DELETE another one)."""
    fuzzer = django_user_model.objects.create_user("fuzzer")
    out = StringIO()
    call_command("drf_create_token", "fuzzer", stdout=out)
    token = re.search(r"Generated token (\w+)", out.getvalue())[1]
    kept = jobs.create_job(JOB["seeds"], owner=fuzzer, extract=JOB["extract"])
    _fetched(kept, 3)
    doomed = jobs.create_job(JOB["seeds"], owner=fuzzer)
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        f'[parameters]\n"path.id" = {kept.pk}\n"path.job_id" = {kept.pk}\n\n'
        f'[[operations]]\ninclude-method = "DELETE"\nparameters = {{ "path.id" = {doomed.pk} }}\n'
    )
    with WebServer(worker_env, tmp_path / "web.log") as web:
        docs = requests.get(f"{web.url}/api/docs/", timeout=10).text
        asset = re.search(r'"(/static/drf_spectacular_sidecar/[^"]+\.js)"', docs)[1]
        assert requests.get(web.url + asset, timeout=10).status_code == 200
        run = subprocess.run(
            # One worker: Hypothesis reads lambdas' source with ast.parse, which is not
            # thread-safe on Python 3.11 (SystemError: AST constructor recursion depth).
            [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "--no-color",
             "run", f"{web.url}/api/schema/",
             "--checks", "not_a_server_error", "--include-path-regex", "^/api/jobs/",
             "--exclude-path-regex", "/(start|pause|resume|cancel|recrawl)/$",
             "-H", f"Authorization: Token {token}", "--max-examples", "25", "--seed", "1",
             "--generation-database", "none", "--generation-with-security-parameters", "false",
             "--workers", "1", "--request-timeout", "20"],
            cwd=tmp_path, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    (tmp_path / "schemathesis.txt").write_text(run.stdout + run.stderr)
    report = (
        f"{run.stdout[-6000:]}{run.stderr[-2000:]}\n(whole report and server log in {tmp_path})"
    )
    assert run.returncode == 0, report
    assert re.search(r"(\d+) generated, \1 passed", run.stdout), report
    assert not CrawlJob.objects.filter(pk=doomed.pk).exists(), report
    assert CrawlJob.objects.exclude(state=JobState.DRAFT).count() == 0, report
