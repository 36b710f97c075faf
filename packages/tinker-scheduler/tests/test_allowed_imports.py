"""No tenant-named code runs on the scheduler's hosts (issue 43, item 1).

The finding: a tenant's ``agent/program-v0`` job ran any importable callable it named, e.g.
``entry: "pty:spawn", tasks: [["sh", "-c", "id > FILE"]]`` ran ``id`` as the scheduler's user
before the job FAILED. Now a scheduler imports only its registered env plugins and what its
operator allows (``allowed_imports`` / ``--allow-import``): anything else is PERMISSION_DENIED at
Submit, before anything is imported; a stored job that names it (from an older job store) fails
before its worker starts; and the worker enforces the policy on its process.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
import pytest
from typer.testing import CliRunner

from tinker_core.config import parse_config
from tinker_core.proto import jobs_pb2
from tinker_scheduler.cli import app
from tinker_scheduler.config import DEFAULT_RUNNER, SchedulerConfig
from tinker_scheduler.store import JobState, JobStore, NewJob
from tinker_scheduler.testing import ECHO_AGENT, JobStub
from tinker_scheduler.worker import JobWorker


def agent_job(marker: Path, *, steps: int = 1, **kwargs: object) -> dict:
    """An agent-program job whose task is a shell command that creates ``marker``."""
    env_kwargs = {"entry": "pty:spawn", "tasks": [["sh", "-c", f"id > {marker}"]], "timeout_s": 60, **kwargs}
    return {
        "name": "agent", "model": {"name": "tiny", "device": "cpu", "threads": 1},
        "env": {"id": "agent/program-v0", "kwargs": env_kwargs},
        "algorithm": {"name": "grpo", "steps": steps, "eval_size": 2},
        "rollout": {"prompts_per_step": 1, "group_size": 2, "max_new_tokens": 2},
        "checkpoint": {"every": 0}, "logging": {"tensorboard": False, "plot": False},
    }


def refusal(scheduler, key: str, config: dict) -> tuple[grpc.StatusCode, str]:
    with JobStub(scheduler.address, api_key=key) as client, pytest.raises(grpc.RpcError) as info:
        client.stub.Submit(jobs_pb2.SubmitJobRequest(config_text=json.dumps(config)), metadata=client.metadata, timeout=30)
    return info.value.code(), info.value.details()


CASES = {
    "pty:spawn entry": ({"entry": "pty:spawn"}, "env.kwargs.entry", "pty:spawn"),
    "subprocess entry": ({"entry": "subprocess:check_call"}, "env.kwargs.entry", "subprocess:check_call"),
    "os:system entry": ({"entry": "os:system"}, "env.kwargs.entry", "os:system"),
    "tasks calling os": ({"entry": ECHO_AGENT, "tasks": "os:getcwd"}, "env.kwargs.tasks", "os:getcwd"),
    "reward running the task": ({"entry": ECHO_AGENT, "reward": "subprocess:call"}, "env.kwargs.reward", "subprocess:call"),
}


@pytest.mark.parametrize("kwargs, field, ref", CASES.values(), ids=CASES.keys())
def test_a_tenant_cannot_make_the_scheduler_import_code_its_operator_did_not_allow(make_scheduler, tmp_path, kwargs, field, ref):
    marker = tmp_path / "ran-as-the-scheduler"
    scheduler = make_scheduler(runner=DEFAULT_RUNNER, allowed_imports=(ECHO_AGENT,))  # it would run the job at once
    key = scheduler.store.add_tenant("mallory")
    code, details = refusal(scheduler, key, agent_job(marker, **kwargs))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert details.startswith(f"{field}: {ref!r} is not code this scheduler lets jobs import")
    assert f"--allow-import (SchedulerConfig.allowed_imports), now: {ECHO_AGENT!r}" in details and "\n" not in details
    time.sleep(0.5)  # several ticks of the scheduling loop: nothing was queued, nothing ran
    assert scheduler.store.list_jobs("mallory", [], limit=10) == [] and not marker.exists()


def test_every_env_section_and_the_path_folder_are_checked(make_scheduler, tmp_path):
    marker = tmp_path / "ran"
    scheduler = make_scheduler(paused=True, allowed_imports=(ECHO_AGENT,), model_roots=[tmp_path])
    key = scheduler.store.add_tenant("mallory")
    allowed = agent_job(marker, entry=ECHO_AGENT)
    cases = [
        ({**allowed, "env": {**allowed["env"], "eval_kwargs": {"entry": "os:system"}}}, "env.eval_kwargs.entry"),
        ({**{k: v for k, v in allowed.items() if k not in ("env", "algorithm")},
          "stages": [{"algorithm": {"name": "grpo", "steps": 1}, "env": agent_job(marker)["env"]}]}, "stages[0].env.kwargs.entry"),
        # a folder put on sys.path (under a model root, so the path rules allow it): the code comes
        # from the scheduler's installed packages only
        (agent_job(marker, entry=ECHO_AGENT, path=str(tmp_path)), "env.kwargs.path"),
    ]
    for config, field in cases:
        code, details = refusal(scheduler, key, config)
        assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith(f"{field}: ") and "--allow-import" in details
    with JobStub(scheduler.address, api_key=key) as client:  # the operator's agent program is accepted
        assert client.submit(json.dumps(allowed)).state == jobs_pb2.JOB_STATE_QUEUED


@pytest.mark.parametrize("lora", [False, True], ids=["own worker", "shared model host"])
def test_a_stored_job_naming_code_not_allowed_fails_before_its_worker_starts(make_scheduler, tmp_path, lora):
    """Defence in depth: a job that got into the store without Submit's check (an older job store)."""
    marker, db = tmp_path / "ran", tmp_path / "old.db"
    store = JobStore(db)
    config = parse_config({**agent_job(marker), **({"lora": {"rank": 2}} if lora else {})})
    job, _ = store.submit(NewJob(
        tenant="mallory", name="old", priority=0, config_text="{}", config_format=0, config_json=config.model_dump_json(),
        cpus=1.0, gpus=0.0, memory_gb=0.0, runs_dir=str(tmp_path / "runs")))
    store.close()
    scheduler = make_scheduler(db=db, runner=DEFAULT_RUNNER)  # started on that store, it finds the job queued
    deadline = time.monotonic() + 120  # it passes through RUNNING ("started", the launch path) on its way to FAILED
    while (current := scheduler.store.get(job.id)).state in (JobState.QUEUED, JobState.RUNNING) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert current.state == JobState.FAILED
    assert current.reason.startswith("env.kwargs.entry: 'pty:spawn' is not code this scheduler lets jobs import")
    reasons = [e.payload.get("reason", "") for e in scheduler.store.events_after(job.id, 0, limit=50) if e.kind == "state"]
    assert any(r.endswith(" on a shared model host") for r in reasons) == lora  # each launch path checks
    assert not marker.exists()


