"""Job specs: ``manage.py apply -f`` and ``manage.py get job``, one validation path with the
CLI and the admin, errors that name the field and the line; static files in every mode."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import jsonschema
import pytest
import yaml
from django.conf import settings
from django.core.management import CommandError, call_command

from web import specs
from web.models import CrawlJob, JobState

pytestmark = pytest.mark.django_db

SPEC = """\
apiVersion: crawlplatform/v1
kind: CrawlJob
metadata:
  name: docs
spec:
  seeds:
    - http://127.0.0.1:9/docs/
  scope:
    max_depth: 3
    exclude_patterns: ["/whatsnew/"]
  politeness:
    delay: 0.5
  content:
    extract:
      - {name: title, selector: h1}
  schedule: "every 6h"
"""


def _apply(tmp_path: Path, text: str, *args: str) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    out = StringIO()
    call_command("apply", "-f", str(path), *args, stdout=out)
    return out.getvalue()


def _get(*args: str) -> str:
    out = StringIO()
    call_command("get", *args, stdout=out)
    return out.getvalue()


def test_apply_get_apply_round_trip_is_a_no_op(tmp_path):
    assert "created" in _apply(tmp_path, SPEC)
    job = CrawlJob.objects.get(name="docs")
    assert job.seeds == ["http://127.0.0.1:9/docs/"] and job.max_depth == 3
    assert job.delay == 0.5 and job.extract == [{"name": "title", "selector": "h1"}]
    assert job.state == JobState.DRAFT and job.obey_robots  # defaults for what it leaves out
    written = _get("job", "docs")
    assert "unchanged" in _apply(tmp_path, written)
    assert "unchanged" in _apply(tmp_path, _get("job", "docs", "-o", "json"))
    assert yaml.safe_load(written) == specs.dump(CrawlJob.objects.get(name="docs"))
    assert CrawlJob.objects.count() == 1


def test_apply_updates_the_named_job_and_starts_it_on_request(tmp_path):
    _apply(tmp_path, SPEC)
    changed = SPEC.replace("delay: 0.5", "delay: 2").replace("max_depth: 3\n", "")
    out = _apply(tmp_path, changed, "--start")
    assert "configured (scope.max_depth, politeness.delay)" in out and "started" in out
    job = CrawlJob.objects.get(name="docs")
    assert job.delay == 2 and job.max_depth == 5 and job.state == JobState.RUNNING
    more = changed.replace(
        "    - http://127.0.0.1:9/docs/\n",
        "    - http://127.0.0.1:9/docs/\n    - http://127.0.0.1:9/blog/\n",
    )
    _apply(tmp_path, more)  # a running job's new seed joins its frontier
    assert job.urls.filter(url="http://127.0.0.1:9/blog/", depth=0).exists()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("max_depth: 3", "max_depth: -1"), "job.yaml:9: spec.scope.max_depth: -1 is less than"),
        (("delay: 0.5", "delay: 0.5\n    pace: 3"), "job.yaml:12: spec.politeness: Additional"),
        (
            ("selector: h1", "selector: 'a['"),
            "job.yaml:15: spec.content.extract: 'title': 'a[' is not a valid CSS selector",
        ),
        (
            ('"/whatsnew/"', '"(unclosed"'),
            "job.yaml:10: spec.scope.exclude_patterns: '(unclosed' is not a valid regular",
        ),
        (('"every 6h"', '"every 5s"'), "job.yaml:16: spec.schedule: 'every 5s': the interval"),
        (("kind: CrawlJob", "kind: Crawl"), "job.yaml:2: kind: 'CrawlJob' was expected"),
        (("  seeds:\n", "  seeds: [\n"), "job.yaml:7: not YAML or JSON"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_field_and_the_line(tmp_path, change, expected):
    with pytest.raises(CommandError) as refused:
        _apply(tmp_path, SPEC.replace(*change))
    assert expected in str(refused.value), str(refused.value)
    assert not CrawlJob.objects.exists()


def test_the_published_schema_is_the_one_in_force():
    published = json.loads((Path(settings.BASE_DIR) / "docs" / "job-spec.schema.json").read_text())
    assert published == specs.schema()  # regenerate: manage.py get schema > docs/...
    jsonschema.Draft202012Validator.check_schema(published)
    jsonschema.validate(yaml.safe_load(SPEC), published)


def test_the_admin_has_its_styles_with_debug_off(client, settings):
    settings.DEBUG = False
    response = client.get("/static/admin/css/base.css")
    assert response.status_code == 200
    assert b"body" in b"".join(response.streaming_content)
    response.close()
    page = client.get("/admin/login/").content.decode()
    assert "/static/admin/css/base.css" in page


def test_apply_gives_the_job_an_owner_and_its_webhook_a_secret(tmp_path, django_user_model):
    alice = django_user_model.objects.create_user("alice")
    hooked = SPEC.replace('schedule: "every 6h"', 'schedule: "every 6h"\n  notifications:\n'
                          "    webhook_url: http://127.0.0.1:9/hook")  # fmt: skip
    assert "created" in _apply(tmp_path, hooked, "--owner", "alice")
    job = CrawlJob.objects.get(name="docs")
    assert job.owner == alice and job.webhook_url == "http://127.0.0.1:9/hook"
    assert len(job.webhook_secret) == 64
    assert "webhook_secret" not in _get("job", "docs")  # a secret stays out of files
    with pytest.raises(CommandError, match="no user 'nobody'"):
        _apply(tmp_path, hooked, "--owner", "nobody")


def test_a_spec_of_nested_aliases_is_refused_before_it_expands():
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
    )  # nine levels of ten: a billion x's once expanded
    with pytest.raises(specs.SpecError, match=r"aliases \(\*a\) are not accepted in a spec"):
        specs.parse(laughs, "laughs.yaml")
