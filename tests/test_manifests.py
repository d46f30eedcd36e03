"""Deployment files checked without a cluster: schemas, and numbers that must agree.

Kubernetes resources validate against the schemas in ``kubernetes-validate``, the KEDA
resources against the KEDA CRDs and ``docker-compose.yml`` against the Compose schema, both
vendored in ``tests/schemas/`` (see its README for source and licence).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from django.conf import settings

from crawlplatform.celery import app
from tasks import broker
from tasks.defaults import setting
from tasks.frontier import channels

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = Path(__file__).resolve().parent / "schemas"
K8S = ROOT / "k8s"


OPERATOR_GROUPS = {"keda.sh", "monitoring.coreos.com"}  # CRDs: checked by the tests below


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kustomization_resources(directory: Path) -> list[Path]:
    """Every resource file a kustomization pulls in, following nested kustomizations."""
    files = []
    for entry in documents(directory / "kustomization.yaml")[0]["resources"]:
        target = (directory / entry).resolve()
        files += kustomization_resources(target) if target.is_dir() else [target]
    return files


def manifests() -> list[tuple[Path, dict]]:
    files = set(kustomization_resources(K8S)) | set(kustomization_resources(K8S / "hpa"))
    files |= set(kustomization_resources(K8S / "channels" / "green"))
    files |= set(kustomization_resources(K8S / "channels" / "green" / "hpa"))
    return [(f, d) for f in sorted(files) for d in documents(f)]


def by_kind(kind: str, name: str) -> dict:
    return next(d for _, d in manifests() if d["kind"] == kind and d["metadata"]["name"] == name)


def crd_schema(filename: str) -> dict:
    crd = documents(SCHEMAS / "keda" / filename)[0]
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize(
    ("path", "doc"),
    [m for m in manifests() if m[1]["apiVersion"].split("/")[0] not in OPERATOR_GROUPS],
    ids=lambda v: v.name if isinstance(v, Path) else v["kind"],
)
def test_kubernetes_manifests_validate(path, doc):
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_keda_scaled_object_validates_against_the_crd():
    scaled = by_kind("ScaledObject", "worker")
    jsonschema.validate(scaled, crd_schema("keda.sh_scaledobjects.yaml"))


def test_keda_logs_in_to_redis_with_the_platforms_secret():
    auth = by_kind("TriggerAuthentication", "redis-auth")
    jsonschema.validate(auth, crd_schema("keda.sh_triggerauthentications.yaml"))
    ref = auth["spec"]["secretTargetRef"][0]
    assert (ref["name"], ref["key"]) == ("crawlplatform-secrets", "REDIS_PASSWORD")
    scaled = by_kind("ScaledObject", "worker")
    redis_triggers = [t for t in scaled["spec"]["triggers"] if t["type"] == "redis"]
    assert all(t["authenticationRef"]["name"] == "redis-auth" for t in redis_triggers)


def test_the_secret_comes_from_an_uncommitted_file_that_names_every_key():
    generator = documents(K8S / "platform" / "kustomization.yaml")[0]["secretGenerator"][0]
    assert generator["name"] == "crawlplatform-secrets" and generator["envs"] == ["secrets.env"]
    assert "k8s/platform/secrets.env" in (ROOT / ".gitignore").read_text().split()
    examples = "\n".join(f.read_text() for f in K8S.rglob("secrets.env.example"))
    keys = {line.split("=", 1)[0] for line in examples.splitlines() if "=" in line}
    text = "".join(f.read_text() for f in K8S.rglob("*.yaml"))
    used = set(re.findall(r"key: ([A-Z][A-Z0-9_]*)\b", text))  # a Secret's keys: upper case
    assert used <= keys, used - keys


def test_compose_file_validates_against_the_compose_spec():
    schema = json.loads((SCHEMAS / "compose" / "compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)  # the Compose spec is draft-07
    validator.validate(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


def test_keda_counts_the_lists_celery_creates_plus_in_flight_plus_due():
    scaled = by_kind("ScaledObject", "worker")
    redis_lists = [t["metadata"]["listName"] for t in scaled["spec"]["triggers"]
                   if t["type"] == "redis"]  # fmt: skip
    assert redis_lists == broker.priority_lists(settings.CRAWL_QUEUE)
    formula = scaled["spec"]["advanced"]["scalingModifiers"]["formula"]
    names = [t["name"] for t in scaled["spec"]["triggers"]]
    assert sorted(re.findall(r"\w+", formula)) == sorted(names)  # every trigger summed once
    inflight = next(t for t in scaled["spec"]["triggers"] if t["name"] == "inflight")
    assert 'state="unacked"' in inflight["metadata"]["query"]
    due = next(t for t in scaled["spec"]["triggers"] if t["name"] == "due")
    assert "crawlplatform_frontier_due_urls" in due["metadata"]["query"]


def test_a_second_channel_consumes_and_scales_on_its_own_queue():
    main = by_kind("Deployment", "worker")["spec"]["template"]["spec"]["containers"][0]
    pod = by_kind("Deployment", "worker-green")["spec"]["template"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CRAWL_CHANNEL"] == "green" and "--queues" not in container["command"]
    kustomization = documents(K8S / "channels" / "green" / "kustomization.yaml")[0]
    assert env["CRAWL_VERSION"] == kustomization["images"][0]["newTag"]
    assert pod["metadata"]["labels"]["egress"] == "fetch"  # the workers' egress policy
    assert pod["spec"]["terminationGracePeriodSeconds"] == by_kind("Deployment", "worker")[
        "spec"]["template"]["spec"]["terminationGracePeriodSeconds"]  # fmt: skip
    assert container["livenessProbe"] == main["livenessProbe"]
    scaled = by_kind("ScaledObject", "worker-green")
    jsonschema.validate(scaled, crd_schema("keda.sh_scaledobjects.yaml"))
    assert scaled["spec"]["scaleTargetRef"]["name"] == "worker-green"
    lists = [t["metadata"]["listName"] for t in scaled["spec"]["triggers"]]
    assert lists == broker.priority_lists(channels.queue("green"))
    hpa = by_kind("HorizontalPodAutoscaler", "worker-green")["spec"]
    assert hpa["scaleTargetRef"]["name"] == "worker-green"
    metric = hpa["metrics"][0]["external"]["metric"]
    assert metric["selector"]["matchLabels"] == {"channel": "green"}
    rules = documents(K8S / "hpa" / "prometheus-adapter-rules.yaml")[0]["external"]
    assert metric["name"] in {r["name"]["as"] for r in rules}


def test_render_workers_consume_their_queue_and_scale_on_it():
    scaled = by_kind("ScaledObject", "render")
    jsonschema.validate(scaled, crd_schema("keda.sh_scaledobjects.yaml"))
    redis_lists = [t["metadata"]["listName"] for t in scaled["spec"]["triggers"]]
    assert redis_lists == broker.priority_lists(settings.RENDER_QUEUE)
    assert all(t["authenticationRef"]["name"] == "redis-auth" for t in scaled["spec"]["triggers"])
    pod = by_kind("Deployment", "render")["spec"]["template"]
    container = pod["spec"]["containers"][0]
    command = " ".join(container["command"])
    assert "--queues render" in command and container["image"] == "crawlplatform-render"
    assert pod["metadata"]["labels"]["egress"] == "fetch"  # the workers' egress policy
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["render"]
    assert "render" in compose["command"] and compose["build"]["target"] == "render"
    assert "FROM base AS render" in (ROOT / "Dockerfile").read_text()
    budget = app.conf.worker_soft_shutdown_timeout
    for grace in (
        pod["spec"]["terminationGracePeriodSeconds"],
        seconds(compose["stop_grace_period"]),
    ):
        assert grace > budget


def seconds(value: str) -> float:
    return float(value.rstrip("s"))


def test_grace_periods_cover_the_shutdown_budget_and_time_limits():
    worker = by_kind("Deployment", "worker")["spec"]["template"]["spec"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["worker"]
    budget = app.conf.worker_soft_shutdown_timeout
    for grace in (worker["terminationGracePeriodSeconds"], seconds(compose["stop_grace_period"])):
        assert grace > budget > app.conf.task_time_limit > setting("FETCH_DEADLINE_S")
    assert app.conf.broker_transport_options["visibility_timeout"] > app.conf.task_time_limit
    assert app.conf.broker_transport_options["visibility_timeout"] > setting("DB_RETRY_S")


def test_worker_container_receives_sigterm_itself():
    container = by_kind("Deployment", "worker")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][0] == "celery"  # exec form: no shell between kubelet and Celery
    assert 'ENTRYPOINT ["tini", "--"]' in (ROOT / "Dockerfile").read_text()  # forwards signals


def test_redis_keeps_messages_and_never_evicts():
    k8s = by_kind("StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]["args"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["redis"]
    for args in (k8s, compose["command"]):
        joined = " ".join(args)
        assert "--appendonly yes" in joined and "--maxmemory-policy noeviction" in joined


def test_scale_down_is_slower_than_scale_up():
    for behavior in (by_kind("ScaledObject", "worker")["spec"]["advanced"]
                     ["horizontalPodAutoscalerConfig"]["behavior"],
                     by_kind("HorizontalPodAutoscaler", "worker")["spec"]["behavior"]):  # fmt: skip
        assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 300


def test_alerts_cover_backlog_idle_workers_errors_checkpoints_and_the_fleet():
    rule = by_kind("PrometheusRule", "crawlplatform")
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(rules) == {"CrawlBacklogNotDraining", "NoWorkersConsuming", "CrawlErrorRateSpike",
                          "CrawlCheckpointTooOld", "CrawlReviewQueueGrowing",
                          "CanaryRolledBack", "CrawlWorkersDown", "CrawlSchedulerNoLeader",
                          "CrawlBacklogGrowingWorkersIdle", "CrawlHostCircuitOpenLong",
                          "CrawlWorkerMemoryGrowing"}  # fmt: skip
    exported = (ROOT / "web" / "metrics.py").read_text() + (
        ROOT / "tasks" / "worker" / "metrics.py"
    ).read_text()
    for r in rules.values():
        assert r["for"] and r["labels"]["severity"] and r["annotations"]["summary"]
        for name in re.findall(r"crawlplatform_\w+", r["expr"]):
            assert name.removesuffix("_total") in exported, name


def test_checkov_passes_on_k8s_with_each_skip_justified():
    checkov = os.environ.get("CHECKOV_BIN") or shutil.which("checkov")
    if not checkov:
        pytest.skip("checkov not installed (.ci/run installs it in .venv-checkov)")
    offline = ["unshare", "--net"] if shutil.which("unshare") and os.geteuid() == 0 else []
    out = subprocess.run(
        [*offline, checkov, "-d", "k8s", "--framework", "kubernetes", "--config-file",
         ".checkov.yaml", "-o", "json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    report = json.loads(out.stdout)
    report = report[0] if isinstance(report, list) else report
    failed = [(f["check_id"], f["resource"]) for f in report["results"]["failed_checks"]]
    assert failed == []
    for skipped in report["results"]["skipped_checks"]:  # annotation skips carry a reason
        assert skipped["check_result"].get("suppress_comment"), skipped["check_id"]


def rendered(overlay: str, tmp_path: Path) -> list[dict]:
    """What ``kubectl kustomize`` makes of ``k8s/OVERLAY``, with the example secrets filled in."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("kubectl not installed")
    copy = tmp_path / "k8s"
    if not copy.exists():
        shutil.copytree(K8S, copy)
        for example in copy.rglob("secrets.env.example"):
            shutil.copy(example, example.with_suffix(""))
    out = subprocess.run([kubectl, "kustomize", str(copy / overlay)], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


CRDS = {"ScaledObject": "keda.sh_scaledobjects.yaml",
        "TriggerAuthentication": "keda.sh_triggerauthentications.yaml"}  # fmt: skip


def test_the_rabbitmq_overlay_brokers_every_role_and_scales_on_its_queues(tmp_path):
    docs = rendered("rabbitmq", tmp_path) + rendered("rabbitmq/green", tmp_path)
    for doc in docs:
        group = doc["apiVersion"].split("/")[0]
        if group == "keda.sh":
            jsonschema.validate(doc, crd_schema(CRDS[doc["kind"]]))
        elif group not in OPERATOR_GROUPS:
            kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    roles = {"worker", "worker-green", "render", "scheduler", "web", "beat", "flower"}
    assert {d["metadata"]["name"] for d in deployments} == roles
    for deployment in deployments:
        sources = deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"]
        assert {"secretRef": {"name": "crawlplatform-rabbitmq"}} in sources
    example = (K8S / "rabbitmq" / "secrets.env.example").read_text()
    assert "\nCELERY_BROKER_URL=amqp://" in example
    assert "k8s/rabbitmq/secrets.env" in (ROOT / ".gitignore").read_text().split()
    scaled = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ScaledObject"}
    queues = {"worker": channels.queue("main"), "render": settings.RENDER_QUEUE,
              "worker-green": channels.queue("green")}  # fmt: skip
    assert set(scaled) == set(queues)
    for name, queue in queues.items():
        trigger = next(t for t in scaled[name]["spec"]["triggers"] if t["type"] == "rabbitmq")
        # over the management API the length is ready + unacknowledged
        assert trigger["metadata"]["queueName"] == queue
        assert trigger["metadata"]["protocol"] == "http"
        assert trigger["authenticationRef"]["name"] == "rabbitmq-auth"
    egress = next(d for d in docs if d["metadata"]["name"] == "worker-egress")["spec"]["egress"]
    assert {"to": [{"podSelector": {"matchLabels": {"app": "rabbitmq"}}}],
            "ports": [{"port": 5672}]} in egress  # fmt: skip


def test_compose_runs_rabbitmq_as_a_profile_and_passes_the_broker_url_to_every_role():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert services["rabbitmq"]["profiles"] == ["rabbitmq"]
    assert "management" in services["rabbitmq"]["image"]
    for name in ("web", "worker", "worker-green", "render", "scheduler", "beat", "flower"):
        assert "CELERY_BROKER_URL" in services[name]["environment"], name


def test_no_image_is_left_to_a_moving_tag():
    """Images are pinned to versions everywhere (kustomizations set the platform's tags)."""
    for path in [*K8S.rglob("*.yaml"), ROOT / "docker-compose.yml"]:
        text = path.read_text()
        assert not re.search(r"newTag:\s*latest|image:\s*\S+:latest\b", text), path


def test_the_compose_env_helper_fills_every_secret_compose_requires():
    required = set(re.findall(r"\$\{(\w+):\?", (ROOT / "docker-compose.yml").read_text()))
    for local in (False, True):
        command = ["python3", "deploy/env.py", *(["--local"] if local else [])]
        made = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout  # fmt: skip
        values = dict(line.split("=", 1) for line in made.splitlines()
                      if "=" in line and not line.startswith("#"))  # fmt: skip
        assert required and all(len(values.get(name, "")) >= 40 for name in required), required
        assert values["SECURE_SSL_REDIRECT"] == ("false" if local else "true")
    again = subprocess.run(["python3", "deploy/env.py"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout  # fmt: skip
    assert again != made  # new secrets each time


def test_every_path_the_docs_name_exists():
    """A path in README.md or docs/ names a file of this repository (or one the reader makes
    from its ``.example``)."""
    cited = r"`((?:k8s|docs|tasks|web|benchmarks|deploy|tests|crawlplatform)/[\w./-]+)`"
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for path in re.findall(cited, doc.read_text()):
            path = path.rstrip(".")
            made = (ROOT / f"{path}.example").exists()
            assert (ROOT / path).exists() or made, f"{doc.name} names {path}, which is not here"
