"""``manage.py crawl`` as a user runs it: a subprocess with its own workers and scheduler."""

from __future__ import annotations

import gzip
import json
import os
import signal
import sqlite3
import subprocess
import sys
from io import StringIO

import psutil
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db.migrations.recorder import MigrationRecorder

from tasks.frontier import jobs
from tests.conftest import wait_for
from tests.site import Site
from web.management.crawling import migrated
from web.models import Checkpoint, CrawlJob, JobState, Page

pytestmark = pytest.mark.django_db(transaction=True)


def test_crawl_command_writes_every_result_and_exits_zero(worker_env, tmp_path, crawl_command):
    out = tmp_path / "out.jsonl"
    with Site(pages=60) as site:
        proc = crawl_command(
            worker_env,
            site.url("/p/0"),
            "--max-depth",
            "100",
            "--concurrency",
            "4",
            "--output",
            str(out),
            "--name",
            "cli",
        )
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    by_url = {r["url"]: r for r in rows}
    assert set(by_url) == site.expected_done() | site.expected_failed()
    assert len(rows) == len(by_url)
    page = by_url[site.url("/p/3")]
    assert page["status"] == 200 and page["title"] == "Page 3" and page["error"] is None
    assert page["final_url"] == page["url"] and page["content_type"] == "text/html"
    assert {"depth", "size", "fetched_at"} <= set(page)
    missing = by_url[site.url("/missing/0")]
    assert missing["status"] == 404 and missing["error"].startswith("http_4xx")
    assert "finished" in stdout and "wrote" in stdout
    assert "(threads, forked)" in stderr  # its workers were forks of the command
    assert CrawlJob.objects.get(name="cli").state == JobState.FINISHED


def test_ctrl_c_pauses_and_resume_finishes(worker_env, tmp_path, crawl_command):
    out = tmp_path / "out.csv"
    early = tmp_path / "early.jsonl"
    with Site(pages=120, delay=0.1) as site:
        proc = crawl_command(worker_env, site.url("/p/0"), "--max-depth", "200", "--concurrency",
                             "4", "-o", str(early))  # fmt: skip
        job = wait_for(lambda: CrawlJob.objects.first(), 30, "the job to be created")
        wait_for(lambda: Page.objects.filter(job=job).count() >= 20, 60, "pages to be fetched")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=90)
        assert proc.returncode == 130, stderr
        job.refresh_from_db()
        assert job.state == JobState.PAUSED
        assert Checkpoint.objects.filter(job=job, reason="pause").exists()
        assert f"crawl --resume {job.pk}" in stderr and f"export {job.pk} -o" in stderr
        paused_at = Page.objects.filter(job=job).count()
        assert paused_at < len(site.expected_done())
        # What was done before Ctrl-C is in the output it asked for.
        written = [json.loads(line) for line in early.read_text().splitlines()]
        assert paused_at <= len(written) and f"to {early}" in stderr
        assert {r["url"] for r in written if r["status"] == 200} == set(
            Page.objects.filter(job=job, status=200).values_list("url__url", flat=True))

        proc = crawl_command(worker_env, "--resume", str(job.pk), "--output", str(out))
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    job.refresh_from_db()
    assert job.state == JobState.FINISHED
    stored = list(Page.objects.filter(job=job).values_list("url__url", flat=True))
    assert sorted(stored) == sorted(site.expected_done())
    lines = out.read_text().splitlines()
    assert lines[0].startswith("url,final_url,status")
    assert len(lines) == 1 + len(site.expected_done() | site.expected_failed())


def test_sigterm_pauses_the_job_and_stops_its_workers(worker_env, crawl_command):
    with Site(pages=200, delay=0.1) as site:
        proc = crawl_command(worker_env, site.url("/p/0"), "--max-depth", "200", "--concurrency",
                             "4")  # fmt: skip
        job = wait_for(lambda: CrawlJob.objects.first(), 30, "the job to be created")
        wait_for(lambda: Page.objects.filter(job=job).count() >= 5, 60, "pages to be fetched")
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert any(_is_worker(w) for w in workers)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 130, stderr
    job.refresh_from_db()
    assert job.state == JobState.PAUSED
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, [w.cmdline() for w in alive]


