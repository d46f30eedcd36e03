"""Worker supervision: dead workers are replaced, workers that cannot start are reported."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tasks import broker
from tasks.tasks import fetch_urls
from tasks.worker.supervisor import WorkerPool, WorkerStartupError
from tests.conftest import wait_for
from tests.polling import wait_until


def _until_it_gives_up(log_dir: Path, fork: bool) -> tuple[int, int]:
    """Start a pool whose worker cannot start and replace it until the pool gives up:
    (workers forked, restarts)."""
    pool = WorkerPool(1, 1, pool="no-such-pool", log_dir=log_dir, fork=fork)
    pool.start()

    def restarted_until_it_gives_up() -> bool:
        try:
            pool.replace_dead()
        except WorkerStartupError as exc:
            assert "worker" in str(exc) and str(log_dir) in str(exc)
            return True
        return False

    try:
        wait_until(restarted_until_it_gives_up, 60, "the pool to give up", every=0.2)
    finally:
        pool.stop(grace=5)
    return pool.forks, pool.restarts


def _in_a_fresh_interpreter(helper: str, path: Path | None, *args: str, **env: str) -> str:
    """What ``helper`` of this module returns (its last printed line), called with ``path``
    and ``args`` in a new Python process with Django set up (``env`` on top of this one's):
    a pool forks only from a process with one thread, and imports are seen from scratch."""
    call = ", ".join(["Path(sys.argv[1])"] * (path is not None) + list(args))
    code = ("import sys, django; from pathlib import Path; django.setup(); "
            f"from tests.test_supervisor import {helper}; print({helper}({call}))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, *([str(path)] if path else [])],
                         env={**os.environ, **env}, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()[-1]


def _web_side_loaded() -> str:
    """The web side's modules (and the job specs' schema library) a worker and the scheduler
    have imported, once they have imported what they need."""
    import crawlplatform.celery  # noqa: F401
    import tasks.tasks  # noqa: F401
    from tasks.frontier import scheduler  # noqa: F401

    return " ".join(sorted(m for m in sys.modules if m.startswith(("web.", "jsonschema"))))


def test_workers_dying_at_start_up_are_reported_not_restarted_forever(tmp_path):
    assert _until_it_gives_up(tmp_path, fork=False) == (0, 2)


def test_forked_workers_dying_at_start_up_are_reported_alike(tmp_path):
    """Forked as the crawl command's are, from a process with one thread (this one may have
    others left by earlier tests: a pool does not fork then)."""
    forked = _in_a_fresh_interpreter("_until_it_gives_up", tmp_path, "fork=True",
                                     DJANGO_SETTINGS_MODULE="tests.settings")  # fmt: skip
    assert forked == "(3, 2)"  # the first and both replacements forked


@pytest.mark.django_db(transaction=True)
def test_a_dead_worker_is_replaced(worker_env):
    pool = WorkerPool(1, 1, env=worker_env)
    pool.start()
    try:
        first = next(iter(pool.procs.values()))
        wait_for(lambda: first.poll() is None, 10, "the worker to run")
        first.kill()
        first.wait()
        assert len(pool.replace_dead()) == 1
        assert len(pool.procs) == 1 and pool.restarts == 1
    finally:
        pool.stop(grace=15)


def test_workers_and_the_scheduler_start_without_the_web_side():
    """Start-up CPU is paid by every worker process: what a crawl task needs is imported, and
    neither the admin, the API nor the job-spec schemas (loaded by the URL configuration of
    the processes that serve pages)."""
    settings_module = {"DJANGO_SETTINGS_MODULE": "crawlplatform.settings"}
    loaded = set(_in_a_fresh_interpreter("_web_side_loaded", None, **settings_module).split())
    assert "web.models" in loaded  # the check sees what was imported
    assert not loaded & {"web.admin", "web.api", "web.specs", "web.dashboard", "jsonschema"}


def _received_logged(log_dir: Path, fork: bool) -> dict[str, bool]:
    """Start a pool of one worker under each LOG_LEVEL, give it a message and stop it:
    whether its log has Celery's line for the message received, by level."""
    received = re.compile(r"tasks\.fetch_urls\[[0-9a-f-]+\] received")
    found = {}
    for level in ("INFO", "WARNING"):
        os.environ["LOG_LEVEL"] = level  # a pool's workers may fork only in its environment
        queue = f"log-{level}"
        pool = WorkerPool(1, 1, queue=queue, prefix=queue, log_dir=log_dir, fork=fork)
        pool.start()
        try:
            fetch_urls.apply_async(([0], 0), queue=queue)  # no such URL: no work
            wait_until(lambda q=queue: not broker.depth(q)["ready"], 30, "the worker to take it")
        finally:
            pool.stop(grace=15)  # a warm stop: a message taken is done and logged by now
        assert pool.forks == int(fork)
        found[level] = bool(received.search((log_dir / f"{queue}1.log").read_text()))
    return found


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fork", [False, True], ids=["started", "forked"])
def test_workers_log_at_the_level_their_environment_asks(worker_env, tmp_path, fork):
    """Celery's line for each message received is INFO: a worker run with LOG_LEVEL=WARNING
    does not pay for it in every message; one at INFO still has it. Started workers and the
    crawl command's forked ones alike (in a fresh interpreter: a pool forks only from a
    process with one thread)."""
    found = _in_a_fresh_interpreter("_received_logged", tmp_path, f"fork={fork}", **worker_env)
    assert found == "{'INFO': True, 'WARNING': False}"


