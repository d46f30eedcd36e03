"""A real Prometheus scrapes a real crawl with the shipped scrape configuration, and answers
the autoscalers' and the dashboard's queries with the figures the platform reports.

Prometheus is Debian's ``prometheus`` package (``.ci/run`` installs it; the test is skipped
with that reason where the binary is missing). It runs on a free loopback port with its own
data directory; ``deploy/prometheus.yml`` is used as shipped except for where its targets are
(127.0.0.1 ports instead of compose's service names), where its secrets are (files in the
test's directory) and how often it scrapes (every second instead of every 15).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import requests
import yaml

from crawlplatform.release import VERSION
from tasks import broker
from tasks.frontier import jobs
from tasks.frontier.scheduler import Scheduler
from tasks.worker.supervisor import WorkerPool
from tests.budgets import LOCAL
from tests.chaos import free_port
from tests.conftest import _services_env, wait_for
from tests.polling import wait_until
from tests.site import LocalSite, send
from tests.test_monitoring import RULES, dashboard_queries, scaling_queries
from tests.webserver import WebServer
from web import metrics
from web.models import FrontierURL, JobState, Page, URLState

ROOT = Path(__file__).resolve().parent.parent
BRANCHES = 40  # pages the seed links to, each held at the site until the test lets it go


class GatedSite(LocalSite):
    """``/`` links to ``/b/0`` .. ``/b/{BRANCHES-1}`` and to ``/missing`` (404); each branch
    page waits until ``gate`` is set, so that the crawl holds still while it is measured."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.waiting = 0
        self._lock = threading.Lock()
        super().__init__(self._handler())

    def _handler(self):
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/":
                    links = [f"/b/{i}" for i in range(BRANCHES)] + ["/missing"]
                    body = "".join(f'<a href="{href}">x</a>' for href in links)
                    send(self, 200, {}, f"<html><title>root</title>{body}</html>".encode())
                elif self.path.startswith("/b/"):
                    with site._lock:
                        site.waiting += 1
                    site.gate.wait(60)
                    with site._lock:
                        site.waiting -= 1
                    send(self, 200, {}, b"<html><title>branch</title>leaf</html>")
                else:
                    send(self, 404, {}, b"<html><title>Not found</title></html>")

        return Handler