def test_job_command_pauses_resumes_cancels_and_reports():
    job = jobs.create_job(["http://127.0.0.1:9/"], name="ctl")
    jobs.start(job)

    def run(*args: str) -> str:
        out = StringIO()
        call_command("job", *args, str(job.pk), stdout=out)
        return out.getvalue()

    assert "running -> paused" in run("pause")
    assert "nothing to pause" in run("pause")
    status = run("status")
    assert "ctl): paused" in status and "checkpoint v1 (pause" in status and "queued 1" in status
    assert "paused -> running" in run("resume")
    assert "running -> cancelled" in run("cancel")
    assert CrawlJob.objects.get(pk=job.pk).state == JobState.CANCELLED


def _is_worker(process: psutil.Process) -> bool:
    """A crawl worker: started (``celery ... worker``) or forked (named ``crawl-worker1``)."""
    return "worker" in process.name() or "worker" in " ".join(process.cmdline())


def test_sigkill_of_the_crawl_command_leaves_no_process_behind(
    worker_env, tmp_path, crawl_command
):
    # On the embedded defaults too: its private redis-server must go as well.
    env = {k: v for k, v in worker_env.items() if k not in ("REDIS_URL",)}
    env["CRAWL_DATA_DIR"] = str(tmp_path / "data")
    with Site(pages=200, delay=0.1) as site:
        proc = crawl_command(env, site.url("/p/0"), "--max-depth", "200", "--concurrency", "4",
                             "--name", "killed")  # fmt: skip
        wait_for(lambda: Page.objects.filter(job__name="killed").count() >= 5, 60,
                 "pages to be fetched")  # fmt: skip
        children = psutil.Process(proc.pid).children(recursive=True)
        assert any(_is_worker(c) for c in children)
        assert any("redis-server" in " ".join(c.cmdline()) for c in children)
        proc.kill()
        proc.wait()
        gone, alive = psutil.wait_procs(children, timeout=60)
    assert not alive, [c.cmdline() for c in alive]


def test_migrated_tells_a_database_with_a_migration_left_to_apply():
    """The crawl command runs ``migrate`` only when a migration on disk is not applied."""
    assert migrated()  # the test database is migrated
    recorded = MigrationRecorder.Migration.objects.filter(app="web").order_by("-id").first()
    recorded.delete()
    try:
        assert not migrated()
    finally:
        MigrationRecorder.Migration.objects.create(app="web", name=recorded.name)


def _schema(path) -> dict:
    """A SQLite database's tables (columns, indexes with their SQL, foreign keys), its
    recorded migrations and its permissions: what ``migrate`` leaves, column order aside."""
    db = sqlite3.connect(path)
    found = {}
    tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                        "'sqlite_%'").fetchall()  # fmt: skip
    for (table,) in tables:
        indexes = [
            (ix[1] if not ix[1].startswith("sqlite_autoindex") else "", ix[2], ix[3], ix[4],
             [c[2] for c in db.execute(f"PRAGMA index_xinfo('{ix[1]}')") if c[5]],
             db.execute("SELECT sql FROM sqlite_master WHERE name = ?", (ix[1],)).fetchone())
            for ix in db.execute(f"PRAGMA index_list('{table}')")
        ]  # fmt: skip
        found[table] = (
            sorted(tuple(c[1:]) for c in db.execute(f"PRAGMA table_info('{table}')")),
            sorted(indexes, key=repr),
            sorted(tuple(f[2:]) for f in db.execute(f"PRAGMA foreign_key_list('{table}')")),
        )
    found["applied"] = sorted(db.execute("SELECT app, name FROM django_migrations"))
    found["permissions"] = sorted(db.execute(
        "SELECT t.app_label, t.model, p.codename, p.name FROM auth_permission p "
        "JOIN django_content_type t ON t.id = p.content_type_id"))  # fmt: skip
    db.close()
    return found