def probe_runner(config, run_dir, callbacks):
    """A runner that imports what its config names the way an env does (``check_import`` first)."""
    from tinker_core import check_import

    check_import(config, "env.kwargs.entry")
    return {"status": "completed", "step": 0}


def test_the_worker_enforces_the_schedulers_policy_while_the_job_runs(tmp_path):
    runner = f"{__name__}:probe_runner"
    refused = JobWorker("j1").run(runner, "pty:spawn", str(tmp_path / "a"), allowed_imports=(ECHO_AGENT,))
    assert refused["status"] == "failed" and refused["config_error"]
    assert refused["error"].startswith("ImportRefused: env.kwargs.entry: 'pty:spawn' is not code this scheduler")
    assert JobWorker("j2").run(runner, ECHO_AGENT, str(tmp_path / "b"), allowed_imports=(ECHO_AGENT,))["status"] == "completed"
    assert JobWorker("j3").run(runner, "pty:spawn", str(tmp_path / "c"))["status"] == "completed"  # not a scheduler's job


def test_the_setting_and_its_flag():
    assert SchedulerConfig(allowed_imports=["my_pkg.*", "calc:run"]).allowed_imports == ("my_pkg.*", "calc:run")
    assert SchedulerConfig().allowed_imports == ()
    with pytest.raises(ValueError, match="allowed_imports: 'my pkg' is not a pattern"):
        SchedulerConfig(allowed_imports=["my pkg"])
    result = CliRunner().invoke(app, ["start", "--allow-import", "calc:run", "--allow-import", "os system"])
    assert result.exit_code == 2 and "--allow-import: 'os system' is not a pattern" in result.output


@pytest.mark.slow
def test_an_agent_program_the_operator_allowed_still_trains(make_scheduler, tmp_path):
    scheduler = make_scheduler(runner=DEFAULT_RUNNER, allowed_imports=(ECHO_AGENT,))
    key = scheduler.store.add_tenant("alice")
    config = agent_job(tmp_path / "unused", entry=ECHO_AGENT, tasks=["1+1=", "2+2="])
    with JobStub(scheduler.address, api_key=key) as client:
        job = client.submit(json.dumps(config))
        events = list(client.watch(job.id, timeout=300))
        final = client.get(job.id)
    assert final.state == jobs_pb2.JOB_STATE_SUCCEEDED, final.reason
    metrics = [e.metrics.values for e in events if e.WhichOneof("event") == "metrics"]
    assert any(m.get("agent/calls_mean", 0) >= 1 and m.get("rollout/error_rate") == 0 for m in metrics), metrics