def _warm_stop_of_an_idle_worker(log_dir: Path) -> str:
    """Fork a worker whose broker poll lasts 30 s, wait until it is waiting in that poll (its
    named connection running BRPOP), then stop it warm: (forks, seconds the stop took)."""
    import time

    import redis
    from django.conf import settings

    from crawlplatform.celery import app

    app.conf.broker_transport_options = {**app.conf.broker_transport_options,
                                         "polling_interval": 30}  # fmt: skip
    pool = WorkerPool(1, 1, queue="stop-poll", prefix="stop-poll", log_dir=log_dir, fork=True)
    pool.start()
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        wait_until(lambda: any(c["name"].startswith("crawl-worker:stop-poll1@")
                               and c["cmd"] == "brpop" for c in client.client_list()),
                   30, "the worker to wait in its broker poll")  # fmt: skip
    finally:
        began = time.monotonic()
        pool.stop(grace=60)
    return repr((pool.forks, round(time.monotonic() - began, 1)))


@pytest.mark.django_db(transaction=True)
def test_a_warm_stop_does_not_wait_for_the_broker_poll(worker_env, tmp_path):
    """An idle worker waits in a BRPOP; its warm stop ends that poll (CLIENT UNBLOCK) and
    wakes its loop, rather than waiting for the poll to time out (here 30 s; a second by
    default, which every crawl's end waited for)."""
    printed = _in_a_fresh_interpreter("_warm_stop_of_an_idle_worker", tmp_path, **worker_env)
    forks, took = ast.literal_eval(printed)
    assert forks == 1
    assert took < 10, f"the warm stop took {took} s"


def _one_after_another(log_dir: Path) -> str:
    """Fork a worker of one thread, give it 20 messages that find nothing to do, and time how
    long it takes until it has done them all: (forks, seconds)."""
    import time

    pool = WorkerPool(1, 1, queue="in-turn", prefix="in-turn", log_dir=log_dir, fork=True)
    pool.start()
    done = re.compile(r"tasks\.fetch_urls\[[0-9a-f-]+\] succeeded")
    log = log_dir / "in-turn1.log"
    try:
        wait_until(lambda: log.exists() and "ready" in log.read_text(), 30, "the worker")
        began = time.monotonic()
        for _ in range(20):
            fetch_urls.apply_async(([0], 0), queue="in-turn")  # no such URL: no work
        wait_until(lambda: len(done.findall(log.read_text())) == 20, 60, "the 20 messages")
        took = time.monotonic() - began
    finally:
        pool.stop(grace=15)
    return repr((pool.forks, round(took, 2)))