def test_a_first_crawl_on_a_new_data_directory_makes_the_database_migrate_would(
    fast, tmp_path, crawl_command
):
    """A newcomer's first crawl (embedded defaults, a new data directory) makes its database
    from today's models instead of replaying every migration: the same tables, indexes,
    recorded migrations and permissions as ``migrate``, and ``migrate`` finds nothing to do."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(fast, LOG_LEVEL="DEBUG", CRAWL_DATA_DIR=str(tmp_path / "new"))
    with Site(pages=5) as site:
        proc = crawl_command(env, site.url("/p/0"), "--max-pages", "3", "--workers", "1")
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "finished:" in stdout
    assert "crawl start-up: database created" in stderr
    check = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--check", "-v0"],
        cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr  # nothing left to apply
    env["CRAWL_DATA_DIR"] = str(tmp_path / "migrated")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=settings.BASE_DIR,
                   env=env, check=True, timeout=120)  # fmt: skip
    made = _schema(tmp_path / "new" / "crawl.sqlite3")
    migrated = _schema(tmp_path / "migrated" / "crawl.sqlite3")
    assert made.keys() == migrated.keys()
    for table in made:
        assert made[table] == migrated[table], table


def test_a_command_runs_with_the_collector_on_and_its_start_up_frozen(worker_env):
    """``manage.py`` loads its modules with the cyclic collector off: by the time the command
    runs, collection is back on and what start-up made is in the permanent generation."""
    code = "import gc; print(gc.isenabled(), gc.get_freeze_count())"
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v0", "-c", code],
        cwd=settings.BASE_DIR, env=worker_env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    enabled, frozen = done.stdout.split()
    assert enabled == "True", done.stderr
    assert int(frozen) > 10_000  # Django's, Celery's and the platform's modules


COMMANDS = [
    ["channel", "status"], ["config", "list"], ["config", "set", "USER_AGENT", "x/1"],
    ["review", "list"], ["job", "status", "1"], ["get", "job", "x"], ["export", "1", "-o", "-"],
    ["seed", "1", "-"], ["apply", "-f", "-"], ["crawl", "http://127.0.0.1:9/"],
]  # fmt: skip


SPEC = """apiVersion: crawlplatform/v1
kind: CrawlJob
metadata: {name: docs}
spec: {seeds: ["http://127.0.0.1:9/docs/"]}
"""


def _one_line(env: dict, command: list[str]) -> str:
    done = subprocess.run([sys.executable, "manage.py", *command], cwd=settings.BASE_DIR, env=env,
                          input=SPEC, capture_output=True, text=True, timeout=60)  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_a_command_with_nothing_reachable_says_so_in_one_line(worker_env, command):
    env = {**worker_env, "DATABASE_URL": "postgres://crawl:s3cret@127.0.0.1:1/crawl",
           "REDIS_URL": "redis://:s3cret@127.0.0.1:1/0"}  # fmt: skip
    line = _one_line(env, command)
    assert line.startswith(f"manage.py {command[0]}: ")
    assert "127.0.0.1:1" in line and "s3cret" not in line


@pytest.mark.parametrize("command", [["channel", "status"], ["crawl", "http://127.0.0.1:9/"]],
                         ids=" ".join)  # fmt: skip
def test_a_command_without_redis_names_it_and_what_to_do(worker_env, command):
    line = _one_line({**worker_env, "REDIS_URL": "redis://:s3cret@127.0.0.1:1/0"}, command)
    assert "no Redis at redis://:***@127.0.0.1:1/0" in line and "REDIS_URL" in line


def _run(env: dict, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *command], cwd=settings.BASE_DIR, env=env,
                          input="", capture_output=True, text=True, timeout=60)  # fmt: skip


def test_jobs_are_listed_and_named_like_kubectl_names_things(worker_env):
    from django.contrib.auth.models import User

    alice = User.objects.create_user("alice")
    docs = jobs.create_job(["http://127.0.0.1:9/docs/"], name="docs", owner=alice)
    jobs.start(docs)
    jobs.create_job(["http://127.0.0.1:9/shop/"], name="shop")
    table = _run(worker_env, "get", "jobs").stdout.splitlines()
    assert table[0].split() == ["ID", "NAME", "STATE", "PROGRESS", "PAGES/S", "AGE", "OWNER"]
    assert [line.split()[1] for line in table[1:]] == ["shop", "docs"]  # newest first
    listed = json.loads(_run(worker_env, "get", "jobs", "-o", "json", "--owner", "alice").stdout)
    assert [(j["name"], j["state"], j["progress"]) for j in listed] == [("docs", "running", "0/1")]
    assert json.loads(_run(worker_env, "get", "jobs", "-o", "json", "--state", "draft").stdout)[0][
        "name"] == "shop"  # fmt: skip
    wide = _run(worker_env, "get", "jobs", "-o", "wide").stdout.splitlines()[0]
    assert "CHANNEL" in wide and "PRIORITY" in wide
    assert "not one of" in _run(worker_env, "get", "jobs", "-o", "xml").stderr

    by_name = _run(worker_env, "job", "status", "docs")
    assert by_name.returncode == 0 and f"job {docs.pk} (docs): running" in by_name.stdout
    assert f"job {docs.pk} (docs)" in _run(worker_env, "job", "status", str(docs.pk)).stdout
    assert "no job named 'nope'" in _run(worker_env, "job", "status", "nope").stderr
    assert _run(worker_env, "export", "docs", "-o", "-", "--format", "jsonl").returncode == 0

    status = json.loads(_run(worker_env, "job", "status", "docs", "-o", "json").stdout)
    assert (status["name"], status["state"], status["urls"]["queued"]) == ("docs", "running", 1)
    urls = json.loads(_run(worker_env, "get", "urls", "docs", "-o", "json").stdout)
    assert [(u["url"], u["state"]) for u in urls] == [("http://127.0.0.1:9/docs/", "queued")]
    assert _run(worker_env, "get", "urls", "docs", "--state", "done").stdout.count("\n") == 1
    assert json.loads(_run(worker_env, "get", "pages", "docs", "-o", "json").stdout) == []
    assert json.loads(_run(worker_env, "review", "list", "-o", "json").stdout) == []
    dropped = _run(worker_env, "review", "drop")
    assert dropped.returncode != 0 and "--all" in dropped.stderr
    assert _run(worker_env, "review", "drop", "--job", "docs").returncode == 0
    refused = _run(worker_env, "job", "delete", "docs")  # no terminal to ask: refused
    assert refused.returncode != 0 and "--yes" in refused.stderr
    assert CrawlJob.objects.filter(pk=docs.pk).exists()
    assert _run(worker_env, "job", "delete", "docs", "--yes").returncode == 0
    assert not CrawlJob.objects.filter(pk=docs.pk).exists()


def test_help_lists_the_platforms_commands_first(worker_env):
    text = _run(worker_env, "help").stdout
    groups = [line for line in text.splitlines() if line.startswith("[")]
    assert groups[0].startswith("[crawlplatform")
    first = text.split(groups[0], 1)[1].split("\n\n", 1)[0].split()
    assert {"crawl", "get", "job", "export", "apply", "review"} <= set(first)


@pytest.mark.parametrize("output", [["-o", "jsonl"], ["--output", "-", "--format", "jsonl"]],
                         ids=" ".join)  # fmt: skip
def test_results_go_to_standard_output_in_the_format_named(worker_env, output, crawl_command):
    with Site(pages=5) as site:
        proc = crawl_command(worker_env, site.url("/p/0"), "--concurrency", "2", *output)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    rows = [json.loads(line) for line in stdout.splitlines()]  # nothing else on stdout
    assert {r["url"] for r in rows} == site.expected_done() | site.expected_failed()
    assert "wrote" in stderr and "standard output" in stderr


def test_seeds_come_from_a_file_too_and_the_start_line_names_a_few(
    worker_env, tmp_path, crawl_command
):
    listed = tmp_path / "seeds.txt.gz"
    with Site(pages=8) as site:
        lines = ["# the site's leaves", *(site.url(f"/p/{i}") for i in (2, 4, 6)), "", " "]
        listed.write_bytes(gzip.compress("\n".join(lines).encode()))
        proc = crawl_command(worker_env, site.url("/p/7"), "--seeds", str(listed), "--max-depth",
                             "0", "--concurrency", "2", "--output", "-", "--format",
                             "jsonl")  # fmt: skip
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    crawled = {json.loads(line)["url"] for line in stdout.splitlines()}
    assert crawled == {site.url(f"/p/{i}") for i in (7, 2, 4, 6)}
    assert f"{site.url('/p/4')} and 1 more" in stderr  # the first three seeds, then a count


def test_a_seed_file_that_cannot_be_read_is_named_at_once(worker_env, tmp_path):
    done = _run(worker_env, "crawl", "--seeds", str(tmp_path / "none.txt"))
    assert done.returncode != 0 and "none.txt" in done.stderr and "No such file" in done.stderr
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(gzip.compress(b"http://127.0.0.1:9/a\n" * 1000)[:-20])
    done = _run(worker_env, "crawl", "--seeds", str(cut))
    assert done.returncode != 0 and "cut.txt.gz: not a whole gzip file" in done.stderr
    assert "Traceback" not in done.stderr
    done = _run(worker_env, "crawl", "--seeds", str(cut), "--resume", "1")
    assert done.returncode != 0 and "not with --resume" in done.stderr
    assert not CrawlJob.objects.exists()


def test_an_output_to_standard_output_without_a_format_is_refused_at_once(worker_env):
    done = _run(worker_env, "crawl", "http://127.0.0.1:9/", "--output", "-")
    assert done.returncode != 0 and "--format" in done.stderr
    assert not CrawlJob.objects.exists()


def test_the_readme_shows_the_commands_as_their_parsers_define_them():
    from web.management import usage

    readme = (settings.BASE_DIR / "README.md").read_text()
    shown = readme.split("keeps them equal -->\n```\n", 1)[1].split("```", 1)[0]
    assert shown == usage.block() + "\n", "run: python -m web.management.usage"


def test_every_option_of_the_platforms_commands_says_what_it_does_and_its_default():
    from django.core.management import load_command_class

    from web.management import usage

    for name in usage.platform_commands():
        parser = load_command_class("web", name).create_parser("manage.py", name)
        text = parser.format_help()
        for action in parser._actions:
            if set(action.option_strings) & usage.COMMON or not action.option_strings:
                continue
            assert action.help, f"{name} {action.option_strings[0]} has no help"
            if action.default not in (None, False, "", []):
                assert "default" in (action.help or "").lower() or (
                    f"(default: {action.default})" in " ".join(text.split())
                ), f"{name} {action.option_strings[0]}: its default is not shown"


def test_a_second_ctrl_c_stops_the_workers_at_once(worker_env, tmp_path, crawl_command):
    """The first Ctrl-C waits for in-flight pages (here: pages that take 30 s); the second
    does not: the workers end now and their URLs come back through their leases."""
    env = {**worker_env, "CRAWL_FETCH_DEADLINE_S": "60", "CRAWL_FETCH_READ_TIMEOUT_S": "60"}
    with Site(pages=20, delay=30) as site:
        proc = crawl_command(env, site.url("/p/0"), "--concurrency", "2", "-o",
                             str(tmp_path / "o.jsonl"))  # fmt: skip
        job = wait_for(lambda: CrawlJob.objects.first(), 30, "the job to be created")
        children = wait_for(lambda: [c for c in psutil.Process(proc.pid).children(recursive=True)
                                     if _is_worker(c)], 30, "the workers")  # fmt: skip
        wait_for(lambda: sum(site.hits.values()) >= 1, 30, "a fetch in flight")
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: CrawlJob.objects.get(pk=job.pk).state == JobState.PAUSED, 30,
                 "the job to be paused")  # fmt: skip
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=20)  # the in-flight fetch would take 30 s
        assert proc.returncode == 130, stderr
        gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive
