"""Pause, Resume, SetSettings and Fork of JobService jobs (issue 47, "runs you can steer").

A paused job checkpoints at its next step boundary (the cancel path: ``should_stop()``), frees its
worker and waits out of the queue, across scheduler restarts, until it is resumed; it then goes
on from its checkpoint. SetSettings checks a live-setting change against the job's config and
writes it into the job's run dir. Fork makes a new job's run dir from a job's checkpoint. Most
tests run the ``sleep_train`` test workload; the two slow ones run the real trainer: a job paused
and resumed across a restart against an uninterrupted run, and a fork against its parent.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import grpc
import pytest

from tinker_core.proto import jobs_pb2
from tinker_scheduler.store import JobState, JobStore, NewJob, StoreError
from tinker_scheduler.testing import JobStub, job_config_text

QUEUED, RUNNING, PAUSED = jobs_pb2.JOB_STATE_QUEUED, jobs_pb2.JOB_STATE_RUNNING, jobs_pb2.JOB_STATE_PAUSED
SUCCEEDED, CANCELLED = jobs_pb2.JOB_STATE_SUCCEEDED, jobs_pb2.JOB_STATE_CANCELLED


def code_of(call, *args) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(*args)
    return info.value.code(), info.value.details()


def states_of(client: JobStub, job_id: str) -> list[int]:
    return [e.state_change.state for e in client.watch(job_id) if e.WhichOneof("event") == "state_change"]


def attempts(run_dir: str) -> list[int]:
    return [json.loads(line)["start_step"] for line in (Path(run_dir) / "attempts.jsonl").read_text().splitlines()]


def wait_for_step(client: JobStub, job_id: str, step: int) -> None:
    for event in client.watch(job_id):
        if event.WhichOneof("event") == "metrics" and event.metrics.step >= step:
            return
    raise AssertionError(f"job {job_id} ended before step {step}")


# ---- the store ------------------------------------------------------------------------------


def new_job(tenant: str = "alice") -> NewJob:
    return NewJob(tenant=tenant, name="job", priority=0, config_text="algorithm: {name: sft}\n", config_format=1,
                  config_json="{}", cpus=1.0, gpus=0.0, memory_gb=0.0, runs_dir="/runs")


def test_the_store_pauses_a_queued_job_at_once_flags_a_running_one_and_resume_undoes_either(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    queued, _ = store.submit(new_job())
    paused = store.request_pause(queued.id, "for the night")
    assert paused.state == JobState.PAUSED and paused.reason == "for the night" and not paused.state.terminal
    assert store.request_pause(queued.id, "again") == paused  # unchanged
    assert [j.id for j in store.in_state(JobState.QUEUED)] == []
    resumed = store.resume(queued.id)
    assert resumed.state == JobState.QUEUED and resumed.reason.startswith("resumed; resumes from its newest checkpoint")

    running, _ = store.submit(new_job())
    store.transition(running.id, JobState.RUNNING, "started")
    flagged = store.request_pause(running.id, "later")
    assert flagged.state == JobState.RUNNING and flagged.pause_requested and flagged.reason == "pausing: later"
    withdrawn = store.resume(running.id)
    assert withdrawn.state == JobState.RUNNING and not withdrawn.pause_requested
    store.request_cancel(running.id, "stop")
    assert not store.request_pause(running.id, "too late").pause_requested  # a cancel wins
    again, _ = store.submit(new_job())
    store.request_pause(again.id, "x")
    assert store.request_cancel(again.id, "done with it").state == JobState.CANCELLED  # a paused job cancels at once
    store.close()


def test_a_version_1_store_is_migrated_and_a_newer_one_refused(tmp_path):
    db = tmp_path / "jobs.db"
    store = JobStore(db)
    job, _ = store.submit(new_job())
    store.close()
    with sqlite3.connect(db) as conn:  # what a version 1 store looks like
        conn.execute("ALTER TABLE jobs DROP COLUMN pause_reason")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    store = JobStore(db)
    assert store.get(job.id).pause_reason is None
    assert store.request_pause(job.id, "now").state == JobState.PAUSED
    store.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("2",)
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="schema version 3, this scheduler needs 2 or older"):
        JobStore(db)


# ---- through the scheduler ------------------------------------------------------------------


def test_pause_resume_and_set_settings_of_a_queued_job_and_their_errors(make_scheduler):
    scheduler = make_scheduler(paused=True)
    alice_key, bob_key = scheduler.store.add_tenant("alice"), scheduler.store.add_tenant("bob")
    with JobStub(scheduler.address, alice_key) as alice, JobStub(scheduler.address, bob_key) as bob:
        job = alice.submit(job_config_text())
        for call in (bob.pause, bob.resume, lambda job_id: bob.set_settings(job_id, ["optimizer.lr=0.1"])):
            code, details = code_of(call, job.id)
            assert code == grpc.StatusCode.NOT_FOUND and "did you mean" not in details
        paused = alice.pause(job.id, reason="waiting for data")
        assert (paused.state, paused.reason) == (PAUSED, "waiting for data")
        assert alice.pause(job.id).reason == "waiting for data"  # pausing again changes nothing
        assert [j.id for j in alice.list(states=[PAUSED]).jobs] == [job.id]

        answer = alice.set_settings(job.id, ["optimizer.lr=0.01", "algorithm.eval_every=3"])
        request = Path(job.run_dir) / "control" / answer.request
        assert json.loads(request.read_text()) == {"set": ["optimizer.lr=0.01", "algorithm.eval_every=3"]}
        assert (Path(job.run_dir) / ".opentinker-run").is_file()  # the run dir of a job not started yet
        code, details = code_of(alice.set_settings, job.id, ["model.name=gpt2"])
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "model.name cannot change while a job runs; the settings that can: optimizer.lr" in details
        code, details = code_of(alice.set_settings, job.id, ["optimizer.lr=-1"])
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "optimizer.lr" in details
        assert code_of(alice.set_settings, job.id, [])[0] == grpc.StatusCode.INVALID_ARGUMENT
        assert len(list((Path(job.run_dir) / "control").glob("*.json"))) == 1  # the refused ones wrote nothing

        assert alice.resume(job.id).state == QUEUED
        assert alice.resume(job.id).state == QUEUED  # resuming a queued job changes nothing
        alice.cancel(job.id)
        for call in (alice.pause, alice.resume, lambda job_id: alice.set_settings(job_id, ["optimizer.lr=0.1"])):
            code, details = code_of(call, job.id)
            assert code == grpc.StatusCode.FAILED_PRECONDITION and "is CANCELLED" in details, details
        assert states_of(alice, job.id) == [QUEUED, PAUSED, QUEUED, CANCELLED]


def test_a_paused_job_checkpoints_frees_its_worker_and_resume_continues_from_there(make_scheduler):
    scheduler = make_scheduler(num_cpus=1)  # one job at a time
    with JobStub(scheduler.address) as client:
        first = client.submit(job_config_text(name="first", steps=60, step_s=0.05))
        second = client.submit(job_config_text(name="second", steps=3))
        wait_for_step(client, first.id, 2)
        assert client.pause(first.id).reason == "pausing: paused by the user"
        paused = client.wait_for_state(first.id, PAUSED)
        assert paused.state == PAUSED, paused.reason
        assert client.wait(second.id).state == SUCCEEDED  # it got the worker the paused job freed
        time.sleep(0.3)
        paused = client.get(first.id)
        assert paused.state == PAUSED and first.id not in scheduler.running_job_ids()  # the queue skips it
        stopped_at = attempts(first.run_dir)
        step = int(Path(paused.checkpoint_path).stem.removeprefix("step-"))
        assert f"checkpoint at step {step}" in paused.reason and 2 <= step < 60
        assert client.resume(first.id).state == QUEUED
        final = client.wait(first.id)
        assert final.state == SUCCEEDED, final.reason
        assert stopped_at == [0] and attempts(first.run_dir) == [0, step]
        logs = [e.log.text for e in client.watch(first.id) if e.WhichOneof("event") == "log"]
        assert any("pause requested (paused by the user); asking the job to checkpoint and stop" in line for line in logs)
        assert states_of(client, first.id) == [QUEUED, RUNNING, PAUSED, QUEUED, RUNNING, SUCCEEDED]


def test_a_paused_job_stays_paused_across_a_restart_and_a_pause_in_flight_is_kept(make_scheduler, tmp_path):
    db = tmp_path / "jobs.db"
    store = JobStore(db)  # a job the last scheduler was stopping for a pause when it died
    text = job_config_text(steps=4)
    from tinker_core.config import load_config

    caught, _ = store.submit(NewJob(tenant="local", name="test", priority=0, config_text=text, config_format=1,
                                    config_json=load_config(text, check_plugins=False).model_dump_json(),
                                    cpus=1.0, gpus=0.0, memory_gb=0.0, runs_dir=str(tmp_path / "runs")))
    store.transition(caught.id, JobState.RUNNING, "started")
    store.request_pause(caught.id, "paused by the user")
    store.close()
    scheduler = make_scheduler(db=db)
    with JobStub(scheduler.address) as client:
        job = client.get(caught.id)
        assert job.state == PAUSED and job.reason.startswith("scheduler restarted; paused by the user")
        other = client.submit(job_config_text(steps=40, step_s=0.05))
        wait_for_step(client, other.id, 1)
        client.pause(other.id)
        assert client.wait_for_state(other.id, PAUSED).state == PAUSED
    scheduler.stop()
    scheduler = make_scheduler(db=db)
    with JobStub(scheduler.address) as client:
        time.sleep(0.3)
        assert [client.get(j).state for j in (caught.id, other.id)] == [PAUSED, PAUSED]
        for job_id in (caught.id, other.id):
            client.resume(job_id)
            assert client.wait(job_id).state == SUCCEEDED


@pytest.mark.slow
def test_pause_and_resume_of_a_real_job_across_a_restart_give_the_uninterrupted_metrics(make_scheduler, tmp_path):
    from tinker_algos import train
    from tinker_algos.records.metrics import is_timing, read_metrics
    from tinker_scheduler.config import DEFAULT_RUNNER

    def rows(run_dir: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if not is_timing(k)} for r in read_metrics(run_dir / "metrics.jsonl")]

    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "completion": c}) + "\n"
                            for p, c in [("1+1=", "2\n"), ("2+2=", "4\n"), ("3+1=", "4\n"), ("2+3=", "5\n")]))
    config = {
        "name": "tiny-sft", "seed": 0, "model": {"name": "tiny", "device": "cpu"},
        "algorithm": {"name": "sft", "steps": 200, "batch_size": 4, "data": str(data)},
        "optimizer": {"name": "adamw", "lr": 0.001},
        "checkpoint": {"every": 0, "keep_last": 2},  # only where it stops and at the end
        "logging": {"tensorboard": False, "plot": False}, "resources": {"cpus": 1},
    }
    reference = train(config, run_dir=tmp_path / "reference")
    assert reference.status == "completed"

    db, runs = tmp_path / "jobs.db", tmp_path / "runs"
    scheduler = make_scheduler(runner=DEFAULT_RUNNER, db=db, runs_dir=runs, model_roots=[tmp_path])
    with JobStub(scheduler.address) as client:
        job = client.submit(json.dumps(config))
        wait_for_step(client, job.id, 1)
        client.pause(job.id)
        paused = client.wait_for_state(job.id, PAUSED, timeout=120)
    assert paused.state == PAUSED, paused.reason
    step = int(Path(paused.checkpoint_path).name.removeprefix("step-"))
    assert 1 <= step < 200 and f"checkpoint at step {step}" in paused.reason
    scheduler.stop()
    scheduler = make_scheduler(runner=DEFAULT_RUNNER, db=db, runs_dir=runs, model_roots=[tmp_path])
    with JobStub(scheduler.address) as client:
        assert client.get(job.id).state == PAUSED
        client.resume(job.id)
        final = client.wait(job.id, timeout=300)
        logs = [e.log.text for e in client.watch(job.id) if e.WhichOneof("event") == "log"]
    assert final.state == SUCCEEDED, final.reason
    assert any(f"step-{step:06d} (step {step})" in line and "resuming from" in line for line in logs), logs[-20:]
    assert [r["step"] for r in rows(tmp_path / "reference")] == list(range(1, 201))
    assert rows(Path(final.run_dir)) == rows(tmp_path / "reference")


@pytest.mark.slow
def test_fork_a_job_through_the_scheduler_repeats_its_metrics_and_records_its_lineage(make_scheduler, tmp_path):
    from tinker_algos import train
    from tinker_algos.records.metrics import is_timing, read_metrics
    from tinker_core.config import parse_config
    from tinker_scheduler.config import DEFAULT_RUNNER

    def rows(run_dir: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if not is_timing(k)} for r in read_metrics(run_dir / "metrics.jsonl")]

    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "completion": c}) + "\n"
                            for p, c in [("1+1=", "2\n"), ("2+2=", "4\n"), ("3+1=", "4\n"), ("2+3=", "5\n")]))
    config = {
        "name": "tiny-sft", "seed": 0, "model": {"name": "tiny", "device": "cpu"},
        "algorithm": {"name": "sft", "steps": 6, "batch_size": 4, "data": str(data)},
        "optimizer": {"name": "adamw", "lr": 0.001},
        "checkpoint": {"every": 2, "keep_last": 1, "keep_every": 2},
        "logging": {"tensorboard": False, "plot": False}, "resources": {"cpus": 1},
    }
    db, runs = tmp_path / "jobs.db", tmp_path / "runs"
    store = JobStore(db)  # the parent: a job that ran (here, in this process) and succeeded
    alice_key, bob_key = store.add_tenant("alice"), store.add_tenant("bob")
    parent, _ = store.submit(NewJob(tenant="alice", name="tiny-sft", priority=0, config_text=json.dumps(config),
                                    config_format=jobs_pb2.CONFIG_FORMAT_JSON, config_json=parse_config(config).model_dump_json(),
                                    cpus=1.0, gpus=0.0, memory_gb=0.0, runs_dir=str(runs)))
    store.transition(parent.id, JobState.RUNNING, "started")
    assert train(config, run_dir=parent.run_dir).status == "completed"
    store.transition(parent.id, JobState.SUCCEEDED, "completed 6 steps")
    store.close()

    scheduler = make_scheduler(runner=DEFAULT_RUNNER, db=db, runs_dir=runs, model_roots=[tmp_path])
    with JobStub(scheduler.address, alice_key) as alice, JobStub(scheduler.address, bob_key) as bob:
        code, details = code_of(bob.fork, parent.id)
        assert code == grpc.StatusCode.NOT_FOUND and "did you mean" not in details
        code, details = code_of(lambda: alice.fork(parent.id, step=3))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "no checkpoint at step 3 (it has: 2, 4, 6)" in details
        code, details = code_of(lambda: alice.fork(parent.id, ["model.name=other"], step=4))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "model.name" in details
        code, details = code_of(lambda: alice.fork(parent.id, ["optimizer.lr=-1"], step=4))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "optimizer.lr" in details
        assert sorted(p.name for p in (runs / "alice").iterdir()) == [parent.id]  # the refused forks left nothing
        secret = tmp_path / "secret.txt"
        secret.write_text("not the job's")
        (Path(parent.run_dir) / "checkpoints" / "step-000004" / "extra.txt").symlink_to(secret)
        code, details = code_of(lambda: alice.fork(parent.id, step=4))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "holds a symbolic link" in details
        (Path(parent.run_dir) / "checkpoints" / "step-000004" / "extra.txt").unlink()

        job = alice.fork(parent.id, step=4, request_id="fork-1")
        assert alice.fork(parent.id, step=4, request_id="fork-1").id == job.id  # a retry: the same job
        final = alice.wait(job.id, timeout=300)
        logs = [e.log.text for e in alice.watch(job.id) if e.WhichOneof("event") == "log"]
    assert final.state == SUCCEEDED, final.reason
    assert sorted(p.name for p in (runs / "alice").iterdir()) == sorted([parent.id, job.id])
    assert any(f"forked from job {parent.id} at step 4 (no overrides)" in line for line in logs)
    lineage = json.loads((Path(final.run_dir) / "lineage.json").read_text())
    assert lineage["parent"]["run_dir"] == str(Path(parent.run_dir).resolve()) and lineage["parent"]["step"] == 4
    assert lineage["overrides"] == []
    assert rows(Path(final.run_dir)) == rows(Path(parent.run_dir))  # without overrides: the parent's metrics
