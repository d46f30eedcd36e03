"""Fixtures: real Redis (the machine's or a private one), the real test database, real
worker processes, a real scheduler thread and a real local web site."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from django.conf import settings
from django.db import connection

from crawlplatform.embedded import EmbeddedRedis
from tasks import broker, defaults
from tasks.content import links
from tasks.frontier import channels, jobconfig, jobs
from tasks.frontier.scheduler import Scheduler
from tasks.worker.supervisor import WorkerPool
from tests.budgets import FAST, LOCAL
from tests.polling import wait_until
from tests.site import Site
from web.models import CrawlJob, JobState


def wait_for(predicate: Callable[[], object], timeout: float, what: str, every: float = 0.1):
    """Poll ``predicate`` until it is truthy; fail the test with ``what`` after ``timeout``."""
    try:
        return wait_until(predicate, timeout, what, every)
    except TimeoutError as exc:
        pytest.fail(str(exc))


@pytest.fixture(autouse=True)
def _forget_job_caches():
    """Job ids are reused after a test database flush: per-process job caches must not be,
    nor live settings, nor an earlier test's channel weights."""
    jobconfig._jobs.clear()
    links._caches.clear()
    defaults.live = {}  # live settings of an earlier test's database
    channels.forget()


@pytest.fixture(scope="session", autouse=True)
def _empty_body_store() -> None:
    """Job ids start again with each test database: bodies of an earlier run must not count."""
    location = settings.STORAGES["bodies"].get("OPTIONS", {}).get("location")
    if location and settings.STORAGES["bodies"]["BACKEND"].endswith("BodyFileStorage"):
        shutil.rmtree(location, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[None]:
    """The configured Redis, or the embedded default's private one when REDIS_URL is unset."""
    if settings.EMBEDDED_REDIS:
        server = EmbeddedRedis(settings.DATA_DIR)
        server.start()
        yield
        server.stop()
    else:
        yield


@pytest.fixture
def redis(redis_server):
    """A clean Redis database for each test."""
    client = broker.client()
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture
def fast(monkeypatch) -> dict[str, str]:
    for key, value in FAST.items():
        monkeypatch.setenv(key, value)
    return dict(FAST)


def database_url() -> str:
    d = connection.settings_dict
    if "sqlite" in d["ENGINE"]:
        return f"sqlite:///{d['NAME']}"
    auth = d["USER"] + (f":{d['PASSWORD']}" if d["PASSWORD"] else "")
    return f"postgres://{auth}@{d['HOST'] or '127.0.0.1'}:{d['PORT'] or 5432}/{d['NAME']}"


@pytest.fixture
def worker_env(transactional_db, redis, fast) -> dict[str, str]:
    """Environment for subprocesses (workers, the CLI): the test database and Redis."""
    return {**fast, **_services_env()}


def _services_env() -> dict[str, str]:
    """What a subprocess needs to work on the test database, Redis and data directory."""
    return {
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "CRAWL_DATA_DIR": str(settings.DATA_DIR),
        "DJANGO_SETTINGS_MODULE": "crawlplatform.settings",
        "LOG_LEVEL": "INFO",  # tests read the workers' INFO lines, whatever the shell sets
    }


@pytest.fixture
def workers(worker_env, tmp_path) -> Iterator[Callable[..., WorkerPool]]:
    """Start real Celery worker processes: ``workers(processes, concurrency)``."""
    pools: list[WorkerPool] = []

    def start(processes: int = 2, concurrency: int = 4, pool: str = "threads") -> WorkerPool:
        wp = WorkerPool(
            processes, concurrency, pool=pool, env=worker_env, log_dir=tmp_path / "logs"
        )
        wp.start()
        pools.append(wp)
        return wp

    yield start
    for wp in pools:
        wp.stop(grace=15)


@pytest.fixture
def crawl_command() -> Iterator[Callable[..., subprocess.Popen]]:
    """Start ``manage.py crawl`` as a user runs it: ``crawl_command(env, *args)``, with its
    own workers and scheduler, its output in pipes. One still running when the test ends (it
    failed first) is stopped as a SIGTERM stops it, and killed if that does not end it."""
    procs: list[subprocess.Popen] = []

    def start(env: dict, *args: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "crawl", *args],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:  # a crawl's SIGTERM pauses its job and stops its workers warm; a
        ended(proc, 60)  # SIGKILL ends them and its redis-server too (crawlplatform/orphans.py)


def ended(proc: subprocess.Popen, grace: float) -> None:
    """End a process a test started, if it still runs (the test failed first): SIGTERM, its
    pipes read (a full one would hold its last writes) for ``grace`` seconds, then SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def scheduler(transactional_db, redis, fast) -> Iterator[Scheduler]:
    """The scheduler running in a thread of the test process."""
    sched = Scheduler()
    thread = threading.Thread(target=sched.run, daemon=True)
    thread.start()
    yield sched
    sched.shutdown()
    thread.join(timeout=10)


def crawl_to_end(
    seed: str,
    tmp_path,
    env: dict[str, str],
    *,
    processes: int = 2,
    concurrency: int = 4,
    timeout: float = 120,
    warm_up: float = 0.0,
    **fields,
) -> tuple[CrawlJob, float]:
    """Crawl from ``seed`` with real worker processes (``env`` on top of the test database and
    Redis) and a scheduler thread, to the job's end; returns the job and the seconds from its
    start (workers get ``warm_up`` seconds to start before the clock does)."""
    broker.client().flushdb()
    workers_env = {**LOCAL, **env, **_services_env()}
    pool = WorkerPool(processes, concurrency, env=workers_env, log_dir=tmp_path / "logs")
    sched = Scheduler()
    thread = threading.Thread(target=sched.run, daemon=True)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        pool.start()
        try:  # the workers stop even if the job cannot be made or started
            time.sleep(warm_up)
            job = jobs.create_job([seed], **fields)
            started = time.monotonic()
            jobs.start(job)
            thread.start()
            try:

                def done() -> bool:
                    job.refresh_from_db()
                    return job.state == JobState.FINISHED

                wait_for(done, timeout, "the crawl to finish", every=0.2)
                elapsed = time.monotonic() - started
            finally:
                sched.shutdown()
                thread.join(10)
        finally:
            pool.stop(grace=15)
    return job, elapsed


@pytest.fixture
def site() -> Iterator[Site]:
    with Site(pages=300) as s:
        yield s
