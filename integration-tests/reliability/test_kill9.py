"""kill -9 with the real runner: a scheduler process and a job's worker process die mid-run.

A tiny-model SFT job (``tinker_algos.train``, a checkpoint every step) runs on a scheduler started
as its own process (``python -m tinker_scheduler start``, its own local Ray). Each test SIGKILLs
something after the job reported a few steps, then checks that the job SUCCEEDS, resumed from a
checkpoint (not from step 0), and that nothing is lost or damaged: every step's metrics in the
job store and in the run directory equal those of an uninterrupted job of the same config (same
seed; it runs beside the resumed one on the same scheduler), each step is reported once, the
event cursors have no gap, every checkpoint left verifies against its manifest, and the SQLite
job store passes its integrity check.

Kill -9 of the scheduler with the test workload, SIGTERM and a damaged newest checkpoint are in
``packages/tinker-scheduler/tests/test_recovery.py`` and ``test_checkpoint_recovery.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tinker_algos.records.metrics import is_timing, read_metrics
from tinker_algos.training.checkpoint import verify
from tinker_core.proto import jobs_pb2
from tinker_scheduler.config import DEFAULT_RUNNER
from tinker_scheduler.store import JobState, JobStore
from tinker_scheduler.testing import JobStub, SchedulerProcess

pytestmark = pytest.mark.slow

STEPS = 6
KILL_AFTER_STEP = 2
CONFIG: dict[str, Any] = {
    "name": "kill9",
    "seed": 0,
    "model": {"name": "tiny", "device": "cpu"},
    "env": {"id": "echo/echo-v0"},
    "algorithm": {"name": "sft", "steps": STEPS, "batch_size": 4, "eval_size": 2},
    "optimizer": {"name": "adamw", "lr": 0.001},
    "checkpoint": {"every": 1, "keep": 3},
    "logging": {"tensorboard": False, "plot": False},
    "resources": {"cpus": 1},
}
WORKER_PID = re.compile(r"job started \(.*\bpid (\d+)")


def measured(values: dict[str, Any]) -> dict[str, float]:
    """The metrics that must repeat exactly (no wall-clock timings, no labels)."""
    return {k: float(v) for k, v in values.items() if not is_timing(k) and isinstance(v, int | float) and k != "step"}


def run_metrics(client: JobStub, job_id: str) -> tuple[dict[int, dict[str, float]], list[int], Any]:
    """A finished job's metrics per step from its events, the steps of its training reports in
    order (the final evaluation left out), and the job."""
    final = client.wait(job_id, timeout=300)
    assert final.state == jobs_pb2.JOB_STATE_SUCCEEDED, final.reason
    per_step: dict[int, dict[str, float]] = {}
    steps = []
    for e in client.watch(job_id):
        if e.WhichOneof("event") == "metrics":
            values = measured(dict(e.metrics.values))
            if not all(k.startswith("eval/") for k in values):
                steps.append(e.metrics.step)
            per_step.setdefault(e.metrics.step, {}).update(values)
    return per_step, steps, final


def file_metrics(run_dir: str) -> dict[int, dict[str, float]]:
    return {int(row["step"]): measured(row) for row in read_metrics(Path(run_dir) / "metrics.jsonl")}


def follow_until_step(client: JobStub, job_id: str, step: int) -> int:
    """Watch the job until it reported ``step``; the pid of the worker process running it."""
    pid = None
    for event in client.watch(job_id, timeout=300):
        kind = event.WhichOneof("event")
        if kind == "log" and (match := WORKER_PID.search(event.log.text)):
            pid = int(match.group(1))
        if kind == "metrics" and event.metrics.step >= step:
            assert pid is not None, "no 'job started (... pid N ...)' line before the first metrics"
            return pid
        if kind == "state_change" and event.state_change.state in (
            jobs_pb2.JOB_STATE_SUCCEEDED, jobs_pb2.JOB_STATE_FAILED, jobs_pb2.JOB_STATE_CANCELLED
        ):
            raise AssertionError(f"the job ended before step {step}: {event.state_change.reason}")
    raise AssertionError("the watch stream ended early")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def check_nothing_lost(client: JobStub, job_id: str, reference_id: str, db: Path) -> list[Any]:
    """The job SUCCEEDED with the metrics of the uninterrupted reference job (same config), in
    its events and in its run dir, each step reported once; its checkpoints verify; the job
    store is intact. Returns the job's events."""
    expected, reference_steps, reference_job = run_metrics(client, reference_id)
    assert reference_steps == list(range(1, STEPS + 1)) and file_metrics(reference_job.run_dir) == expected
    stored, steps, final = run_metrics(client, job_id)
    assert steps == list(range(1, STEPS + 1))  # every step once, none lost, none repeated
    assert stored == expected
    assert file_metrics(final.run_dir) == expected
    events = list(client.watch(job_id))
    assert [e.cursor for e in events] == list(range(1, len(events) + 1))  # no gap, no duplicate
    checkpoints = sorted((Path(final.run_dir) / "checkpoints").iterdir())
    assert checkpoints and checkpoints[-1].name == f"step-{STEPS:06d}"
    assert all(verify(c) for c in checkpoints)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    return events


