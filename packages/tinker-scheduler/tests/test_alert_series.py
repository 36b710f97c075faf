"""Every series the alerting rules read is on a live scheduler's /metrics while a job runs, with the
values the training alerts test: held-out falls counted, the last step's time, host memory, totals.

The rules live in the Helm chart (deploy/helm/opentinker/files/prometheus-rules.yaml); the scrape
is parsed with prometheus_client's own text parser.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tinker_core.handshake import WIRE_VERSION
from tinker_scheduler.testing import JobStub, job_config_text

RULES = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "opentinker" / "files" / "prometheus-rules.yaml"
#: Series the rules read that other exporters provide: Prometheus itself, the NVIDIA DCGM exporter.
EXTERNAL = {"up", "DCGM_FI_DEV_GPU_UTIL"}


def rule_series() -> set[str]:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    names: set[str] = set()
    for rule in rules:
        expr = re.sub(r'"[^"]*"', '""', rule["expr"])  # label values are not series names
        names |= {n for n in re.findall(r"\b(opentinker_[a-z_]+|DCGM_[A-Z_]+)\b", expr)}
    return names


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, []).append((sample.labels, sample.value))
    return series


def test_the_rules_read_only_series_a_live_scheduler_exports_while_a_job_runs(make_scheduler):
    if not RULES.is_file():
        pytest.skip("the Helm chart is not beside this package (a source checkout has it)")
    wanted = rule_series()
    assert {"opentinker_job_eval_consecutive_falls", "opentinker_job_last_step_timestamp_seconds",
            "opentinker_host_memory_used_bytes", "opentinker_host_memory_limit_bytes",
            "opentinker_jobs_finished_total", "opentinker_resources_total"} <= wanted
    scheduler = make_scheduler(metrics_port=0)
    # held-out accuracy 0.9, 0.8, 0.7, 0.6: three falls in a row, then the job keeps stepping
    config = job_config_text(steps=10_000, step_s=0.05, eval_scores=[0.9, 0.8, 0.7, 0.6], rollout_errors=1)
    with JobStub(scheduler.address) as client:
        job = client.submit(config)
        deadline = time.monotonic() + 60
        while True:
            series = scrape(scheduler.metrics_port)
            falls = {s[0]["metric"]: s[1] for s in series.get("opentinker_job_eval_consecutive_falls", [])}
            if falls.get("accuracy") == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        client.cancel(job.id)
        client.wait(job.id)
    assert falls == {"accuracy": 3, "reward_mean": 3}, falls
    missing = {name for name in wanted - EXTERNAL if name not in series}
    assert not missing, f"the rules read series the scheduler does not export: {sorted(missing)}"
    labels, score = series["opentinker_job_eval_score"][0]
    assert labels["job"] == job.id and labels["tenant"] and score == pytest.approx(0.6)
    (labels, stamp), = series["opentinker_job_last_step_timestamp_seconds"]
    assert labels["job"] == job.id and time.time() - 30 < stamp <= time.time()
    used = {labels["host"]: value for labels, value in series["opentinker_host_memory_used_bytes"]}
    limit = {labels["host"]: value for labels, value in series["opentinker_host_memory_limit_bytes"]}
    assert used and used.keys() == limit.keys() and all(0 < used[h] < limit[h] for h in used)
    finished = {labels["state"] for labels, _ in series["opentinker_jobs_finished_total"]}
    assert finished >= {"FAILED", "SUCCEEDED", "CANCELLED"}  # 0 from the start: increase() sees the first
    totals = {labels["resource"]: value for labels, value in series["opentinker_resources_total"]}
    assert totals["cpus"] >= 1 and "gpus" in totals
    (info, one), = series["opentinker_build_info"]
    assert one == 1 and info["wire"] == WIRE_VERSION


def test_the_job_series_leave_with_the_job(make_scheduler):
    scheduler = make_scheduler(metrics_port=0)
    with JobStub(scheduler.address) as client:
        job = client.submit(job_config_text(steps=3, eval_scores=[0.5, 0.4]))
        client.wait(job.id)
    series = scrape(scheduler.metrics_port)
    for name in ("opentinker_job_eval_score", "opentinker_job_eval_consecutive_falls",
                 "opentinker_job_last_step_timestamp_seconds"):
        assert not any(labels.get("job") == job.id for labels, _ in series.get(name, [])), name
