"""Recovery with the real runner and real checkpoints: a job whose newest checkpoint was damaged
before the scheduler restarted resumes from the newest intact one and ends as if never stopped.

The job's first attempt is the real ``tinker_algos.train`` run in this process into the job's run
directory, stopped after a few steps and left RUNNING in the job store -- what a scheduler killed
mid-run leaves behind (deterministically, without racing a kill against training). Its newest
checkpoint then gets a flipped byte in its weights, and a scheduler started on that job store
re-queues the job and runs it to the end on a Ray worker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tinker_algos import train
from tinker_algos.records.metrics import is_timing, read_metrics
from tinker_core.config import parse_config
from tinker_core.proto import jobs_pb2
from tinker_scheduler.config import DEFAULT_RUNNER
from tinker_scheduler.job_records import NewJob
from tinker_scheduler.store import JobState, JobStore
from tinker_scheduler.testing import JobStub

DATA = [("1+1=", "2\n"), ("2+2=", "4\n"), ("3+1=", "4\n"), ("2+3=", "5\n")]
STEPS = 5


class StopAfter:
    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def on_metrics(self, step: int, metrics: dict) -> None:
        self.seen = step

    def should_stop(self) -> bool:
        return self.seen >= self.n


def rows(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_timing(k)} for r in read_metrics(run_dir / "metrics.jsonl")]


@pytest.mark.slow
def test_a_restarted_job_skips_its_damaged_newest_checkpoint(make_scheduler, tmp_path):
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "completion": c}) + "\n" for p, c in DATA))
    config = {
        "name": "tiny-sft",
        "seed": 0,
        "model": {"name": "tiny", "device": "cpu"},
        "algorithm": {"name": "sft", "steps": STEPS, "batch_size": 4, "data": str(data)},
        "optimizer": {"name": "adamw", "lr": 0.001},
        "checkpoint": {"every": 1, "keep": 3},
        "logging": {"tensorboard": False, "plot": False},
        "resources": {"cpus": 1},
    }
    reference = train(config, run_dir=tmp_path / "reference")  # never stopped
    assert reference.status == "completed"

    db, runs = tmp_path / "jobs.db", tmp_path / "runs"
    store = JobStore(db)
    job, _ = store.submit(NewJob(
        tenant="local", name="tiny-sft", priority=0, config_text=json.dumps(config),
        config_format=jobs_pb2.CONFIG_FORMAT_JSON, config_json=parse_config(config).model_dump_json(),
        cpus=1.0, gpus=0.0, memory_gb=0.0, runs_dir=str(runs),
    ))
    assert store.transition(job.id, JobState.RUNNING, "started", expect=[JobState.QUEUED]) is not None
    store.close()
    run_dir = Path(job.run_dir)
    first = train(config, run_dir=run_dir, callbacks=StopAfter(3))
    assert first.status == "interrupted" and first.step == 3
    newest = run_dir / "checkpoints" / "step-000003"
    weights = newest / "trainer" / "model" / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    weights.write_bytes(bytes(blob))

    scheduler = make_scheduler(runner=DEFAULT_RUNNER, db=db, runs_dir=runs)
    with JobStub(scheduler.address) as client:
        final = client.wait(job.id, timeout=300)
        events = list(client.watch(job.id))
    assert final.state == jobs_pb2.JOB_STATE_SUCCEEDED, final.reason
    logs = [e.log.text for e in events if e.WhichOneof("event") == "log"]
    skipped = [line for line in logs if "skipping damaged checkpoint" in line]
    assert len(skipped) == 1 and str(newest) in skipped[0]
    assert "model.safetensors does not match its SHA-256" in skipped[0]
    assert any(f"resuming from {run_dir / 'checkpoints' / 'step-000002'} (step 2)" in line for line in logs)
    assert rows(run_dir) == rows(tmp_path / "reference")
