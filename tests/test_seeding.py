"""Bulk seeding from a file: exact dedup, readable rejections, bounded chunks, safe to repeat."""

from __future__ import annotations

import gzip
import io
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tasks.frontier import jobs, seeding
from web.models import CrawlJob, FrontierURL, JobState, URLState

pytestmark = pytest.mark.django_db(transaction=True)

SEEDS = """\
# a comment, then a blank line

https://a.example/one?b=2&a=1
HTTPS://A.example:443/one?a=1&b=2#frag
https://b.example/two
mailto:someone@example.com
ftp://c.example/file
https://b.example/private/secret
https://c.example/three
"""


def _job(**fields) -> CrawlJob:
    return jobs.create_job(["https://a.example/"], **fields)


def test_seed_adds_each_canonical_url_once_and_says_why_others_were_not(monkeypatch):
    monkeypatch.setenv("CRAWL_SEED_CHUNK", "2")  # several chunks, a duplicate across two
    job = _job(exclude_patterns=["/private/"])
    seen = []
    report = seeding.seed(job, StringIO(SEEDS), progress=lambda r: seen.append(r.read))
    urls = set(FrontierURL.objects.filter(job=job).values_list("url", flat=True))
    assert urls == {
        "https://a.example/one?a=1&b=2",
        "https://b.example/two",
        "https://c.example/three",
    }
    assert (report.read, report.added, report.duplicates) == (7, 3, 1)
    assert report.rejected == {"not_http_url": 2, "excluded": 1}
    assert len(seen) == 4 and seen[-1] == 7
    rows = FrontierURL.objects.filter(job=job)
    assert {(r.state, r.depth, r.host) for r in rows if r.url.startswith("https://c.")} == {
        (URLState.QUEUED, 0, "c.example")
    }


def test_seeding_again_adds_nothing_and_a_gzip_file_reads_the_same(tmp_path):
    job = _job()
    seeding.seed(job, StringIO(SEEDS))
    path = tmp_path / "seeds.txt.gz"
    with gzip.open(path, "wt") as f:
        f.write(SEEDS)
    with seeding.open_seed_file(str(path)) as stream:
        again = seeding.seed(job, stream)
    assert (again.added, again.duplicates) == (0, 5)
    assert FrontierURL.objects.filter(job=job).count() == 4


def test_seed_command_starts_a_draft_job_and_reports(tmp_path):
    job = _job()
    path = tmp_path / "seeds.txt"
    path.write_text(SEEDS)
    out, err = StringIO(), StringIO()
    call_command("seed", str(job.pk), str(path), stdout=out, stderr=err)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    # the seed given at creation joins the file's URLs when the job starts
    assert FrontierURL.objects.filter(job=job, state=URLState.QUEUED).count() == 5
    assert "4 URLs added, 1 already present, 2 rejected (not_http_url 2)" in out.getvalue()
    assert "7 read" in err.getvalue()


def test_seed_command_refuses_what_it_cannot_do(tmp_path):
    with pytest.raises(CommandError, match="no job named '999'"):
        call_command("seed", "999", "-", stdout=io.StringIO())
    job = _job()
    with pytest.raises(CommandError, match="cannot read"):
        call_command("seed", str(job.pk), str(tmp_path / "missing.txt"), stdout=io.StringIO())
    jobs.start(job)
    jobs.cancel(job)
    with pytest.raises(CommandError, match="is cancelled"):
        call_command("seed", str(job.pk), str(tmp_path / "x"), stdout=io.StringIO())
