"""A shared LoRA model host on the GPU: two jobs train on one copy of the base model in CUDA
memory, in the host's process and through the scheduler (a Ray actor that holds a GPU).

Marked ``gpu``: without a CUDA device every test here is skipped with the reason below;
``scripts/gpu_check.sh`` runs them (``pytest -m gpu``) on a GPU machine.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest
import torch

import tinker_core.registry
from tinker_algos.records.metrics import is_timing, read_metrics
from tinker_scheduler.model_host import ModelHost

GPU_SKIP_REASON = "needs a CUDA device (run scripts/gpu_check.sh on a GPU machine)"

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=GPU_SKIP_REASON)]

STEPS = 3


@pytest.fixture(autouse=True)
def _plugins(monkeypatch):
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos,tinker-env-echo")
    tinker_core.registry.reset_plugins()
    yield
    tinker_core.registry.reset_plugins()


def gpu_lora_job(seed: int) -> dict:
    return {
        "name": f"gpu-{seed}",
        "seed": seed,
        "model": {"name": "tiny", "device": "cuda"},
        "lora": {"rank": 4, "alpha": 8},
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd", "ef"]}},
        "algorithm": {"name": "grpo", "steps": STEPS, "eval_size": 4, "eval_every": 0},
        "rollout": {"prompts_per_step": 3, "group_size": 4, "max_new_tokens": 4, "stop": ["\n"]},
        "optimizer": {"lr": 0.003},
        "checkpoint": {"every": 2, "keep": 2},
        "logging": {"tensorboard": False, "plot": False},
    }


def assert_every_step_once_and_finite(run_dir: Path) -> None:
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1)), rows
    for row in rows:
        bad = {k: v for k, v in row.items() if isinstance(v, float) and not is_timing(k) and not math.isfinite(v)}
        assert not bad, (row["step"], bad)


def run_on_host(host: ModelHost, jobs: dict[str, tuple[dict, Path]]) -> dict[str, dict]:
    """Run the jobs at once on the host, draining and acknowledging their reports as the
    scheduler does (a job waits at each checkpoint until its reports are acknowledged)."""
    results: dict[str, dict] = {}
    seen: dict[str, int] = {}
    done = threading.Event()

    def drain() -> None:
        while not done.wait(0.02):
            for job_id in host.job_ids():
                events = host.drain_job(job_id, seen.get(job_id, 0))
                if events:
                    seen[job_id] = events[-1]["seq"]

    def run(job_id: str, config: dict, run_dir: Path) -> None:
        results[job_id] = host.run_job(job_id, "tinker_algos.train", config, str(run_dir))

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    threads = [threading.Thread(target=run, args=(jid, cfg, rd)) for jid, (cfg, rd) in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    done.set()
    drainer.join()
    return results


def test_two_lora_jobs_share_one_base_model_on_the_gpu(tmp_path):
    host = ModelHost("tiny", device="cuda")
    try:
        assert host.load_error is None, host.load_error
        assert host.policy.device.type == "cuda"
        jobs = {jid: (gpu_lora_job(seed), tmp_path / jid) for jid, seed in (("a", 1), ("b", 2))}
        results = run_on_host(host, jobs)
        assert {jid: r["status"] for jid, r in results.items()} == {"a": "completed", "b": "completed"}, results
        turns = [sid for sid in host.served if sid.startswith("job:")]
        assert len(set(turns)) == 2 and any(x != y for x, y in zip(turns, turns[1:], strict=False)), turns
        for jid in jobs:
            assert_every_step_once_and_finite(tmp_path / jid)
        assert host.policy.adapter_names == []  # both adapters unloaded, the base model stays
        assert {p.device.type for p in host.policy.model.parameters()} == {"cuda"}
    finally:
        host.close()


@pytest.mark.slow
def test_the_scheduler_puts_two_gpu_lora_jobs_on_one_host_that_holds_the_gpu(make_scheduler):
    from tinker_core.proto import jobs_pb2
    from tinker_scheduler.config import DEFAULT_RUNNER
    from tinker_scheduler.testing import JobStub

    scheduler = make_scheduler(runner=DEFAULT_RUNNER, host_idle_timeout_s=0.5)
    logs: dict[str, list[str]] = {}
    with JobStub(scheduler.address) as client:
        ids = {
            name: client.submit(json.dumps({**gpu_lora_job(seed), "resources": {"cpus": 1, "gpus": 1}})).id
            for name, seed in (("x", 11), ("y", 12))
        }
        for name, job_id in ids.items():
            events = list(client.watch(job_id, timeout=300))
            logs[name] = [e.log.text for e in events if e.WhichOneof("event") == "log"]
            final = client.get(job_id)
            assert final.state == jobs_pb2.JOB_STATE_SUCCEEDED, (name, final.reason, logs[name][-20:])
    pids = {name: next(t.split("pid ")[1].split(",")[0] for t in lines if t.startswith("job started")) for name, lines in logs.items()}
    assert pids["x"] == pids["y"]  # one host process (and one copy of the model on the GPU) for both
    assert all(any("on a shared model host" in t for t in logs[n]) for n in ids)
    for job_id in ids.values():
        assert_every_step_once_and_finite(scheduler.runs_dir / "local" / job_id)
