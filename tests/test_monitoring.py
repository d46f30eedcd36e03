"""What Prometheus and Grafana are given: the alert rules (the rule file, the PrometheusRule
that repeats it, and promtool's tests of every alert), the monitors that tell the operator
what to scrape, and the dashboard, whose every query must name a metric the platform exports.

promtool comes with Debian's ``prometheus`` package (``.ci/run`` installs it); without it the
promtool test is skipped with that reason.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import tasks.worker.metrics  # noqa: F401 (registers the worker's metrics)
from tasks.frontier import jobs
from tests.test_manifests import K8S, ROOT, by_kind, documents

MONITORING = K8S / "platform" / "monitoring"
RULES = MONITORING / "alerts.rules.yml"
RULE_TESTS = MONITORING / "alerts.test.yml"
DASHBOARD = MONITORING / "crawlplatform-dashboard.json"
ADAPTER_RULES = K8S / "hpa" / "prometheus-adapter-rules.yaml"
# pages/s and errors by reason, backlog and in-flight by channel, workers by channel and
# version, ladder levels and bans, open circuits, review queue, scheduler passes, checkpoints
FLEET_VIEW = """crawlplatform_pages_total crawlplatform_retries_total
crawlplatform_channel_ready_messages crawlplatform_broker_messages crawlplatform_frontier_due_urls
crawlplatform_fetches_in_flight crawlplatform_worker_info crawlplatform_workers
crawlplatform_host_ladder_level crawlplatform_host_circuit_open crawlplatform_review_queue
crawlplatform_scheduler_passes_total crawlplatform_checkpoint_age_seconds""".split()
SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}


def rule_groups() -> list[dict]:
    return yaml.safe_load(RULES.read_text())["groups"]


def alerts() -> dict[str, dict]:
    return {r["alert"]: r for g in rule_groups() for r in g["rules"] if "alert" in r}


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p["targets"]]


def scaling_queries() -> list[str]:
    """The queries KEDA and prometheus-adapter send to Prometheus (the adapter's template
    rendered with no label matchers)."""
    scaled = by_kind("ScaledObject", "worker")["spec"]["triggers"]
    keda = [t["metadata"]["query"] for t in scaled if t["type"] == "prometheus"]
    adapter = [
        r["metricsQuery"].replace("<<.Series>>", r["seriesQuery"]).replace("<<.LabelMatchers>>", "")
        for r in documents(ADAPTER_RULES)[0]["external"]
    ]
    return keda + adapter


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bcrawlplatform_\w+", expr))


def exported(text: str) -> set[str]:
    """Every series name a Prometheus text exposition can hold, samples or not."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + s for s in SUFFIXES.get(family.type, []))
        names.update(sample.name for sample in family.samples)
    return names


@pytest.fixture
def platform_metrics(client, redis, transactional_db) -> set[str]:
    """What the web's /metrics and a worker's metrics port export."""
    web = client.get("/metrics")
    assert web.status_code == 200
    return exported(web.content.decode()) | exported(generate_latest(REGISTRY).decode())


def test_the_prometheus_rule_holds_the_rule_files_groups():
    assert by_kind("PrometheusRule", "crawlplatform")["spec"]["groups"] == rule_groups()
    compose = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    assert compose["rule_files"] == ["/etc/prometheus/alerts.rules.yml"]
    mounts = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["prometheus"]
    assert f"./{RULES.relative_to(ROOT)}:/etc/prometheus/alerts.rules.yml:ro" in mounts["volumes"]


def test_every_alert_has_a_firing_and_a_quiet_case():
    cases = [c for t in yaml.safe_load(RULE_TESTS.read_text())["tests"]
             for c in t["alert_rule_test"]]  # fmt: skip
    for name in alerts():
        expected = [bool(c["exp_alerts"]) for c in cases if c["alertname"] == name]
        assert True in expected and False in expected, name


