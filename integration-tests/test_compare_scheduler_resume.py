"""``opentinker compare --scheduler`` resuming (tinker_algos.compare.scheduler with tinker-client's
JobClient replaced by a fake scheduler): a job still running is watched again, not resubmitted;
a failed or forgotten one is submitted again; a succeeded one is kept; metrics events of one step
merge into one row."""

from __future__ import annotations

import itertools
import json

import grpc
import pytest
import yaml

import tinker_client.jobs
from tinker_algos.compare.runner import JOB_RECORD, config_json, job_dir
from tinker_algos.compare.scheduler import SchedulerError, run_on_scheduler
from tinker_algos.compare.spec import expand, load_spec
from tinker_core.proto import jobs_pb2 as pb

BASE = {
    "name": "cmp",
    "model": {"name": "tiny"},
    "env": {"id": "echo/echo-v0"},
    "stages": [{"algorithm": {"name": "sft", "steps": 1}}, {"algorithm": {"name": "grpo", "steps": 2}}],
}


class NotFound(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.NOT_FOUND

    def details(self):
        return "no such job"


class Unavailable(NotFound):
    def code(self):
        return grpc.StatusCode.UNAVAILABLE


class FakeScheduler:
    """Jobs by id; each watched job runs to SUCCEEDED (or ``fail`` ones to FAILED) with 2 eval steps."""

    def __init__(self) -> None:
        self.states: dict[str, int] = {}
        self.submitted: list[dict] = []
        self.watched: list[str] = []
        self.fail: set[int] = set()
        self.ids = (f"job-{i}" for i in itertools.count(1))
        self.seeds: dict[str, int] = {}

    def client(self, address, api_key=None, *, tls_ca=None):
        fake = self

        class Client:
            def __init__(self) -> None:
                self.address = address

            def get(self, job_id):
                if job_id not in fake.states:
                    raise NotFound()
                return pb.Job(id=job_id, state=fake.states[job_id], run_dir=f"/sched/runs/{job_id}", reason="")

            def submit(self, text, request_id=None):
                config = json.loads(text)
                job_id = next(fake.ids)
                fake.submitted.append(config)
                fake.states[job_id] = pb.JOB_STATE_QUEUED
                fake.seeds[job_id] = config["seed"]
                return pb.Job(id=job_id, state=pb.JOB_STATE_QUEUED, run_dir=f"/sched/runs/{job_id}")

            def watch(self, job_id):
                fake.watched.append(job_id)
                seed = fake.seeds[job_id]
                yield pb.JobEvent(cursor=1, job_id=job_id, state_change=pb.JobStateChange(state=pb.JOB_STATE_RUNNING))
                for step in (2, 3):
                    yield pb.JobEvent(metrics=pb.JobMetrics(step=step, values={"eval/accuracy": 0.1 * step + seed, "time/step_s": 0.5}))
                # the final event repeats the last step's eval (the scheduler's "final" metrics)
                yield pb.JobEvent(metrics=pb.JobMetrics(step=3, values={"eval/accuracy": 0.3 + seed}))
                fake.states[job_id] = pb.JOB_STATE_FAILED if seed in fake.fail else pb.JOB_STATE_SUCCEEDED
                yield pb.JobEvent(state_change=pb.JobStateChange(state=fake.states[job_id]))

            def close(self):
                pass

        return Client()


@pytest.fixture
def setup(tmp_path, monkeypatch):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "cmp.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "variants": [{"name": "a", "set": {}}], "seeds": 4}))
    spec = load_spec(tmp_path / "cmp.yaml", output=tmp_path / "out")
    fake = FakeScheduler()
    monkeypatch.setattr(tinker_client.jobs, "JobClient", fake.client)
    return spec, expand(spec), fake


def record(spec, job, **fields):
    d = job_dir(spec.output, job)
    d.mkdir(parents=True, exist_ok=True)
    (d / JOB_RECORD).write_text(json.dumps({**fields, "config": config_json(job)}))


def test_a_rerun_watches_running_jobs_and_resubmits_failed_and_forgotten_ones(setup):
    spec, jobs, fake = setup
    fake.states.update({"old-running": pb.JOB_STATE_RUNNING, "old-failed": pb.JOB_STATE_FAILED})
    fake.seeds.update({"old-running": 0, "old-failed": 1})
    record(spec, jobs[0], job_id="old-running", state="RUNNING")
    record(spec, jobs[1], job_id="old-failed", state="FAILED")
    record(spec, jobs[2], job_id="old-gone", state="QUEUED")  # the scheduler lost it (a new database)
    lines: list[str] = []
    outcomes = run_on_scheduler(jobs, spec.output, lines.append, address="fake:1", api_key=None, tls_ca=None)
    assert [c["seed"] for c in fake.submitted] == [1, 2, 3]  # seed 0's job is still running: not resubmitted
    assert sorted(fake.watched) == sorted(["old-running", "job-1", "job-2", "job-3"])
    assert [o.status for o in outcomes] == ["completed"] * 4
    assert outcomes[0].job_id == "old-running" and outcomes[0].run_dir == "/sched/runs/old-running"
    assert outcomes[2].rows == [{"step": 2, "eval/accuracy": 2.2, "time/step_s": 0.5}, {"step": 3, "eval/accuracy": pytest.approx(2.3), "time/step_s": 0.5}]
    d = job_dir(spec.output, jobs[2])
    assert json.loads((d / JOB_RECORD).read_text())["state"] == "SUCCEEDED"
    assert [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()] == outcomes[2].rows
    assert lines[0] == "jobs: 0 done, 0 running, 4 queued  (3 submitted, 1 already on the scheduler)" and lines[-1].startswith("jobs: 4 done, 0 running, 0 queued")
    # all succeeded: a third run asks the scheduler nothing
    fake.submitted.clear()
    fake.watched.clear()
    again = run_on_scheduler(jobs, spec.output, lines.append, address="fake:1", api_key=None, tls_ca=None)
    assert fake.submitted == [] and fake.watched == [] and all(o.skipped for o in again)
    assert lines[-1] == "jobs: 4 done, 0 running, 0 queued  (4 already completed)"


def test_a_failed_job_is_an_outcome_and_an_unreachable_scheduler_is_exit_1(setup, monkeypatch):
    spec, jobs, fake = setup
    fake.fail = {2}
    outcomes = run_on_scheduler(jobs, spec.output, lambda line: None, address="fake:1", api_key=None, tls_ca=None)
    assert [o.status for o in outcomes] == ["completed", "completed", "failed", "completed"]
    assert outcomes[2].error is not None and outcomes[2].error.startswith("FAILED")
    assert not (job_dir(spec.output, jobs[2]) / "metrics.jsonl").exists()

    def unreachable(address, api_key=None, *, tls_ca=None):
        client = fake.client(address)
        client.submit = lambda *a, **k: (_ for _ in ()).throw(Unavailable())
        return client

    monkeypatch.setattr(tinker_client.jobs, "JobClient", unreachable)
    with pytest.raises(SchedulerError, match="cannot reach a scheduler at fake:1") as e:
        run_on_scheduler(jobs, spec.output, lambda line: None, address="fake:1", api_key=None, tls_ca=None)
    assert e.value.exit_code == 1
