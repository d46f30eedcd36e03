"""Content: the body store (filesystem and a real S3-compatible server), extraction rules,
robots directives, exports in every format at any time, recrawls with conditional requests,
schedules and job deletion."""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import zstandard
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone
from warcio.archiveiterator import ArchiveIterator

from tasks.content import bodies, extraction
from tasks.frontier import jobs, schedules
from tasks.frontier.scheduler import Scheduler
from tasks.rules import selectors
from tasks.worker.supervisor import WorkerPool
from tests.budgets import LOCAL
from tests.conftest import crawl_to_end, wait_for
from tests.content import ContentSite, digest
from tests.s3server import VENV_BIN, S3Server
from tests.site import Site
from web.models import CrawlJob, FrontierURL, JobState, Page


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-compatible server (moto's server mode) on 127.0.0.1, with a bucket."""
    with S3Server("bodies") as server:
        yield {"endpoint": server.endpoint, "client": server.client}


def _s3_storage(endpoint: str) -> dict:
    return {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {"bucket_name": "bodies", "location": "crawl", "endpoint_url": endpoint,
                    "access_key": "test", "secret_key": "test", "region_name": "us-east-1",
                    "file_overwrite": True, "default_acl": None, "querystring_auth": False},
    }  # fmt: skip


def _blobs(job_id: int) -> list[str]:
    root = Path(settings.STORAGES["bodies"]["OPTIONS"]["location"]) / str(job_id)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _samples() -> list[bytes]:
    noise = random.Random(7).randbytes(300_000)  # incompressible
    return [b"", b"<html>caf\xc3\xa9</html>", noise, gzip.compress(b"x" * 10_000, mtime=0)]


def test_bodies_round_trip_byte_exact_on_the_filesystem_and_identical_ones_stored_once():
    job_id = 987_001
    bodies.delete_job(job_id)
    names = [bodies.put(job_id, raw) for raw in _samples()]
    assert [bodies.get(n) for n in names] == _samples()
    assert bodies.put(job_id, _samples()[2]) == names[2]  # the same bytes again: stored once
    files = _blobs(job_id)  # one thread, one job: one pack, no temporary file
    assert len(files) == 1 and files[0].startswith("packs/") and files[0].endswith(".zpk")
    assert {bodies.file_of(n) for n in names} == {f"{job_id}/{files[0]}"}
    assert bodies.delete_job(job_id) == 1
    assert not (Path(settings.STORAGES["bodies"]["OPTIONS"]["location"]) / str(job_id)).exists()
    again = bodies.put(job_id, _samples()[2])  # its pack is gone: stored anew
    assert again != names[2] and bodies.get(again) == _samples()[2]
    bodies.delete_job(job_id)


def test_bodies_of_threads_go_to_packs_of_their_own_and_read_back_across_pack_ends(monkeypatch):
    job_id = 987_003
    bodies.delete_job(job_id)
    monkeypatch.setattr(bodies, "PACK_MAX_BYTES", 20_000)  # a pack ends every few bodies
    noise = random.Random(3)
    written: dict[str, bytes] = {}

    def store(n: int) -> None:
        for _ in range(n):
            raw = noise.randbytes(noise.randrange(1, 9_000))
            written[bodies.put(job_id, raw)] = raw

    threads = [threading.Thread(target=store, args=(40,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(written) == 160 and all(bodies.get(n) == raw for n, raw in written.items())
    packs = {bodies.file_of(n) for n in written}
    assert len(packs) > 4 and len(_blobs(job_id)) == len(packs)
    assert bodies.delete_job(job_id) == len(packs)


def test_a_pack_deleted_under_a_thread_is_left_and_a_wrong_place_is_an_error():
    job_id = 987_005
    bodies.delete_job(job_id)
    first = bodies.put(job_id, b"<html>one</html>")
    Path(bodies.storage().path(bodies.file_of(first))).unlink()  # as another process's delete
    second = bodies.put(job_id, b"<html>two</html>")  # a new pack, not the deleted file
    assert bodies.file_of(second) != bodies.file_of(first)
    assert bodies.get(second) == b"<html>two</html>"
    pack, _, place = second.rpartition("@")
    offset, length = map(int, place.split("+"))
    for wrong in (f"{pack}@{offset}+{length - 1}", f"{pack}@{offset + 1}+{length - 1}",
                  f"{pack}@{offset}+{length + 5}"):  # fmt: skip
        with pytest.raises(ValueError, match="not one whole zstd frame"):
            bodies.get(wrong)
    other = bodies.put(job_id + 1, b"<html>three</html>")  # this thread's pack of another job
    Path(bodies.storage().path(bodies.file_of(second))).unlink()
    bodies.put(job_id + 1, b"<html>four</html>")  # closes the deleted pack: its space is freed
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
            held.append(os.readlink(f"/proc/self/fd/{fd}"))
    assert not [p for p in held if bodies.file_of(second) in p]
    assert [p for p in held if bodies.file_of(other) in p]
    bodies.delete_job(job_id)
    bodies.delete_job(job_id + 1)


def test_a_forked_process_begins_packs_of_its_own():
    """A worker forked from a process that stored bodies never appends to its parent's pack:
    both would name the same places."""
    job_id = 987_006
    bodies.delete_job(job_id)
    mine = bodies.put(job_id, b"<html>parent</html>")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one body, its name to the parent, out without clean-up
        try:
            os.write(write, bodies.put(job_id, b"<html>child</html>").encode())
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    theirs = os.read(read, 1000).decode()
    os.close(read)
    os.close(write)
    after = bodies.put(job_id, b"<html>parent again</html>")
    assert bodies.file_of(theirs) != bodies.file_of(mine) == bodies.file_of(after)
    assert bodies.get(mine) == b"<html>parent</html>"
    assert bodies.get(theirs) == b"<html>child</html>"
    assert bodies.get(after) == b"<html>parent again</html>"
    bodies.delete_job(job_id)


def test_the_bodystore_check_passes_twice_in_one_process():
    for _ in range(2):
        out = io.StringIO()
        call_command("bodystore", stdout=out)
        assert "writable" in out.getvalue()


def test_a_body_stored_as_a_file_of_its_own_reads_back():
    """Bodies an earlier version stored, a file each (``<job>/<aa>/<sha>.zst``), are read as
    they are."""
    job_id = 987_004
    raw = b"<html>kept before packs</html>"
    name = bodies.name_for(job_id, raw)
    path = Path(settings.STORAGES["bodies"]["OPTIONS"]["location"]) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(zstandard.ZstdCompressor().compress(raw))
    assert bodies.get(name) == raw
    assert bodies.delete_job(job_id) == 1


def test_bodies_round_trip_byte_exact_on_an_s3_compatible_server(s3_server, settings):
    settings.STORAGES = {**settings.STORAGES, "bodies": _s3_storage(s3_server["endpoint"])}
    job_id = 987_002
    names = [bodies.put(job_id, raw) for raw in _samples()]
    names.append(bodies.put(job_id, _samples()[1]))
    assert [bodies.get(n) for n in names] == [*_samples(), _samples()[1]]
    listed = s3_server["client"].list_objects_v2(Bucket="bodies", Prefix=f"crawl/{job_id}/")
    assert len(listed["Contents"]) == len(_samples())  # identical bodies: one object
    assert bodies.delete_job(job_id) == len(_samples())
    listed = s3_server["client"].list_objects_v2(Bucket="bodies", Prefix=f"crawl/{job_id}/")
    assert listed["KeyCount"] == 0


def test_extraction_rules_are_parsed_validated_and_applied():
    rule = selectors.parse_rule
    assert rule("title=h1") == {"name": "title", "selector": "h1", "attr": "", "all": False,
                                "pattern": ""}  # fmt: skip
    assert rule("links=a[]@href")["all"] and rule("links=a[]@href")["attr"] == "href"
    assert rule("links=a@href[]") == rule("links=a[]@href")
    assert rule('x=a[href$="@b"]')["selector"] == 'a[href$="@b"]'  # @ inside CSS stays CSS
    assert rule("n=input[name=q]@value")["selector"] == "input[name=q]"
    with pytest.raises(ValueError, match="NAME=SELECTOR"):
        rule("no-selector")
    (problem,) = selectors.problems([rule("bad=a[")])
    assert "'bad'" in problem and "not a valid CSS selector" in problem
    assert selectors.problems([rule("a=h1"), rule("a=h2")]) == ["'a' is given twice"]
    html = ('<h1> Big \n title </h1><a href="/x" class="k j">1</a><a href="/y">2</a>'
            '<meta name="d" content="desc">')  # fmt: skip
    rules = selectors.rules_of([rule("t=h1"), rule("links=a[]@href"), rule("cls=a@class"),
                                 rule("none=h2"), rule("all_none=h3[]"),
                                 rule("d=meta[name=d]@content")])  # fmt: skip
    assert extraction.extract(rules, html) == {
        "t": "Big title", "links": ["/x", "/y"], "cls": "k j", "none": None, "all_none": [],
        "d": "desc",
    }  # fmt: skip
    only = selectors.rules_of([rule("t=h1", pattern=r"/a/\d+$")])
    assert selectors.applies(only, "http://h/a/1") and not selectors.applies(only, "http://h/")


MESSY = """<html><head><title>T</title><script>var head;</script></head><body>
<div id="a" class="  x   y ">Hello <!-- note --> <b>bold</b><br>one&amp;two<script>var y;</script>
<style>.q{}</style><template>tpl</template><noscript>nos</noscript> end</div>
<p>one</p><p>two <span>three</span></p><a href="/x" rel="nofollow  me">l</a>
<script src="/app.js">var s;</script></body></html>"""


def test_rules_run_on_the_parse_tree_with_the_same_results_and_no_second_parse():
    """A fresh process: parse a page as the hot path does, apply rules lexbor takes; the
    results are the ones beautifulsoup4 gave, and beautifulsoup4 is never imported."""
    program = f"""
import json, sys
from tasks.content import extraction, parsing
from tasks.rules import selectors
parsed = parsing.parse_html({MESSY.encode()!r}, "text/html; charset=utf-8", "http://h/")
rules = selectors.rules_of([selectors.parse_rule(r) for r in (
    "div=div#a", "cls=div@class", "rel=a@rel", "ps=p[]", "body=body", "script=script[src]",
    "srcs=script[]@src", "missing=h9", "has=p:has(span)[]", "nth=p:nth-of-type(2)")])
print(json.dumps(extraction.extract(rules, parsed.text, parsed.tree)))
print("bs4" in sys.modules)
"""
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent, check=True)  # fmt: skip
    data, soup_built = ran.stdout.splitlines()
    assert json.loads(data) == {
        "div": "Hello bold one&two nos end",  # no script, style or template text inside
        "cls": "x y", "rel": "nofollow me", "ps": ["one", "two three"],
        "body": "Hello bold one&two nos end one two three l",
        "script": "var s;",  # a script's own text is its text
        "srcs": ["/app.js"], "missing": None, "has": ["two three"], "nth": "two three",
    }  # fmt: skip
    assert soup_built == "False"


def test_a_selector_only_soupsieve_takes_runs_on_a_soup_of_that_page():
    rule = selectors.parse_rule
    assert not selectors.on_lexbor("p:-soup-contains('two')")
    rules = selectors.rules_of([rule("two=p:-soup-contains('two')"), rule("first=p"),
                                rule("lang=p:lang(en)[]")])  # fmt: skip
    assert selectors.problems([r.as_dict() for r in rules]) == []
    assert extraction.extract(rules, MESSY) == {"two": "two three", "first": "one", "lang": []}


@pytest.mark.django_db
def test_a_job_with_a_bad_selector_or_schedule_is_refused_naming_the_field():
    with pytest.raises(jobs.JobError) as refused:
        jobs.create_job(["http://127.0.0.1:9/"], extract=[selectors.parse_rule("x=div >")],
                        schedule="every 5s")  # fmt: skip
    assert set(refused.value.fields) == {"extract", "schedule"}
    assert "at least a minute" in refused.value.fields["schedule"][0]
    assert not CrawlJob.objects.exists()


def _crawl(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "crawl", *args], cwd=settings.BASE_DIR, env=env,
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_crawl_command_extracts_fields_into_every_html_row_and_keeps_raw_bodies(
    worker_env, tmp_path
):
    out = tmp_path / "out.jsonl"
    with ContentSite() as site:
        done = _crawl(worker_env, site.url("/"), "--extract", "title=h1", "--extract",
                      "links=a[]@href", "--output", str(out), "--concurrency", "4",
                      "--workers", "2")  # fmt: skip
        assert done.returncode == 0, done.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        html_rows = [r for r in rows if r["content_type"] == "text/html"]
        assert len(html_rows) >= site.articles + 5
        for row in html_rows:
            assert set(row["data"]) == {"title", "links"}, row
        article = next(r for r in rows if r["url"] == site.url("/a/4"))
        assert article["data"] == {"title": "Article 4", "links": ["/a/5", "/"]}
        home = next(r for r in rows if r["url"] == site.url("/"))
        assert home["data"]["title"] == "Home" and len(home["data"]["links"]) > site.articles
        job = CrawlJob.objects.get()
        # Raw bodies, as sent: gzip-encoded articles stay encoded; the same bytes once.
        for i in (0, 3, 4):
            page = Page.objects.get(job=job, url__url=site.url(f"/a/{i}"))
            assert bodies.get(page.body_key) == site.answer(f"/a/{i}")[1]
            assert page.content_hash == digest(site.article(i))
            assert dict(page.http["response"])["ETag"] == f'"{i}-1"'
        dups = Page.objects.filter(job=job, url__url__contains="/dup/").select_related("url")
        assert dups.count() == 2
        for page in dups:  # the same bytes, stored once per worker process: each reads back
            assert bodies.get(page.body_key) == site.answer(urlsplit(page.url.url).path)[1]
        stored = set(Page.objects.filter(job=job).values_list("body_key", flat=True))
        assert {f"{job.pk}/{f}" for f in _blobs(job.pk)} == {bodies.file_of(k) for k in stored}

        refused = _crawl(worker_env, site.url("/"), "--extract", "bad=a[href")
        assert refused.returncode != 0 and "--extract" in refused.stderr
        assert "not a valid CSS selector" in refused.stderr
        assert CrawlJob.objects.count() == 1  # the bad one never started


@pytest.mark.django_db(transaction=True)
def test_robots_directives_and_rel_nofollow(worker_env, tmp_path):
    with ContentSite(articles=2) as site:
        job, _ = crawl_to_end(site.url("/"), tmp_path, {}, obey_nofollow=True)
    urls = dict(FrontierURL.objects.filter(job=job).values_list("url", "error_reason"))
    pages = set(Page.objects.filter(job=job).values_list("url__url", flat=True))
    assert urls[site.url("/noindex")] == "noindex" and site.url("/noindex") not in pages
    assert urls[site.url("/header-noindex")] == "noindex"
    assert site.url("/behind-noindex") in pages  # noindex alone still follows links
    assert site.url("/nofollow") in pages and site.url("/never/1") not in urls
    assert site.url("/header-other-bot") in pages  # scoped to another crawler
    assert site.url("/sponsored") not in urls  # rel=nofollow, obeyed by this job


def _warc(path: Path) -> list:
    with path.open("rb") as stream:
        return [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"),
                 r.rec_headers.get_header("WARC-Profile"))
                for r in ArchiveIterator(stream)]  # fmt: skip


@contextmanager
def _fleet(worker_env: dict, logs: Path, processes: int, concurrency: int) -> Iterator[None]:
    """Real worker processes and a scheduler thread while the block runs."""
    pool = WorkerPool(processes, concurrency, env={**LOCAL, **worker_env}, log_dir=logs)
    sched = Scheduler()
    thread = threading.Thread(target=sched.run, daemon=True)
    pool.start()
    thread.start()
    try:
        yield
    finally:
        sched.shutdown()
        thread.join(10)
        pool.stop(grace=15)


def _wait_finished(job: CrawlJob) -> None:
    def finished() -> bool:
        return CrawlJob.objects.get(pk=job.pk).state == JobState.FINISHED

    wait_for(finished, 120, "the job to finish")


def _check_warc(path: Path) -> None:
    checked = subprocess.run([str(VENV_BIN / "warcio"), "check", "-v", str(path)],
                             capture_output=True, text=True)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _export(job: CrawlJob, target: Path, fmt: str | None = None) -> None:
    args = ["--format", fmt] if fmt else []
    call_command("export", str(job.pk), "--output", str(target), *args, stderr=io.StringIO())


@pytest.mark.django_db(transaction=True)
def test_export_in_every_format_while_the_job_runs_and_after_it_ended(worker_env, tmp_path):
    rules = [selectors.parse_rule("title=h1"), selectors.parse_rule("links=a[]@href")]
    with Site(pages=120, delay=0.05) as site, _fleet(worker_env, tmp_path / "logs", 1, 2):
        job = jobs.create_job([site.url("/p/0")], max_depth=100, extract=rules)
        jobs.start(job)
        wait_for(lambda: Page.objects.filter(job=job).count() >= 20, 60, "20 pages")
        for fmt in ("jsonl", "csv", "warc"):
            _export(job, tmp_path / f"running.{fmt}.gz")
        job.refresh_from_db()
        assert job.state == JobState.RUNNING  # exported while it ran
        _wait_finished(job)
    running = gzip.decompress((tmp_path / "running.jsonl.gz").read_bytes()).decode()
    assert 20 <= len(running.splitlines()) < len(site.expected_done())
    _check_warc(tmp_path / "running.warc.gz")

    for fmt in ("jsonl", "csv", "warc"):
        _export(job, tmp_path / f"out.{fmt}")
    ended = FrontierURL.objects.filter(job=job, state__in=["done", "failed"]).count()
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == ended and len({r["url"] for r in rows}) == ended
    page_row = next(r for r in rows if r["url"] == site.url("/p/7"))
    assert page_row["data"]["title"] == "Page 7" and "/p/8" in page_row["data"]["links"]
    table = list(csv.DictReader((tmp_path / "out.csv").open()))
    assert len(table) == ended and {"data.title", "data.links"} <= set(table[0])
    cell = next(r for r in table if r["url"] == site.url("/p/7"))
    assert cell["data.title"] == "Page 7" and "/p/8" in json.loads(cell["data.links"])

    _check_warc(tmp_path / "out.warc")
    records = _warc(tmp_path / "out.warc")
    assert records[0][0] == "warcinfo"
    responses = [uri for kind, uri, _ in records if kind == "response"]
    stored = Page.objects.filter(job=job).exclude(body_key="")
    assert sorted(responses) == sorted(stored.values_list("final_url", flat=True))
    assert sum(1 for kind, _, _ in records if kind == "request") == len(responses)


def _run_again(job: CrawlJob, tmp_path: Path, worker_env: dict) -> CrawlJob:
    """Recrawl ``job`` with real workers and a scheduler, to its end."""
    with _fleet(worker_env, tmp_path / "logs2", 2, 4):
        assert jobs.recrawl(job)
        _wait_finished(job)
    job.refresh_from_db()
    return job


@pytest.mark.django_db(transaction=True)
def test_recrawl_downloads_only_changed_pages_and_counts_changes(worker_env, tmp_path):
    with ContentSite(articles=12) as site:
        job, _ = crawl_to_end(site.url("/"), tmp_path, {})
        first = dict(Page.objects.filter(job=job).values_list("url__url", "body_key"))
        assert site.url("/a/1") in first and not sum(site.conditional.values())
        site.change(1)
        site.change(2)
        site.remove(4)
        site.articles += 1  # /a/12, linked from the home page only
        site.version[12] = 1
        site.full.clear()
        site.not_modified.clear()
        job = _run_again(job, tmp_path, worker_env)
    assert job.run == 2 and job.stats["run"] == 2
    articles = [f"/a/{i}" for i in range(12)]
    for path in articles:
        expected = 1 if path in ("/a/1", "/a/2", "/a/4") else 0
        assert site.full[path] == expected, (path, site.full[path], site.not_modified[path])
        assert site.not_modified[path] == 1 - expected, path
    change = jobs.changes(job)
    before = len(first)
    assert change["new"] == 1  # /a/12
    assert change["changed"] == 3  # /a/1, /a/2 and the home page (a new link)
    assert change["gone"] == 1  # /a/4 answers 404 now
    assert change["unchanged"] == before - 3 - 1
    assert {k: job.stats[k] for k in change} == change
    unchanged = FrontierURL.objects.get(job=job, url=site.url("/a/5"))
    assert unchanged.error_reason == "not_modified" and unchanged.http_status == 304
    page = Page.objects.get(url=unchanged)
    assert page.run == 2 and page.modified_run == 1 and page.body_key == first[unchanged.url]
    changed = Page.objects.get(job=job, url__url=site.url("/a/1"))
    assert changed.modified_run == 2 and changed.body_key != first[site.url("/a/1")]
    assert b"version 2" in bodies.get(changed.body_key)

    _export(job, tmp_path / "again.warc.gz")
    _check_warc(tmp_path / "again.warc.gz")
    revisits = [r for r in _warc(tmp_path / "again.warc.gz") if r[0] == "revisit"]
    assert len(revisits) == sum(site.not_modified.values())
    assert all(profile.endswith("/server-not-modified") for _, _, profile in revisits)
    _export(job, tmp_path / "again.jsonl")
    lines = (tmp_path / "again.jsonl").read_text().splitlines()
    rows = {row["url"]: row for row in map(json.loads, lines)}
    gone = rows[site.url("/a/4")]  # its page of the first run is not this run's result
    assert gone["status"] == 404 and gone["error"].startswith("http_4xx")
    assert gone["title"] is None and gone["data"] == {}
    assert rows[site.url("/a/5")]["title"] == "Article 5"  # unchanged: the stored page


@pytest.mark.django_db(transaction=True)
def test_schedules_become_beat_tasks_and_a_due_recrawl_starts_the_next_run():
    from django_celery_beat.models import PeriodicTask

    from tasks.tasks import recrawl_job

    job = jobs.create_job(["http://127.0.0.1:9/"], schedule="every 6h")
    task = PeriodicTask.objects.get(name=schedules.task_name(job.pk))
    assert task.interval.every == 6 * 3600 and task.task == "tasks.recrawl_job"
    assert json.loads(task.args) == [job.pk]
    job.schedule = "30 3 * * 1"
    schedules.sync(job)
    task.refresh_from_db()
    assert task.crontab.minute == "30" and task.crontab.day_of_week == "1"
    assert task.interval is None
    jobs.start(job)
    recrawl_job(job.pk)  # still running: left alone
    assert CrawlJob.objects.get(pk=job.pk).run == 1
    job.transition(JobState.FINISHED)
    recrawl_job(job.pk)
    job.refresh_from_db()
    assert job.run == 2 and job.state == JobState.RUNNING
    assert FrontierURL.objects.get(job=job).state == "queued"
    job.schedule = ""
    schedules.sync(job)
    assert not PeriodicTask.objects.filter(name=schedules.task_name(job.pk)).exists()


@pytest.mark.django_db(transaction=True)
def test_deleting_a_job_removes_its_rows_and_bodies_in_batches(worker_env, tmp_path, monkeypatch):
    with ContentSite(articles=6) as site:
        job, _ = crawl_to_end(site.url("/"), tmp_path, {})
        other, _ = crawl_to_end(site.url("/"), tmp_path, {})
    assert _blobs(job.pk) and Page.objects.filter(job=job).count() > 5
    monkeypatch.setenv("CRAWL_JOB_DELETE_BATCH", "2")
    deleted = jobs.delete(job.pk)
    assert deleted > 0 and not _blobs(job.pk)
    assert not CrawlJob.objects.filter(pk=job.pk).exists()
    assert not FrontierURL.objects.filter(job_id=job.pk).exists()
    assert not Page.objects.filter(job_id=job.pk).exists()
    for key in Page.objects.filter(job=other).values_list("body_key", flat=True):
        assert bodies.get(key)  # another job's bodies stay


@pytest.mark.django_db(transaction=True)
def test_bodies_go_to_s3_from_worker_processes(s3_server, worker_env, tmp_path, settings):
    settings.STORAGES = {**settings.STORAGES, "bodies": _s3_storage(s3_server["endpoint"])}
    env = {"BODY_STORE": "s3://bodies/crawl", "AWS_S3_ENDPOINT_URL": s3_server["endpoint"],
           "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}  # fmt: skip
    with ContentSite(articles=4) as site:
        job, _ = crawl_to_end(site.url("/"), tmp_path, env)
        for page in Page.objects.filter(job=job, url__url__contains="/a/"):
            path = page.url.url.removeprefix(site.base)
            assert bodies.get(page.body_key) == site.answer(path)[1]
    listed = s3_server["client"].list_objects_v2(Bucket="bodies", Prefix=f"crawl/{job.pk}/")
    assert listed["KeyCount"] == len(set(Page.objects.filter(job=job)
                                         .values_list("body_key", flat=True)))  # fmt: skip


@pytest.mark.django_db
def test_admin_exports_shows_stored_bodies_with_rules_tried_and_deletes_in_batches(admin_client):
    rules = [selectors.parse_rule("title=h1"), selectors.parse_rule("links=a[]@href")]
    job = jobs.create_job(["http://127.0.0.1:9/"], extract=rules)
    jobs.start(job)
    url = FrontierURL.objects.get(job=job)
    FrontierURL.objects.filter(pk=url.pk).update(state="done")
    raw = gzip.compress(b'<html><h1>Stored</h1><a href="/x">x</a></html>', mtime=0)
    page = Page.objects.create(
        job=job, url=url, final_url=url.url, status=200, size=46, elapsed_ms=1,
        fetched_at=timezone.now(), content_hash="0" * 64, content_type="text/html",
        data={"title": "Stored", "links": ["/x"]}, body_key=bodies.put(job.pk, raw),
        http={"protocol": "HTTP/1.1", "reason": "OK", "request": [], "ip": "127.0.0.1",
              "response": [["Content-Encoding", "gzip"], ["Content-Type", "text/html"]]},
    )  # fmt: skip
    shown = admin_client.get(f"/admin/web/page/{page.pk}/change/").content.decode()
    assert "&lt;h1&gt;Stored&lt;/h1&gt;" in shown  # the decoded body, escaped
    assert "<b>title</b>: Stored" in shown and "[&#x27;/x&#x27;]" in shown

    for fmt in ("jsonl", "csv", "warc"):
        chosen = {"action": f"export_{fmt}", "_selected_action": [job.pk]}
        response = admin_client.post("/admin/web/crawljob/", chosen)
        assert response.status_code == 200 and response.streaming, fmt
        content = b"".join(response.streaming_content)
        if fmt == "jsonl":
            assert json.loads(content)["data"] == {"title": "Stored", "links": ["/x"]}
        if fmt == "warc":
            records = list(ArchiveIterator(io.BytesIO(content)))
            assert [r.rec_type for r in records] == ["warcinfo", "response", "request"]
            assert records[1].rec_headers.get_header("WARC-IP-Address") == "127.0.0.1"

    chosen = {"action": "delete_selected", "_selected_action": [job.pk]}
    confirm = admin_client.post("/admin/web/crawljob/", chosen)
    assert "1 URLs, 1 pages and their stored bodies" in confirm.content.decode()
    admin_client.post("/admin/web/crawljob/", {"action": "delete_selected", "post": "yes",
                                               "_selected_action": [job.pk]})  # fmt: skip
    assert not CrawlJob.objects.filter(pk=job.pk).exists() and not _blobs(job.pk)


@pytest.mark.django_db(transaction=True)
def test_crawl_recrawl_and_export_to_stdout(worker_env, tmp_path, capsysbinary):
    with ContentSite(articles=6) as site:
        first = _crawl(worker_env, site.url("/"), "--concurrency", "4")
        assert first.returncode == 0, first.stderr
        job = CrawlJob.objects.get()
        site.change(2)
        again = _crawl(worker_env, "--recrawl", str(job.pk), "--concurrency", "4",
                       "--output", str(tmp_path / "again.warc.gz"))  # fmt: skip
        assert again.returncode == 0, again.stderr
        refused = _crawl(worker_env, "--recrawl", "999999")
    assert "run 2: 0 new, 1 changed," in again.stdout and ", 0 gone" in again.stdout
    assert site.not_modified["/a/1"] == 1 and site.full["/a/2"] == 2
    _check_warc(tmp_path / "again.warc.gz")
    assert refused.returncode != 0 and "no job named '999999'" in refused.stderr
    call_command("export", str(job.pk), "--output", "-", "--format", "jsonl",
                 stderr=io.StringIO())  # fmt: skip
    rows = [json.loads(line) for line in capsysbinary.readouterr().out.splitlines()]
    assert {r["url"] for r in rows} >= {site.url(f"/a/{i}") for i in range(6)}