def log_lines(events: list[Any]) -> list[str]:
    return [e.log.text for e in events if e.WhichOneof("event") == "log"]


def resumed_step(events: list[Any]) -> int:
    """The step of the one 'resuming from <checkpoint> (step N)' line."""
    resumed = [line for line in log_lines(events) if line.startswith("resuming from ")]
    assert len(resumed) == 1, resumed
    return int(resumed[0].rsplit("(step ", 1)[1].rstrip(")"))


def test_kill_9_of_the_scheduler_mid_job_then_a_restart_finishes_it_as_if_never_stopped(tmp_path, processes):
    first = SchedulerProcess(tmp_path, "first", "--num-cpus", "2", runner=DEFAULT_RUNNER)
    processes.append(first)
    with JobStub(first.address) as client:
        job = client.submit(json.dumps(CONFIG), request_id="kill9-scheduler")
        worker = follow_until_step(client, job.id, KILL_AFTER_STEP)
    first.kill9()

    store = JobStore(first.db)  # what the dead scheduler left
    left = store.get(job.id)
    store.close()
    assert left.state == JobState.RUNNING and left.checkpoint_step is not None
    # the orphaned worker goes with its driver: it does not train on beside the next attempt
    killed = time.monotonic()
    while alive(worker) and time.monotonic() < killed + 60:
        time.sleep(0.2)
    assert not alive(worker), f"the dead scheduler's worker {worker} still runs"
    print(f"the dead scheduler's worker exited {time.monotonic() - killed:.1f} s after the kill")  # docs figure

    second = SchedulerProcess(tmp_path, "second", "--num-cpus", "2", runner=DEFAULT_RUNNER)
    processes.append(second)
    with JobStub(second.address) as client:
        reference = client.submit(json.dumps(CONFIG), request_id="reference")  # runs beside the resumed job
        events = check_nothing_lost(client, job.id, reference.id, first.db)
    reasons = [e.state_change.reason for e in events if e.WhichOneof("event") == "state_change"]
    assert any(r.startswith("scheduler restarted; resumes from its newest checkpoint") for r in reasons)
    step = resumed_step(events)
    assert step >= left.checkpoint_step
    print(f"scheduler killed after step {KILL_AFTER_STEP} was reported; the store had checkpoint "
          f"{left.checkpoint_step}; resumed from step {step}")  # docs figures


def test_kill_9_of_the_worker_mid_job_restarts_it_from_its_last_checkpoint(tmp_path, processes):
    scheduler = SchedulerProcess(tmp_path, "scheduler", "--num-cpus", "2", runner=DEFAULT_RUNNER)
    processes.append(scheduler)
    with JobStub(scheduler.address) as client:
        job = client.submit(json.dumps(CONFIG), request_id="kill9-worker")
        reference = client.submit(json.dumps(CONFIG), request_id="reference")  # runs beside it, never killed
        worker = follow_until_step(client, job.id, KILL_AFTER_STEP)
        os.kill(worker, signal.SIGKILL)
        killed = time.time()
        events = check_nothing_lost(client, job.id, reference.id, scheduler.db)
    requeued = [e for e in events if e.WhichOneof("event") == "state_change" and "restart 1 of 3" in e.state_change.reason]
    assert len(requeued) == 1 and requeued[0].state_change.state == jobs_pb2.JOB_STATE_QUEUED
    pids = [int(m.group(1)) for line in log_lines(events) if (m := WORKER_PID.search(line))]
    assert len(pids) == 2 and pids[0] == worker != pids[1]  # a second worker ran it
    step = resumed_step(events)
    assert step >= KILL_AFTER_STEP - 1
    noticed = requeued[0].time.seconds + requeued[0].time.nanos / 1e9 - killed
    print(f"worker killed after step {KILL_AFTER_STEP} was reported; re-queued {noticed:.1f} s later; "
          f"resumed from step {step}")  # docs figures