@pytest.mark.django_db(transaction=True)
def test_a_threads_pool_worker_takes_its_next_message_as_soon_as_it_is_free(worker_env, tmp_path):
    """With one thread and acks-late, a worker may take a message only once the one before is
    acknowledged, which its event loop does: the pool thread's hand-off wakes the loop
    (kombu's hub), which then asks the broker for the next message. Were the loop left asleep
    until its poll ends (up to a second), 20 short messages would take seconds each."""
    printed = _in_a_fresh_interpreter("_one_after_another", tmp_path, **worker_env)
    forks, took = ast.literal_eval(printed)
    assert forks == 1
    assert took < 10, f"20 messages took {took} s"


def test_only_a_stopping_worker_ends_its_broker_poll_early(monkeypatch, redis):
    """A channel closed after a lost connection (the worker is not stopping) leaves its poll
    alone: no CLIENT LIST nor UNBLOCK is sent; a stopping worker's close sends them."""
    from types import SimpleNamespace

    from crawlplatform.celery import _end_poll
    from tasks.worker import lifecycle

    asked: list[str] = []

    class Client:
        def client_list(self):
            asked.append("list")
            return broker.client().client_list()

        def execute_command(self, *args):
            asked.append(args[0])

    channel = SimpleNamespace(client_name="crawl-worker:none:0", _in_poll=object(),
                              _create_client=Client)  # fmt: skip
    monkeypatch.setattr(lifecycle, "stopping", lifecycle.Flag())
    _end_poll(channel)
    assert asked == []
    lifecycle.stopping.set()
    _end_poll(channel)
    assert asked == ["list"]  # asked Redis; no connection of that name runs BRPOP


def test_the_stop_of_a_worker_wakes_its_event_loop(monkeypatch):
    """The loop of a worker polls its sockets for up to a second when idle; the stop's
    beginning (Celery's ``worker_shutting_down``) makes a socket it watches readable, so
    that the poll returns at once and the loop sees the stop."""
    from types import SimpleNamespace

    from celery import signals
    from kombu.asynchronous import Hub

    from tasks.worker import lifecycle

    monkeypatch.setattr(lifecycle, "_waker", None)
    monkeypatch.setattr(lifecycle, "stopping", lifecycle.Flag())
    hub = Hub()
    try:
        lifecycle._wake_the_loop_on_stop(sender=SimpleNamespace(hub=hub))
        reader = lifecycle._waker[0]
        assert hub.poller.poll(0) in (None, [])  # nothing to read before the stop
        signals.worker_shutting_down.send(sender="test", sig="TERM", how="Warm", exitcode=0)
        assert [fd for fd, _ in hub.poller.poll(5)] == [reader.fileno()]
        hub.readers[reader.fileno()][0](reader)  # the loop's callback drains it
        assert hub.poller.poll(0) in (None, [])
    finally:
        hub.close()
        for each in lifecycle._waker or ():
            each.close()


def test_a_worker_handles_sigterm_once_however_many_arrive():
    import signal

    from tasks.worker import lifecycle

    calls = []
    before = signal.signal(signal.SIGTERM, lambda *_: calls.append(1))
    try:
        lifecycle.term_once()
        lifecycle.term_once()  # installing it twice wraps once
        for _ in range(3):
            os.kill(os.getpid(), signal.SIGTERM)
        assert calls == [1]
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)


ORPHAN = """
import os, signal, sys, time
from tasks.worker.supervisor import _end_when_orphaned
parent = os.getpid()
child = os.fork()
if child == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a warm stop that never ends
    _end_when_orphaned(parent, 0.5)
    time.sleep(120)
    os._exit(0)
print(child, flush=True)
"""


def test_a_forked_worker_whose_supervisor_died_ends_after_its_grace():
    """However its warm stop hangs, an orphaned worker is gone soon after its grace."""
    import psutil

    done = subprocess.run([sys.executable, "-c", ORPHAN], capture_output=True, text=True,
                          timeout=30, cwd=Path(__file__).resolve().parent.parent)  # fmt: skip
    orphan = psutil.Process(int(done.stdout.strip()))
    gone, alive = psutil.wait_procs([orphan], timeout=10)
    assert not alive