class Prometheus:
    """``prometheus`` on a free loopback port, with its own data directory."""

    def __init__(self, config: dict, directory: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.directory = directory
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Prometheus:
        log = open(self.directory / "prometheus.log", "wb")  # noqa: SIM115 (the process's)
        self.process = subprocess.Popen(
            [shutil.which("prometheus"), f"--config.file={self.directory / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_for(self._ready, 60, "Prometheus to be ready", every=0.5)
        except BaseException:  # no ``with`` block ran: nothing else would stop it
            self.__exit__()
            raise
        return self

    def _ready(self) -> bool:
        assert self.process.poll() is None, (self.directory / "prometheus.log").read_text()
        try:
            return requests.get(self.url + "/-/ready", timeout=2).ok
        except requests.ConnectionError:
            return False

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.wait(30)

    def query(self, expr: str) -> list[dict]:
        answer = requests.get(self.url + "/api/v1/query", params={"query": expr}, timeout=10)
        assert answer.ok, (expr, answer.text)
        return answer.json()["data"]["result"]

    def value(self, expr: str, **labels: str) -> float | None:
        """The value of the series of ``expr`` with ``labels`` (None: no such series)."""
        for series in self.query(expr):
            if labels.items() <= series["metric"].items():
                return float(series["value"][1])
        return None

    def targets_up(self) -> dict[str, int]:
        return {f"{s['metric']['job']} {s['metric']['instance']}": int(float(s["value"][1]))
                for s in self.query("up")}  # fmt: skip


def scrape_config(tmp_path: Path, web: int, workers: list[int], token: str) -> dict:
    """``deploy/prometheus.yml``, pointed at this machine's ports and the test's secrets."""
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    config["global"] |= {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(RULES)]
    (tmp_path / "metrics_token").write_text(token)
    (tmp_path / "flower_password").write_text("unused")
    jobs_ = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs_) == {"web", "worker", "flower"}
    jobs_["web"]["authorization"]["credentials_file"] = str(tmp_path / "metrics_token")
    jobs_["web"]["static_configs"] = [{"targets": [f"127.0.0.1:{web}"]}]
    assert jobs_["worker"]["dns_sd_configs"][0]["port"] == 9808  # the workers' port everywhere
    del jobs_["worker"]["dns_sd_configs"]
    jobs_["worker"]["static_configs"] = [{"targets": [f"127.0.0.1:{p}" for p in workers]}]
    jobs_["flower"]["basic_auth"]["password_file"] = str(tmp_path / "flower_password")
    jobs_["flower"]["static_configs"] = [{"targets": [f"127.0.0.1:{free_port()}"]}]  # none
    return config


@pytest.fixture
def platform(transactional_db, redis, tmp_path) -> Iterator[dict]:
    """The web (gunicorn), two worker processes of two versions serving metrics, and the
    environment they share; default budgets, so that held fetches are not cut short."""
    env = {**LOCAL, **_services_env(), "METRICS_TOKEN": secrets.token_urlsafe(24)}
    ports = [free_port(), free_port()]
    pools = [
        WorkerPool(1, 2, env={**env, "CRAWL_WORKER_METRICS_PORT": str(ports[0])},
                   log_dir=tmp_path / "logs", prefix="stable"),
        WorkerPool(1, 2, env={**env, "CRAWL_WORKER_METRICS_PORT": str(ports[1]),
                              "CRAWL_VERSION": "9.9.1"}, log_dir=tmp_path / "logs", prefix="next"),
    ]  # fmt: skip
    with WebServer(env, tmp_path / "web.log") as web:
        try:
            for pool in pools:
                pool.start()
            yield {"env": env, "web": web.port, "workers": ports}
        finally:
            for pool in pools:
                pool.stop(grace=15)


def test_prometheus_answers_the_scaling_and_dashboard_queries_of_a_real_crawl(platform, tmp_path):
    if not shutil.which("prometheus"):
        pytest.skip("prometheus not installed (Debian's prometheus package; .ci/run installs it)")
    config = scrape_config(tmp_path, platform["web"], platform["workers"], platform["env"][
        "METRICS_TOKEN"])  # fmt: skip
    sched = Scheduler()
    thread = threading.Thread(target=sched.run, daemon=True)
    with GatedSite() as site, Prometheus(config, tmp_path) as prom:
        wait_for(lambda: sorted(v for t, v in prom.targets_up().items()
                                if not t.startswith("flower")) == [1, 1, 1],
                 60, "web and both workers up", every=0.5)  # fmt: skip
        job = jobs.create_job([site.url("/")], max_depth=2)
        jobs.start(job)
        thread.start()
        try:
            # Held still: every worker slot waits at the site, the rest waits in the broker
            # and the frontier. Prometheus must say what the platform says.
            wait_for(lambda: site.waiting == 4, 60, "four fetches held at the site")
            platform_says, prometheus_says = held_still(site), lambda: answers(prom)
            agreed = poll(lambda: platform_says() == prometheus_says(), 30)
            assert agreed or platform_says() == prometheus_says()
            assert platform_says()["unacked"] > 0 and platform_says()["due"] > 0
            site.gate.set()
            wait_for(lambda: finished(job), 120, "the crawl to finish", every=0.5)
        finally:
            site.gate.set()
            sched.shutdown()
            thread.join(10)
        after_the_crawl(prom, job)


def held_still(site: GatedSite):
    """What the broker, the frontier and the site say while the crawl holds still."""

    def figures() -> dict[str, float]:
        depth, due = broker.depth(), metrics.due_backlog()
        return {"unacked": depth["unacked"], "due": due,
                "backlog": depth["ready"] + depth["unacked"] + due,
                "fetching on main": site.waiting}  # fmt: skip

    return figures


def answers(prom: Prometheus) -> dict[str, float | None]:
    """The same figures from KEDA's two Prometheus queries, the adapter's backlog query and
    the dashboard's in-flight by channel."""
    inflight, due, backlog = scaling_queries()[:3]
    by_channel = next(e for e in dashboard_queries() if "crawlplatform_fetches_in_flight" in e)
    return {"unacked": prom.value(inflight), "due": prom.value(due),
            "backlog": prom.value(backlog),
            "fetching on main": prom.value(by_channel, channel="main")}  # fmt: skip


def after_the_crawl(prom: Prometheus, job) -> None:
    """Pages counted by the workers, workers by version, scheduler passes, and every panel."""
    done = Page.objects.filter(job=job).count()
    failed = FrontierURL.objects.filter(job=job, state=URLState.FAILED).count()
    assert (done, failed) == (BRANCHES + 1, 1)  # every page, and /missing
    pages = f'sum by (outcome) (crawlplatform_pages_total{{crawl_job="{job.pk}"}})'

    def counted() -> dict[str, float]:
        return {s["metric"]["outcome"]: float(s["value"][1]) for s in prom.query(pages)}

    assert poll(lambda: counted() == {"done": done, "http_4xx": failed}, 30) or counted() == {
        "done": done, "http_4xx": failed}  # fmt: skip
    workers = "max by (channel, version) (crawlplatform_workers)"
    fleet = {(s["metric"]["channel"], s["metric"]["version"]): float(s["value"][1])
             for s in prom.query(workers)}  # fmt: skip
    assert fleet == {("main", VERSION): 1, ("main", "9.9.1"): 1}
    assert prom.value("max(crawlplatform_scheduler_passes_total)") > 0
    answered = {e for e in dashboard_queries() if prom.query(e)}  # each one accepted
    for expected in (
        "rate(crawlplatform_pages_total",
        "crawlplatform_workers)",
        "crawlplatform_worker_info",
        "crawlplatform_scheduler_passes_total",
        "crawlplatform_fetch_seconds_bucket",
        "crawlplatform_worker_rss_bytes",
    ):
        assert any(expected in e for e in answered), expected


def poll(predicate, timeout: float) -> bool:
    """Whether ``predicate`` came true within ``timeout`` (the caller asserts what differs)."""
    try:
        wait_until(predicate, timeout, "", 0.5)
        return True
    except TimeoutError:
        return False


def finished(job) -> bool:
    job.refresh_from_db()
    return job.state == JobState.FINISHED
