"""Per-job series on the scheduler's Prometheus endpoint: reward, loss, tokens/s and step time,
labelled with the job and its tenant, present while the job runs."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from tinker_scheduler.metrics import SchedulerMetrics
from tinker_scheduler.store import JobStore, NewJob


@pytest.fixture
def store(tmp_path):
    s = JobStore(tmp_path / "jobs.db")
    yield s
    s.close()


def submit(store: JobStore, tenant: str) -> str:
    job, _ = store.submit(NewJob(
        tenant=tenant, name="job", priority=0, config_text="algorithm: {name: sft}\n", config_format=1,
        config_json="{}", cpus=1.0, gpus=0.0, memory_gb=0.0, runs_dir="/runs",
    ))
    return job.id


def samples(metrics: SchedulerMetrics) -> dict[str, float]:
    out = {}
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith("opentinker_job_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_a_running_job_reports_reward_loss_throughput_and_step_time_with_job_and_tenant_labels(store):
    metrics = SchedulerMetrics(store)
    a, b = submit(store, "alice"), submit(store, "bob")
    metrics.observe_metrics(a, {"env/reward_mean": 0.25, "losses/total": 1.5, "rollout/tokens_per_s": 300.0,
                                "time/step_s": 0.5, "optim/grad_norm": 2.0})
    metrics.observe_metrics(a, {"env/reward_mean": 0.75})  # the last value is shown
    metrics.observe_metrics(b, {"losses/total": 0.1, "train/tokens_per_s": 40.0})
    got = samples(metrics)
    assert got[f'opentinker_job_reward{{job="{a}",tenant="alice"}}'] == 0.75
    assert got[f'opentinker_job_loss{{job="{a}",tenant="alice"}}'] == 1.5
    assert got[f'opentinker_job_tokens_per_second{{job="{a}",tenant="alice"}}'] == 300.0
    assert got[f'opentinker_job_step_seconds{{job="{a}",tenant="alice"}}'] == 0.5
    assert got[f'opentinker_job_loss{{job="{b}",tenant="bob"}}'] == 0.1
    assert got[f'opentinker_job_tokens_per_second{{job="{b}",tenant="bob"}}'] == 40.0
    assert not any(f'job="{b}"' in k for k in got if k.startswith("opentinker_job_reward"))  # b never reported one


def test_a_stopped_job_leaves_the_endpoint(store):
    metrics = SchedulerMetrics(store)
    a, b = submit(store, "alice"), submit(store, "alice")
    for job in (a, b):
        metrics.observe_metrics(job, {"env/reward_mean": 1.0, "time/step_s": 0.1})
    metrics.job_stopped(a)
    got = samples(metrics)
    assert not any(f'job="{a}"' in k for k in got)
    assert got[f'opentinker_job_reward{{job="{b}",tenant="alice"}}'] == 1.0
