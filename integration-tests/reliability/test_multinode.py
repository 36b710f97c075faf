"""Beyond one machine: a Ray cluster of a head and worker nodes on this machine (issue 17).

``ray.cluster_utils.Cluster`` starts a head node with no CPUs (the scheduler joins it with
``--ray-address``, as it joins a KubeRay cluster) and worker node A with 2 CPUs; worker node B
joins later. The scheduler runs the real runner (``held_runner``: ``tinker_algos.train`` on the
tiny model; a job named ``held...`` pauses once right after its checkpoint at step 3, so the
test can lose its node while it is provably mid-run). One test walks through the story:

1. a full fine-tuning job (its own worker) and a LoRA job (on a shared model host) fill node A
   -- checked by the Ray node id each attempt logs -- and pause; a third job waits in the queue
   (with resources read once at start it would wait for them forever);
2. node B joins: the scheduler re-reads the cluster's resources and the waiting job runs on B;
3. node A is lost mid-run (``Cluster.remove_node``): both jobs are re-queued and resume on B from
   their checkpoints at step 3 (the LoRA job on a new shared host there); every step is reported
   once (events and ``metrics.jsonl``), none lost, none repeated.

State travels by the shared filesystem (documented in ``tinker_scheduler.placement`` and
``docs/guides/kubernetes.md``): the nodes share this machine's disk, and each job's checkpoints
and metrics are found under the scheduler's ``--runs-dir`` whichever node wrote them.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tinker_algos.training.checkpoint import verify
from tinker_core.proto import jobs_pb2
from tinker_scheduler.testing import JobStub, SchedulerProcess

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
STEPS = 6
HOLD_STEP = 3  # held_runner.HOLD_STEP (the runner module is imported by Ray workers, not here)
NODE = re.compile(r"job started \(Ray node ([0-9a-f]+)")
RUNNING, QUEUED, SUCCEEDED = jobs_pb2.JOB_STATE_RUNNING, jobs_pb2.JOB_STATE_QUEUED, jobs_pb2.JOB_STATE_SUCCEEDED


def config(name: str, steps: int, *, lora: bool = False) -> str:
    job: dict[str, Any] = {
        "name": name,
        "seed": 0,
        "model": {"name": "tiny", "device": "cpu"},
        "env": {"id": "echo/echo-v0"},
        "algorithm": {"name": "sft", "steps": steps, "batch_size": 4, "eval_size": 2},
        "optimizer": {"name": "adamw", "lr": 0.001},
        "checkpoint": {"every": 1, "keep": 3},
        "logging": {"tensorboard": False, "plot": False},
        "resources": {"cpus": 1},
    }
    if lora:
        job["lora"] = {"rank": 4}
    return json.dumps(job)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A Ray head node without CPUs (nothing runs on it); the test adds worker nodes."""
    from ray.cluster_utils import Cluster

    # Ray workers (started by the nodes' raylets, which inherit this environment) import held_runner
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p))
    head = Cluster(initialize_head=True, connect=False, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        yield head
    finally:
        head.shutdown()


# Deadlines, not timings: generous, because on a 2-core machine that other work shares a Ray job
# can take minutes to reach a step (one CI run of this stop lost the 180 s watch at load 5-7).
WAIT_S = 600


def wait_for(client: JobStub, job_id: str, state: int, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while (job := client.get(job_id)).state != state:
        assert time.monotonic() < deadline, f"job {job_id} is {job.state}, not {state}: {job.reason}"
        time.sleep(0.2)
    return job


def wait_for_log(client: JobStub, job_id: str, text: str) -> None:
    for event in client.watch(job_id, timeout=WAIT_S):
        if event.WhichOneof("event") == "log" and event.log.text == text:
            return
        if event.WhichOneof("event") == "state_change" and event.state_change.state not in (QUEUED, RUNNING):
            raise AssertionError(f"the job ended before {text!r}: {event.state_change.reason}")
    raise AssertionError(f"the watch stream ended before {text!r}")


def finished(client: JobStub, job_id: str) -> tuple[Any, list[Any]]:
    job = client.wait(job_id, timeout=WAIT_S)
    assert job.state == SUCCEEDED, job.reason
    return job, list(client.watch(job_id))


def nodes(events: list[Any]) -> list[str]:
    """The Ray node id (prefix) of each attempt, in order."""
    return [m.group(1) for e in events if e.WhichOneof("event") == "log" and (m := NODE.search(e.log.text))]


def reported_steps(events: list[Any]) -> list[int]:
    """The steps of the training metrics the scheduler stored (the final evaluation left out)."""
    return [
        e.metrics.step for e in events
        if e.WhichOneof("event") == "metrics" and not all(k.startswith("eval/") for k in e.metrics.values)
    ]


def file_steps(run_dir: str) -> list[int]:
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [int(json.loads(line)["step"]) for line in lines if line.strip()]


def check_run_dir(job: Any, runs: Path, steps: int) -> None:
    """The job's metrics and checkpoints are under the scheduler's runs dir, each step once."""
    run_dir = Path(job.run_dir)
    assert run_dir.is_relative_to(runs.resolve()) or run_dir.is_relative_to(runs)
    assert file_steps(job.run_dir) == list(range(1, steps + 1))
    checkpoints = sorted((run_dir / "checkpoints").iterdir())
    assert checkpoints and checkpoints[-1].name == f"step-{steps:06d}"
    assert all(verify(c) for c in checkpoints)


def moved(events: list[Any], removed: float) -> float:
    """Checks a job that lost its node once and resumed from its step-HOLD_STEP checkpoint;
    returns how long after ``removed`` it was re-queued."""
    requeued = [e for e in events if e.WhichOneof("event") == "state_change" and "restart 1 of 3" in e.state_change.reason]
    assert len(requeued) == 1 and requeued[0].state_change.state == QUEUED, requeued
    resumed = [e.log.text for e in events if e.WhichOneof("event") == "log" and e.log.text.startswith("resuming from ")]
    assert len(resumed) == 1 and resumed[0].endswith(f"(step {HOLD_STEP})"), resumed
    return requeued[0].time.seconds + requeued[0].time.nanos / 1e9 - removed


def test_jobs_and_a_shared_host_run_on_worker_nodes_a_new_node_gets_work_and_a_lost_node_costs_no_step(
    cluster, tmp_path, processes
):
    node_a = cluster.add_node(num_cpus=2, resources={"worker_a": 1})
    scheduler = SchedulerProcess(tmp_path, "scheduler", "--ray-address", cluster.address, runner="held_runner:train")
    processes.append(scheduler)
    with JobStub(scheduler.address) as client:
        held = client.submit(config("held-full", STEPS), request_id="full").id
        lora = client.submit(config("held-lora", STEPS, lora=True), request_id="lora").id
        wait_for(client, held, RUNNING)
        wait_for(client, lora, RUNNING)
        late = client.submit(config("late", 2), request_id="late").id
        # node A's 2 CPUs: the full job's worker and the LoRA job's model host, both paused mid-run
        wait_for_log(client, held, f"held at step {HOLD_STEP}")
        wait_for_log(client, lora, f"held at step {HOLD_STEP}")
        assert client.get(late).state == QUEUED

        joined = time.time()
        node_b = cluster.add_node(num_cpus=2, resources={"worker_b": 1})
        late_job, late_events = finished(client, late)  # B's CPUs were re-read: it ran there

        removed = time.time()
        cluster.remove_node(node_a)  # both paused jobs lose their node mid-run
        held_job, held_events = finished(client, held)
        lora_job, lora_events = finished(client, lora)

    a, b = node_a.node_id[:12], node_b.node_id[:12]
    assert nodes(late_events) == [b]
    started = [e.time.seconds + e.time.nanos / 1e9 for e in late_events
               if e.WhichOneof("event") == "state_change" and e.state_change.state == RUNNING]
    assert len(started) == 1 and started[0] >= joined  # it waited for B
    # first attempts on A, resumed on B from their step-3 checkpoints; the LoRA job on a shared host both times
    assert nodes(held_events) == [a, b] and nodes(lora_events) == [a, b]
    assert sum("on a shared model host" in e.state_change.reason for e in lora_events
               if e.WhichOneof("event") == "state_change" and e.state_change.state == RUNNING) == 2
    noticed = moved(held_events, removed)
    moved(lora_events, removed)
    # no step lost, none repeated: in what the scheduler stored and in the run directories
    for job, events in ((held_job, held_events), (lora_job, lora_events)):
        assert reported_steps(events) == list(range(1, STEPS + 1))
        check_run_dir(job, scheduler.runs, STEPS)
    check_run_dir(late_job, scheduler.runs, 2)
    assert "Ray cluster resources changed" in scheduler.log.read_text()
    print(f"node A removed mid-job; the full fine-tuning job was re-queued {noticed:.1f} s later; both jobs "
          f"resumed on node B from step {HOLD_STEP}")  # docs figure