def test_promtool_checks_the_rules_and_their_tests_pass():
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool not installed (Debian's prometheus package; .ci/run installs it)")
    for command in (["check", "rules", RULES.name], ["test", "rules", RULE_TESTS.name]):
        out = subprocess.run([promtool, *command], cwd=MONITORING, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr


def test_every_query_names_a_metric_the_platform_exports(platform_metrics):
    queries = {"alert " + name: r["expr"] for name, r in alerts().items()}
    queries |= {"dashboard: " + q: q for q in dashboard_queries()}
    queries |= {"scaling: " + q: q for q in scaling_queries()}
    for where, expr in queries.items():
        names = metric_names(expr)
        assert names, where
        assert names <= platform_metrics, (where, names - platform_metrics)


def test_no_series_has_a_label_that_prometheus_would_rename(client, redis, transactional_db):
    """Prometheus keeps ``job`` and ``instance`` for the target: a series' own ``job`` label
    would become ``exported_job``, and every query by crawl job would miss it."""
    jobs.start(jobs.create_job(["http://127.0.0.1:9/"]))
    reserved = {"job", "instance"}
    for family in text_string_to_metric_families(client.get("/metrics").content.decode()):
        for sample in family.samples:
            assert not reserved & set(sample.labels), sample
    for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        for sample in family.samples:
            assert not reserved & set(sample.labels), sample
    assert not reserved & set(tasks.worker.metrics.PAGES._labelnames)


def test_the_dashboard_shows_what_an_operator_of_the_fleet_looks_at():
    dashboard = json.loads(DASHBOARD.read_text())
    queries = " ".join(dashboard_queries())
    for metric in FLEET_VIEW:
        assert metric in queries, metric
    sources = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    assert sources == {"${datasource}"}  # whatever the Prometheus data source is called
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_dashboard_ships_to_grafana_on_kubernetes_and_in_compose():
    kustomization = documents(K8S / "platform" / "kustomization.yaml")[0]
    generator = next(g for g in kustomization["configMapGenerator"]
                     if g["name"] == "crawlplatform-dashboard")  # fmt: skip
    assert generator["files"] == [str(DASHBOARD.relative_to(K8S / "platform"))]
    assert generator["options"]["labels"] == {"grafana_dashboard": "1"}
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    grafana, prometheus = services["grafana"], services["prometheus"]
    assert grafana["profiles"] == prometheus["profiles"] == ["observability"]
    for image in (grafana["image"], prometheus["image"]):
        assert re.fullmatch(r"[\w/.-]+:v?\d+\.\d+\.\d+", image), image  # pinned
    mounted = {v.split(":")[0] for v in grafana["volumes"]}
    assert f"./{DASHBOARD.relative_to(ROOT)}" in mounted
    provider = yaml.safe_load((ROOT / "deploy" / "grafana" / "dashboards.yml").read_text())
    path = provider["providers"][0]["options"]["path"]
    assert any(v.endswith(f":{path}/{DASHBOARD.name}:ro") for v in grafana["volumes"])


def test_the_monitors_select_the_pods_and_ports_that_serve_metrics():
    service = by_kind("Service", "web")
    monitor = by_kind("ServiceMonitor", "web")["spec"]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["endpoints"][0]["port"] in {p.get("name") for p in service["spec"]["ports"]}
    assert monitor["endpoints"][0]["authorization"]["credentials"]["key"] == "METRICS_TOKEN"
    pods = by_kind("PodMonitor", "workers")["spec"]
    (selector,) = pods["selector"]["matchExpressions"]
    assert selector["key"] == "app" and selector["operator"] == "In"
    for name in ("worker", "worker-green", "render"):
        template = by_kind("Deployment", name)["spec"]["template"]
        assert template["metadata"]["labels"]["app"] in selector["values"], name
        container = template["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        port = next(p for p in container["ports"] if p["name"] == pods["podMetricsEndpoints"][0]
                    ["port"])  # fmt: skip
        assert str(port["containerPort"]) == env["CRAWL_WORKER_METRICS_PORT"], name
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(port["containerPort"]), name
    web = by_kind("Deployment", "web")["spec"]["template"]
    http = web["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert web["metadata"]["annotations"]["prometheus.io/port"] == str(http)
