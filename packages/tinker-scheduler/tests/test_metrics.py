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


def test_held_out_falls_are_counted_in_a_row_and_reset_by_a_rise(store):
    metrics = SchedulerMetrics(store)
    a = submit(store, "alice")
    key = f'opentinker_job_eval_consecutive_falls{{job="{a}",metric="accuracy",tenant="alice"}}'
    seen = []
    for score in (0.5, 0.4, 0.4, 0.3, 0.2, 0.6, 0.1):  # an equal score (a resumed step) is neither
        metrics.observe_metrics(a, {"eval/accuracy": score})
        seen.append(samples(metrics)[key])
    assert seen == [0, 1, 1, 2, 3, 0, 1]
    metrics.observe_metrics(a, {"env/reward_mean": 0.0})  # a step without an evaluation changes nothing
    assert samples(metrics)[key] == 1
    assert samples(metrics)[f'opentinker_job_eval_score{{job="{a}",metric="accuracy",tenant="alice"}}'] == 0.1


def test_a_job_s_clock_starts_when_it_starts_and_moves_with_each_step(store, monkeypatch):
    import tinker_scheduler.metrics as module

    metrics = SchedulerMetrics(store)
    a = submit(store, "alice")
    key = f'opentinker_job_last_step_timestamp_seconds{{job="{a}",tenant="alice"}}'
    monkeypatch.setattr(module.time, "time", lambda: 1000.0)
    metrics.job_started(a)
    assert samples(metrics)[key] == 1000.0
    monkeypatch.setattr(module.time, "time", lambda: 1060.0)
    metrics.observe_metrics(a, {"losses/total": 1.0})
    assert samples(metrics)[key] == 1060.0


def test_host_memory_comes_from_the_cgroup_limit_when_set_else_the_machine(tmp_path):
    from tinker_scheduler import host_memory

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemFree:  1 kB\nMemAvailable:   12000000 kB\n")
    v2 = tmp_path / "cgroup"
    v2.mkdir()
    (v2 / "memory.max").write_text("4294967296\n")
    (v2 / "memory.current").write_text("3000000000\n")
    (v2 / "memory.stat").write_text("anon 1\ninactive_file 1000000000\n")
    assert host_memory.read(v2, meminfo) == (2_000_000_000, 4294967296)  # working set, the pod's limit
    (v2 / "memory.max").write_text("max\n")  # no limit: the machine's
    assert host_memory.read(v2, meminfo) == (4_000_000 * 1024, 16_000_000 * 1024)
    assert host_memory.read(tmp_path / "none", tmp_path / "none") is None


def test_hosts_of_running_jobs_are_shown_until_their_jobs_stop(store):
    metrics = SchedulerMetrics(store)
    a = submit(store, "alice")
    metrics.observe_host(a, {"name": "ray-worker-0", "used": 9.0e9, "limit": 1.0e10})
    text = generate_latest(metrics.registry).decode()
    assert 'opentinker_host_memory_used_bytes{host="ray-worker-0"} 9e+09' in text
    assert 'opentinker_host_memory_limit_bytes{host="ray-worker-0"} 1e+10' in text
    metrics.job_stopped(a)
    assert "ray-worker-0" not in generate_latest(metrics.registry).decode()
