"""The scheduler as a real process: kill -9 and SIGTERM, then a restart on the same job store.

Each scheduler process starts its own local Ray (``--num-cpus 2``) in a new session; after a test
every process of that session (Ray's agents can outlive a SIGKILLed driver) is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc
import pytest

from tinker_core.proto import jobs_pb2
from tinker_scheduler.store import JobState, JobStore
from tinker_scheduler.testing import JobStub, SchedulerProcess, job_config_text


@pytest.fixture
def processes():
    started: list[SchedulerProcess] = []
    yield started
    for p in started:
        p.cleanup()


def metric_steps(client: JobStub, job_id: str) -> list[int]:
    return [e.metrics.step for e in client.watch(job_id) if e.WhichOneof("event") == "metrics"]


def attempts(run_dir: str) -> list[int]:
    lines = (Path(run_dir) / "attempts.jsonl").read_text().splitlines()
    return [json.loads(line)["start_step"] for line in lines]


def completions(run_dir: str) -> list[str]:
    path = Path(run_dir) / "completions.txt"
    return path.read_text().splitlines() if path.exists() else []


def submit_running_and_queued(address: str, steps: int) -> tuple[str, list[str]]:
    """A 2-CPU job that runs (checkpointing every step) and two 1-CPU jobs queued behind it."""
    with JobStub(address) as client:
        running = client.submit(job_config_text(name="long", steps=steps, step_s=0.05, cpus=2), request_id="long")
        queued = [client.submit(job_config_text(name=f"q{i}", steps=3, cpus=1), request_id=f"q{i}") for i in range(2)]
        for event in client.watch(running.id):
            if event.WhichOneof("event") == "metrics" and event.metrics.step >= 4:
                break
        assert [client.get(q.id).state for q in queued] == [jobs_pb2.JOB_STATE_QUEUED] * 2
    return running.id, [q.id for q in queued]


def finish_all(address: str, job_ids: list[str]) -> dict[str, object]:
    with JobStub(address) as client:
        return {job_id: client.wait(job_id, timeout=180) for job_id in job_ids}


def test_kill_9_then_restart_runs_every_job_exactly_once_and_resumes_the_running_one(tmp_path, processes):
    first = SchedulerProcess(tmp_path, "first")
    processes.append(first)
    running, queued = submit_running_and_queued(first.address, steps=30)
    first.kill9()

    store = JobStore(first.db)  # what the dead scheduler left: nothing lost
    assert store.get(running).state == JobState.RUNNING
    assert [store.get(q).state for q in queued] == [JobState.QUEUED] * 2
    store.close()

    second = SchedulerProcess(tmp_path, "second")
    processes.append(second)
    with JobStub(second.address) as client:  # a retried submit after the crash: still one job
        assert client.submit(job_config_text(name="long", steps=30, step_s=0.05, cpus=2), request_id="long").id == running
    final = finish_all(second.address, [running, *queued])
    assert {job_id: job.state for job_id, job in final.items()} == dict.fromkeys(final, jobs_pb2.JOB_STATE_SUCCEEDED)
    for job_id, job in final.items():
        assert completions(job.run_dir) == [str(30 if job_id == running else 3)]  # finished exactly once
    starts = attempts(final[running].run_dir)
    assert len(starts) == 2 and starts[1] >= 4  # resumed from its checkpoint, not from step 0
    assert [attempts(final[q].run_dir) for q in queued] == [[0], [0]]

    with JobStub(second.address) as client:
        events = list(client.watch(running))
        steps = metric_steps(client, running)
    assert [e.cursor for e in events] == list(range(1, len(events) + 1))
    reasons = [e.state_change.reason for e in events if e.WhichOneof("event") == "state_change"]
    assert reasons[2].startswith("scheduler restarted; resumes from its newest checkpoint")
    # every step once, also the one whose checkpoint was written as the scheduler died (the
    # resumed run reports it again); the last one is the final evaluation
    assert steps == list(range(1, 31)) + [30]


def test_sigterm_checkpoints_and_requeues_then_a_restart_finishes_the_work(tmp_path, processes):
    first = SchedulerProcess(tmp_path, "first")
    processes.append(first)
    running, queued = submit_running_and_queued(first.address, steps=25)
    assert first.terminate() == 0
    assert "scheduler stopped" in first.log.read_text()

    store = JobStore(first.db)
    job = store.get(running)
    assert job.state == JobState.QUEUED and job.reason.startswith("scheduler shutting down")
    assert job.checkpoint_step is not None and job.checkpoint_step >= 4
    assert [store.get(q).state for q in queued] == [JobState.QUEUED] * 2
    store.close()

    second = SchedulerProcess(tmp_path, "second")
    processes.append(second)
    final = finish_all(second.address, [running, *queued])
    assert all(job.state == jobs_pb2.JOB_STATE_SUCCEEDED for job in final.values())
    assert attempts(final[running].run_dir) == [0, job.checkpoint_step]
    assert completions(final[running].run_dir) == ["25"]
    with JobStub(second.address) as client:
        assert metric_steps(client, running) == list(range(1, 26)) + [25]  # every step exactly once


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ray_address_joins_an_existing_cluster_and_leaves_it_running(tmp_path, processes):
    port = free_port()
    ray_cli = str(Path(sys.executable).with_name("ray"))
    # its own (short: socket paths) temp dir, so its address file is not seen by other Ray starts
    temp_dir = tempfile.mkdtemp(prefix="otk-ray-")
    with open(tmp_path / "ray-head.log", "w") as log:
        head = subprocess.Popen(
            [ray_cli, "start", "--head", "--block", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
             f"--temp-dir={temp_dir}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        scheduler = SchedulerProcess(tmp_path, "joined", "--ray-address", f"127.0.0.1:{port}", "--num-cpus", "1")
        processes.append(scheduler)
        assert "resources 1 CPU" in scheduler.log.read_text()  # the cluster's 2 CPUs, capped at 1
        with JobStub(scheduler.address) as client:
            with pytest.raises(grpc.RpcError) as info:
                client.submit(job_config_text(cpus=2))
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "resources.cpus = 2 but the cluster has 1 in total" in info.value.details()
            job = client.submit(job_config_text(steps=3))
            assert client.wait(job.id).state == jobs_pb2.JOB_STATE_SUCCEEDED
        assert scheduler.terminate() == 0
        assert head.poll() is None  # the cluster the scheduler joined is still up
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=30)
        shutil.rmtree(temp_dir, ignore_errors=True)
