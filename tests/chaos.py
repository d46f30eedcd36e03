"""Chaos suite: crawl a local site with 3 worker processes while breaking things.

    .venv/bin/python -m tests.chaos [--pages 2000] [--scenarios kill,term,redis,postgres,...]
                                    [--broker redis|rabbitmq] [--spider]

Scenarios (each on a fresh job, site, Redis and worker set):

* ``kill``: SIGKILL a random worker every ``--kill-every`` seconds (and start a replacement)
  until 80% of the pages are stored; ``recovery`` is the time from the last kill to the job's
  end, and must be at most ``RECOVERY_MAX_S``.
* ``term``: SIGTERM every worker at once mid-crawl, then start new ones.
* ``redis``: FLUSHALL and restart Redis (one this suite starts on its own port): the broker,
  with ``--broker redis``, and politeness, robots and the scheduler's lease in any case.
* ``rabbitmq`` (``--broker rabbitmq``): SIGKILL the RabbitMQ node (one this suite starts on
  its own port) and start it again 3 s later.
* ``postgres``: stop PostgreSQL for ``--db-down`` seconds mid-crawl (a cluster this suite
  creates on its own port).
* ``pause``: pause and resume the job three times mid-crawl.
* ``redis-cli``, ``postgres-cli``: as ``redis`` and ``postgres``, with the job driven by
  ``manage.py crawl --workers 0 --output FILE`` (its scheduler in the command) and the same
  external workers: the command must survive, exit 0 and write every result once.

``--broker rabbitmq`` runs the scenarios with a RabbitMQ node of the suite's own as the broker
(quorum queues; Redis keeps the rest), ``--broker redis`` (the default) with Redis as both.
``--spider`` crawls with a spider (``tests/spiders/pages.py``: an item for every page, every
link followed) instead of a plain job: then every stored page must also have exactly one item
(``items``: items stored twice, and pages without one), and a ``-cli`` command writes the
items.

Each must end with the job finished, every reachable page stored exactly once, no URL left
queued/scheduled/leased, no page fetched more than twice at the server (``kill``: at most
once more per kill), every stored page's body in the body store and equal to what the site
sent (``bodies``: pages without), and no unhandled exception in the worker logs. ``term``
also needs every worker to exit 0 with no URL left leased, and ``pause`` no fetch at the
server while the job is paused (``violations``). A table of the figures is printed; the exit
status is 0 only if every scenario passed. ``tests/test_chaos.py`` runs the same scenarios
at a reduced size.

Retries and deadlines use the test suite's short budgets, but leases, their renewal, the sweep
and the visibility timeout are the platform's defaults: recovery times are the real ones.
Apart from the ``-cli`` scenarios the scheduler runs as its own process (``manage.py
scheduler``), like the workers, so that it meets the same broken Redis and database.
``DATABASE_URL`` must name PostgreSQL, or is created for the ``postgres`` scenarios.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.budgets import FAST
from tests.polling import wait_until

ROOT = Path(__file__).resolve().parent.parent
PG_BIN = Path("/usr/lib/postgresql") / "15" / "bin"
RECOVERY_MAX_S = 30.0  # from the last kill to the job's end
# Recovery settings left at the platform's defaults (the fast test budgets would flatter them).
PRODUCTION_BUDGETS = (
    "CRAWL_LEASE_S", "CRAWL_LEASE_RENEW_S", "CRAWL_SCHEDULED_STALE_S", "CRAWL_SWEEP_INTERVAL_S",
    "CRAWL_VISIBILITY_TIMEOUT_S", "CRAWL_UNACKED_RESTORE_INTERVAL_S",
)  # fmt: skip


@dataclass
class Result:
    scenario: str
    broker: str
    pages_expected: int
    pages_stored: int
    stored_twice: int
    left_pending: int
    fetched_twice: int
    max_fetches: int
    unhandled: int
    violations: int
    bodies_missing: int
    seconds: float
    finished: bool
    error_lines: list[str]
    kills: int = 0
    recovery: float | None = None  # seconds from the last kill to the job's end
    items_twice: int = 0  # --spider: items stored more than once
    items_missing: int = 0  # --spider: stored pages without their item

    @property
    def passed(self) -> bool:
        return (
            self.finished
            and self.pages_stored == self.pages_expected
            and self.stored_twice == 0
            and self.left_pending == 0
            and self.max_fetches <= 2 + max(0, self.kills - 1)
            and self.unhandled == 0
            and self.violations == 0
            and self.bodies_missing == 0
            and (self.recovery is None or self.recovery <= RECOVERY_MAX_S)
            and self.items_twice == 0
            and self.items_missing == 0
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server of this suite's own, without persistence (a restart loses everything)."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(self._ping, 10, "redis to start")

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def flush_and_restart(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(16)
        self.proc.kill()
        self.proc.wait()
        time.sleep(1.0)
        self.start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


class RabbitServer:
    """A RabbitMQ node of this suite's own (run as this user, on its own ports and files)."""

    BIN = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")

    def __init__(self, workdir: Path) -> None:
        self.port, self.dist_port = free_port(), free_port()
        self.dir = workdir / "rabbitmq"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "rabbitmq.conf"
        config.write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\n")
        env = {
            **os.environ, "HOME": str(self.dir), "RABBITMQ_NODENAME": f"chaos{self.port}@localhost",
            "RABBITMQ_CONFIG_FILE": str(config), "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "plugins"),
            "RABBITMQ_PID_FILE": str(self.dir / "pid"),
        }  # fmt: skip
        self.proc = subprocess.Popen(
            [str(self.BIN)], env=env, stdout=(self.dir / "out.log").open("ab"),
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        wait_until(self._listening, 60, "rabbitmq to start")

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def kill_and_restart(self, down_s: float = 3.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()

    def stop(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class PostgresCluster:
    """A PostgreSQL cluster of this suite's own, to restart mid-crawl."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.data = workdir / "pgdata"
        self.log = workdir / "postgres.log"

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/chaos"

    def _as_postgres(self, *cmd: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *cmd], check=True, capture_output=True)

    def create(self) -> None:
        self.data.parent.chmod(0o777)
        self._as_postgres(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust",
                          "-U", "postgres")  # fmt: skip
        self.start()
        self._as_postgres(str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                          "-U", "postgres", "chaos")  # fmt: skip

    def start(self) -> None:
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                          "-o", f"-p {self.port} -k /tmp -c listen_addresses=127.0.0.1",
                          "-w", "start")  # fmt: skip

    def restart(self, down_s: float) -> None:
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                          "stop")  # fmt: skip
        time.sleep(down_s)
        self.start()

    def stop(self) -> None:
        try:
            self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                              "stop")  # fmt: skip
        except subprocess.CalledProcessError:
            pass


def run(
    scenario: str,
    pages: int,
    kill_every: float,
    site_delay: float,
    workdir: Path,
    redis: RedisServer,
    postgres: PostgresCluster | None,
    db_down: float = 5.0,
    rabbit: RabbitServer | None = None,
    spider: bool = False,
) -> Result:
    """One scenario, in this process (Django must already point at the right database)."""
    from django.db import DatabaseError, connection

    from tasks.frontier import jobs
    from tasks.rules.urls import canonicalize
    from tasks.worker.supervisor import WorkerPool
    from tests.site import Site
    from web.models import PENDING_STATES, CrawlJob, FrontierURL, Item, Page

    fast = {k: v for k, v in FAST.items() if k not in PRODUCTION_BUDGETS}
    env = {k: v for k, v in os.environ.items() if k not in PRODUCTION_BUDGETS}
    env = {**env, **fast, "REDIS_URL": redis.url, "LOG_LEVEL": "INFO"}
    if spider:
        env["CRAWL_SPIDER_MODULES"] = os.environ["CRAWL_SPIDER_MODULES"] = "tests.spiders"
    violations = 0  # scenario-specific: non-zero exits or leased URLs after SIGTERM,
    # fetches while paused, a crawl command that did not exit 0 or wrote wrong results
    kills, last_kill, recovery = 0, None, None
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    output = workdir / "results.jsonl"
    name = f"chaos {scenario} {workdir.name}"  # unique: the database may hold earlier runs
    started = time.monotonic()
    with Site(pages=pages, delay=site_delay) as site:
        pool = WorkerPool(3, 4, env=env, log_dir=logs)
        pool.start()
        driver_log = (logs / "scheduler.log").open("ab")
        start = ["--spider", "pages", "-a", f"seed={site.url('/p/0')}"] if spider else [
            site.url("/p/0")]  # fmt: skip
        if scenario.endswith("-cli"):
            driver = subprocess.Popen(
                [sys.executable, "manage.py", "crawl", *start, "--workers", "0",
                 "--max-depth", "10000", "--name", name, "--output", str(output)],
                cwd=ROOT, env=env, stdout=driver_log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        else:
            seeds, kind = ([], {"spider": "pages", "spider_args": {"seed": site.url("/p/0")}}
                           ) if spider else ([site.url("/p/0")], {})  # fmt: skip
            job = jobs.create_job(seeds, max_depth=10_000, name=name, **kind)
            jobs.start(job)
            driver = subprocess.Popen(
                [sys.executable, "manage.py", "scheduler"], cwd=ROOT, env=env,
                stdout=driver_log, stderr=subprocess.STDOUT,
            )  # fmt: skip

        def reconnecting(query):
            """Watch through a database restart: a broken connection is replaced."""
            try:
                return query()
            except DatabaseError:
                connection.close()
                return None

        def stored() -> int:
            return reconnecting(lambda: Page.objects.filter(job=job).count()) or 0

        def state() -> str:
            return reconnecting(lambda: CrawlJob.objects.get(pk=job.pk).state) or "unknown"

        try:
            if scenario.endswith("-cli"):  # made by the command (stopped below if it never is)
                job = wait_until(lambda: CrawlJob.objects.filter(name=name).first(), 60, "the job")
            wait_until(lambda: stored() >= pages * 0.2, 300, "a fifth of the pages")
            if scenario == "kill":
                while stored() < pages * 0.8 and time.monotonic() - started < 600:
                    victim = random.choice(list(pool.procs))
                    os.killpg(pool.procs[victim].pid, signal.SIGKILL)
                    pool.procs.pop(victim).wait()
                    pool.started.pop(victim, None)
                    last_kill, kills = time.monotonic(), kills + 1
                    pool.spawn()  # the replacement, as a Deployment would start one
                    time.sleep(kill_every)
            elif scenario == "term":
                codes = pool.stop(grace=60)
                # Warm shutdown: every worker exits 0 and no page is left half-done.
                violations += sum(1 for code in codes.values() if code != 0)
                violations += FrontierURL.objects.filter(job=job, state="leased").count()
                pool.start()
            elif scenario in ("redis", "redis-cli"):
                redis.flush_and_restart()
            elif scenario in ("postgres", "postgres-cli"):
                postgres.restart(db_down)
            elif scenario == "rabbitmq":
                rabbit.kill_and_restart()
            elif scenario == "pause":
                for _ in range(3):
                    jobs.pause(CrawlJob.objects.get(pk=job.pk))
                    time.sleep(1.5)  # in-flight pages finish within a fetch (0.5 s here)
                    before = len(site.times)
                    time.sleep(2)
                    violations += len(site.times) - before  # fetches while paused
                    jobs.resume(CrawlJob.objects.get(pk=job.pk))
                    time.sleep(3)
            finished = True
            try:
                limit = float(os.environ.get("CHAOS_FINISH_TIMEOUT_S", "600"))
                wait_until(lambda: state() == "finished", limit, "the job to finish", every=0.2)
                if last_kill is not None:
                    recovery = round(time.monotonic() - last_kill, 1)
            except TimeoutError:
                finished = False
            if scenario.endswith("-cli"):
                try:
                    violations += driver.wait(timeout=120) != 0  # it writes the results, exits 0
                except subprocess.TimeoutExpired:
                    violations += 1
        finally:
            pool.stop(grace=60)
            if driver.poll() is None:
                driver.send_signal(signal.SIGTERM)
                driver.wait(30)
            driver_log.close()
        urls = FrontierURL.objects.filter(job=job)
        if scenario.endswith("-cli"):
            text = output.read_text() if output.exists() else ""
            written = [json.loads(ln)["url"] for ln in text.splitlines()]
            ended = urls.filter(state__in=["done"] if spider else ["done", "failed"]).count()
            violations += len(written) != len(set(written)) or len(written) != ended
        stored_urls = list(Page.objects.filter(job=job).values_list("url__url", flat=True))
        items = [  # a request is sent (and its item says) as the spider wrote it: compared
            canonicalize(url)  # with the frontier's canonical keys
            for url in Item.objects.filter(job=job, dropped="").values_list("data__url", flat=True)
        ]
        bodies_missing = sum(
            1
            for key, digest in Page.objects.filter(job=job).values_list("body_key", "content_hash")
            if not _body_intact(key, digest)
        )
        retried = {site.url("/error")}
        fetches = [n for url, n in site.hits.items() if url not in retried]
        markers = ("raised unexpected", "Unrecoverable error")
        errors = [
            f"{log.name}: {line.strip()[:300]}"
            for log in sorted(logs.glob("*.log"))
            for line in log.read_text(errors="replace").splitlines()
            if any(m in line for m in markers)
        ]
        return Result(
            scenario=scenario,
            broker="rabbitmq" if rabbit else "redis",
            pages_expected=len(site.expected_done()),
            pages_stored=len(set(stored_urls) & site.expected_done()),
            stored_twice=len(stored_urls) - len(set(stored_urls)),
            left_pending=urls.filter(state__in=PENDING_STATES).count(),
            fetched_twice=sum(1 for n in fetches if n > 1),
            max_fetches=max(fetches, default=0),
            unhandled=len(errors),
            error_lines=errors[:5],
            violations=violations,
            bodies_missing=bodies_missing,
            seconds=round(time.monotonic() - started, 1),
            finished=finished,
            kills=kills,
            recovery=recovery,
            items_twice=len(items) - len(set(items)),
            items_missing=len(set(stored_urls) - set(items)) if spider else 0,
        )


def _body_intact(key: str, digest: str) -> bool:
    """The stored body is there and is the page's (the site sends no content encoding)."""
    import hashlib

    import zstandard

    from tasks.content import bodies

    try:
        return bool(key) and hashlib.sha256(bodies.get(key)).hexdigest() == digest
    except (OSError, ValueError, zstandard.ZstdError):
        return False


def _child(args: argparse.Namespace) -> None:
    """Run one scenario in this process and print its result as JSON."""
    import django

    workdir = Path(args.workdir)
    rabbit = None
    if args.broker == "rabbitmq":
        rabbit = RabbitServer(workdir)
        rabbit.start()
        os.environ["CELERY_BROKER_URL"] = rabbit.url
    else:
        os.environ.pop("CELERY_BROKER_URL", None)  # the broker is the suite's Redis
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")
    django.setup()
    redis = RedisServer(workdir)
    redis.start()
    postgres = None
    if args.scenario.startswith("postgres"):
        postgres = PostgresCluster(workdir)
        postgres.port = int(os.environ["CHAOS_PG_PORT"])
    try:
        result = run(args.scenario, args.pages, args.kill_every, args.site_delay, workdir, redis,
                     postgres, args.db_down, rabbit, args.spider)  # fmt: skip
    finally:
        redis.stop()
        if rabbit is not None:
            rabbit.stop()
    print("RESULT " + json.dumps(asdict(result)), flush=True)


def scenario(
    name: str,
    pages: int,
    kill_every: float = 5.0,
    site_delay: float = 0.2,
    keep: bool = False,
    env: dict[str, str] | None = None,
    db_down: float = 5.0,
    broker: str = "redis",
    spider: bool = False,
) -> Result:
    """Run one scenario in a child process (its own Redis, RabbitMQ node with ``broker``
    ``rabbitmq``, and database when it needs one)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"chaos-{name}-"))
    env = {**os.environ, **(env or {})}
    postgres = None
    try:
        if name.startswith("postgres"):
            postgres = PostgresCluster(workdir)
            postgres.create()
            env["DATABASE_URL"] = postgres.url
            env["CHAOS_PG_PORT"] = str(postgres.port)
            subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env,
                           check=True)  # fmt: skip
        out = subprocess.run(
            [sys.executable, "-m", "tests.chaos", "--child", "--scenario", name, "--pages",
             str(pages), "--kill-every", str(kill_every), "--site-delay", str(site_delay),
             "--workdir", str(workdir), "--db-down", str(db_down), "--broker", broker,
             *(["--spider"] if spider else [])],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
        )  # fmt: skip
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"chaos {name} failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}")
        return Result(**json.loads(line[len("RESULT ") :]))
    finally:
        if postgres is not None:
            postgres.stop()
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def table(results: list[Result]) -> str:
    head = (
        f"{'scenario':<13}{'broker':<10}{'expected':>9}{'stored':>8}{'twice':>7}{'pending':>9}"
        f"{'refetched':>11}{'max':>5}{'errors':>8}{'violations':>12}{'bodies':>8}{'seconds':>9}"
        f"{'recovery':>10}{'items':>7}  result"
    )
    rows = [
        f"{r.scenario:<13}{r.broker:<10}{r.pages_expected:>9}{r.pages_stored:>8}{r.stored_twice:>7}"
        f"{r.left_pending:>9}{r.fetched_twice:>11}{r.max_fetches:>5}{r.unhandled:>8}"
        f"{r.violations:>12}{r.bodies_missing:>8}{r.seconds:>9}"
        f"{'' if r.recovery is None else r.recovery:>10}"
        f"{f'{r.items_twice}/{r.items_missing}':>7}"
        f"  {'pass' if r.passed else 'FAIL'}"
        for r in results
    ]
    notes = [f"  {r.scenario}: {line}" for r in results for line in r.error_lines]
    return "\n".join([head, *rows, *notes])


def main() -> None:
    parser = argparse.ArgumentParser(description="crawlplatform chaos suite")
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument(
        "--scenarios", default="kill,term,redis,postgres,pause,redis-cli,postgres-cli"
    )
    parser.add_argument("--kill-every", type=float, default=5.0)
    parser.add_argument(
        "--db-down", type=float, default=5.0, help="seconds PostgreSQL stays stopped"
    )
    parser.add_argument(
        "--site-delay", type=float, default=0.2, help="seconds the local site takes per page"
    )
    parser.add_argument("--keep", action="store_true", help="keep each scenario's logs")
    parser.add_argument(
        "--broker", choices=["redis", "rabbitmq"], default="redis",
        help="the Celery broker (rabbitmq: a node this suite starts; Redis keeps the rest)",
    )  # fmt: skip
    parser.add_argument(
        "--spider", action="store_true", help="crawl with a spider (an item a page), check them"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scenario", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args)
    results = []
    for name in args.scenarios.split(","):
        print(f"chaos: {name} on {args.broker} ({args.pages} pages) ...", flush=True)
        results.append(scenario(name, args.pages, args.kill_every, args.site_delay, args.keep,
                                db_down=args.db_down, broker=args.broker,
                                spider=args.spider))  # fmt: skip
    print(table(results))
    sys.exit(0 if all(r.passed for r in results) else 1)


if __name__ == "__main__":
    main()
