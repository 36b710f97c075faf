"""The Helm chart (deploy/helm/opentinker), checked offline with Helm's own engine (issue 48).

``helm lint --strict`` and ``helm template`` run through the ``helm-python-sdk`` wheel (Helm v4's
Go SDK as ``libhelm_c``, installed from PyPI by the lock's dev group: no ``helm`` binary, no
network, about 2 s to install). Every values file the chart ships renders objects that validate
strictly against the Kubernetes schemas (as the manifests in deploy/kubernetes/ do in
test_deploy.py), deploy/kubernetes/ is exactly what the chart renders (scripts/render_chart.py),
and the alerting rules pass ``promtool check rules`` and the unit tests in
data/prometheus-rules.test.yaml (promtool from Debian's ``prometheus`` package, which the
integration session installs).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "opentinker"
RULES = CHART / "files" / "prometheus-rules.yaml"
RULE_TESTS = ROOT / "integration-tests" / "data" / "prometheus-rules.test.yaml"
KUBE_VERSION = "1.31.0"
CORE_KINDS = {"Namespace", "Secret", "PersistentVolumeClaim", "Deployment", "Service", "ConfigMap"}
VALUES_FILES = [None, "values-cpu-demo.yaml", "values-gpu-cluster.yaml"]

helm_python = pytest.importorskip(
    "helm_python", reason="helm-python-sdk (Helm's engine, a dev dependency) is not installed: uv sync --locked")
spec = importlib.util.spec_from_file_location("render_chart", ROOT / "scripts" / "render_chart.py")
assert spec and spec.loader
render_chart = importlib.util.module_from_spec(spec)
spec.loader.exec_module(render_chart)


def rendered(values_file: str | None, *, release: str = "opentinker", namespace: str = "opentinker",
             **sets: Any) -> list[dict[str, Any]]:
    values = render_chart.values_of(values_file, render_chart.merge(render_chart.EXAMPLE_SETS, sets))
    texts = render_chart.render(values, release=release, namespace=namespace)
    return [doc for name, text in sorted(texts.items()) if name.endswith(".yaml") for doc in render_chart.documents(text)]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=lambda v: v or "defaults")
def test_the_chart_lints_strictly(values_file):
    assert render_chart.lint(render_chart.values_of(values_file)) == []


def test_deploy_kubernetes_is_what_the_chart_renders(capsys):
    assert render_chart.main(["--check"]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=lambda v: v or "defaults")
def test_every_values_file_renders_objects_that_validate_against_the_kubernetes_schemas(values_file):
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is a dev dependency")
    docs = rendered(values_file)
    assert {d["kind"] for d in docs} >= CORE_KINDS - {"Secret"} | {"RayCluster"}
    for doc in docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "opentinker"
        if doc["kind"] in CORE_KINDS:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    cluster = one(docs, "RayCluster")["spec"]
    groups = [("head", cluster["headGroupSpec"])] + [(g["groupName"], g) for g in cluster["workerGroupSpecs"]]
    for name, group in groups:
        assert all(isinstance(v, str) for v in group["rayStartParams"].values()), name
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name}, "template": group["template"]}
        kubernetes_validate.validate(template, KUBE_VERSION, strict=True)
        if name != "head":
            assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], name


def test_the_cpu_demo_serves_the_http_fronts_without_tls_or_keys():
    docs = rendered("values-cpu-demo.yaml")
    assert not [d for d in docs if d["kind"] == "Secret"]
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    script = container["args"][0]
    assert "--auth none" in script and "--tls-cert" not in script
    assert "--tinker-port 8080" in script and "--serve-port 8000" in script
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"grpc": 50051, "metrics": 9464,
                                                                          "tinker": 8080, "serve": 8000}
    service = one(docs, "Service")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"grpc": 50051, "metrics": 9464,
                                                                       "tinker": 8080, "serve": 8000}
    workers = one(docs, "RayCluster")["spec"]["workerGroupSpecs"]
    assert [g["groupName"] for g in workers] == ["cpu"] and workers[0]["replicas"] == 1


def test_the_gpu_cluster_gives_each_role_a_group_jobs_can_pin_actors_to():
    docs = rendered("values-gpu-cluster.yaml")
    groups = {g["groupName"]: g for g in one(docs, "RayCluster")["spec"]["workerGroupSpecs"]}
    assert set(groups) == {"cpu", "learner", "rollout"}
    for name, custom in (("learner", {"learner-node": 1}), ("rollout", {"rollout-node": 4})):
        group = groups[name]
        # KubeRay passes the string to `ray start --resources`: a JSON object, quoted once more
        assert json.loads(json.loads(group["rayStartParams"]["resources"])) == custom
        container = group["template"]["spec"]["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1" and container["image"].endswith("-cuda")
    assert "resources" not in groups["cpu"]["rayStartParams"]
    assert not groups["cpu"]["template"]["spec"]["containers"][0]["image"].endswith("-cuda")
    # the example job config in the values file's comment asks for exactly these resources
    comment = (CHART / "values-gpu-cluster.yaml").read_text()
    assert "rollout_worker: {num_gpus: 0.25, resources: {rollout-node: 1}}" in comment
    assert "learner: {num_gpus: 1, resources: {learner-node: 1}}" in comment
    assert {d["kind"] for d in docs} >= {"ServiceMonitor", "PrometheusRule", "ConfigMap"}


def test_another_release_name_and_namespace_keep_every_reference_consistent():
    docs = rendered(None, release="rl", namespace="ml-team")
    assert one(docs, "Namespace")["metadata"]["name"] == "ml-team"
    assert all(d["metadata"].get("namespace", "ml-team") == "ml-team" for d in docs)
    deployment, service = one(docs, "Deployment"), one(docs, "Service")
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "rl-scheduler"
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["RAY_ADDRESS"] == "rl-ray-head-svc.ml-team.svc.cluster.local:6379"
    assert one(docs, "RayCluster")["metadata"]["name"] == "rl-ray"
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    mounted = {v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v}
    assert mounted == claims == {"rl-runs", "rl-db"}
    monitor = one(docs, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    rules = [r for g in one(docs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    down = next(r for r in rules if r["alert"] == "OpenTinkerSchedulerDown")
    assert 'service="rl-scheduler"' in down["expr"]


def test_existing_claims_and_a_filled_in_tls_pair_are_used_as_given():
    docs = rendered(None, storage={"runs": {"existingClaim": "shared-nfs"}, "db": {"existingClaim": "fast-ssd"}},
                    tls={"cert": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"})
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v} == {"shared-nfs", "fast-ssd"}
    tls = next(d for d in docs if d["kind"] == "Secret" and d["type"] == "kubernetes.io/tls")
    assert tls["stringData"]["tls.crt"].startswith("-----BEGIN CERTIFICATE-----\nMIIB")


def test_the_prometheus_rule_carries_the_rules_file_and_the_dashboard_its_json():
    docs = rendered(None)
    assert one(docs, "PrometheusRule")["spec"] == yaml.safe_load(RULES.read_text())
    dashboard = json.loads(one(docs, "ConfigMap")["data"]["opentinker-dashboard.json"])
    assert dashboard == json.loads((CHART / "files" / "opentinker-dashboard.json").read_text())


def test_promtool_checks_the_rules_and_passes_their_unit_tests():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is missing (Debian's prometheus package; `uv run nox -s integration` installs it)")
    for command in ([promtool, "check", "rules", str(RULES)], [promtool, "test", "rules", str(RULE_TESTS)]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{' '.join(command[1:3])}:\n{done.stdout}{done.stderr}"
    # every rule of the file has a unit test
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert alerts == tested, f"rules without a promtool test: {sorted(alerts - tested)}"


@pytest.mark.parametrize(("sets", "words"), [
    ({"scheduler": {"auth": "requred"}}, "auth"),
    ({"ray": {"workerGroups": [{"name": "GPU", "replicas": 1, "minReplicas": 0, "maxReplicas": 2,
                                "resources": {}, "shmSize": "1Gi"}]}}, "name"),
    ({"scheduler": {"ports": {"grpc": 70000, "metrics": 9464}}}, "grpc"),
    ({"monitoring": {"enabeld": True}}, "enabeld"),
])
def test_a_bad_value_is_refused_naming_it(sets, words):
    """values.schema.json: Helm refuses the values before rendering anything."""
    with pytest.raises(Exception) as caught:
        rendered(None, **sets)
    assert words in str(caught.value)
