"""End to end: a real 2-step SFT job of the tiny model through the scheduler, on Ray, with the
default runner ``tinker_algos.train``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tinker_core.proto import jobs_pb2
from tinker_scheduler.config import DEFAULT_RUNNER
from tinker_scheduler.testing import JobStub
from tinker_scheduler.worker import resolve_runner


def _train_available() -> bool:
    try:
        resolve_runner(DEFAULT_RUNNER)
    except (ImportError, AttributeError):
        return False
    return True


pytestmark = pytest.mark.skipif(
    not _train_available(), reason=f"{DEFAULT_RUNNER} is not importable (tinker-algos without its train entry point)"
)

DATA = [("1+1=", "2\n"), ("2+2=", "4\n"), ("3+1=", "4\n"), ("2+3=", "5\n")]


@pytest.mark.slow
def test_a_real_two_step_tiny_sft_job_runs_through_the_scheduler(make_scheduler, tmp_path):
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "completion": c}) + "\n" for p, c in DATA))
    config = {
        "name": "tiny-sft",
        "seed": 0,
        "model": {"name": "tiny", "device": "cpu"},
        "algorithm": {"name": "sft", "steps": 2, "batch_size": 4, "data": str(data)},
        "optimizer": {"name": "adamw", "lr": 0.001},
        "checkpoint": {"every": 1, "keep": 2},
        "logging": {"tensorboard": False, "plot": False},
        "resources": {"cpus": 1},
    }
    scheduler = make_scheduler(runner=DEFAULT_RUNNER, model_roots=[tmp_path])  # jobs may read the data there
    with JobStub(scheduler.address) as client:
        job = client.submit(json.dumps(config), request_id="tiny-sft")
        events = list(client.watch(job.id, timeout=300))
        final = client.get(job.id)
    states = [e.state_change.state for e in events if e.WhichOneof("event") == "state_change"]
    assert final.state == jobs_pb2.JOB_STATE_SUCCEEDED, final.reason
    assert states == [jobs_pb2.JOB_STATE_QUEUED, jobs_pb2.JOB_STATE_RUNNING, jobs_pb2.JOB_STATE_SUCCEEDED]
    assert final.reason == "completed 2 steps"
    metrics = [e.metrics for e in events if e.WhichOneof("event") == "metrics"]
    assert [m.step for m in metrics][:2] == [1, 2]
    assert all(v == v for m in metrics for v in m.values.values())  # finite numbers, no NaN
    assert any(key.startswith("losses/") for key in metrics[0].values)
    run_dir = Path(final.run_dir)
    assert run_dir == scheduler.runs_dir / "local" / job.id
    assert final.checkpoint_path.startswith(str(run_dir / "checkpoints"))
    assert Path(final.checkpoint_path).exists()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]


@pytest.mark.slow
def test_a_distributed_job_spreads_over_its_own_actors_in_the_jobs_placement_group(make_scheduler, tmp_path):
    """A GRPO job with a rollout worker and two learners: the scheduler reserves a bundle for
    each actor beside the job's own, and the job's actors take them (its placement group)."""
    from tinker_core.config import parse_config
    from tinker_scheduler.job_service import demand_of

    config = {
        "name": "tiny-dist",
        "seed": 0,
        "model": {"name": "tiny", "device": "cpu"},
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd"]}},
        "algorithm": {"name": "grpo", "steps": 2, "eval_size": 2},
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 3},
        "logging": {"tensorboard": False, "plot": False},
        "resources": {"cpus": 1},
        "execution": {"rollout_workers": 1, "learners": 2, "rollout_worker": {"num_cpus": 0.5}, "learner": {"num_cpus": 0.5}},
    }
    demand = demand_of(parse_config(config))
    assert (demand.cpus, demand.gpus) == (2.0, 0.0)
    scheduler = make_scheduler(runner=DEFAULT_RUNNER)
    with JobStub(scheduler.address) as client:
        job = client.submit(json.dumps(config), request_id="tiny-dist")
        events = list(client.watch(job.id, timeout=300))
        final = client.get(job.id)
    assert final.state == jobs_pb2.JOB_STATE_SUCCEEDED, final.reason
    metrics = [e.metrics for e in events if e.WhichOneof("event") == "metrics"]
    assert [m.step for m in metrics][:2] == [1, 2]
    assert all(m.values["sync/workers"] == 1.0 and m.values["staleness/max"] == 0.0 for m in metrics[:2])
    assert (Path(final.run_dir) / "weights" / "stage-0").is_dir()
