"""``opentinker train`` as a user runs it: the client's CLI with the command tinker-algos adds."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

JOB = """
name: cli-train
seed: 0
model: {name: tiny}
env: {id: echo/echo-v0}
stages:
  - {algorithm: {name: sft, steps: 2, batch_size: 4, eval_size: 2}}
rollout: {prompts_per_step: 2, group_size: 2, max_new_tokens: 3}
checkpoint: {every: 2}
logging: {tensorboard: false}
"""


def opentinker(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENTINKER_CACHE": str(cwd / "cache"), "COLUMNS": "160"}  # the trace table whole (it has memory columns now)
    return subprocess.run([sys.executable, "-m", "tinker_client.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def test_train_runs_embedded_into_runs_name_keeps_a_finished_run_and_extends_it_from_its_checkpoint(tmp_path):
    (tmp_path / "job.yaml").write_text(JOB)
    first = opentinker("train", "job.yaml", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "completed: 2 steps; run dir: runs/cli-train" in first.stdout
    assert (tmp_path / "runs" / "cli-train" / "curve.png").is_file()
    trace = opentinker("trace", "runs/cli-train", cwd=tmp_path)  # the run's phases, from its trace.json
    assert trace.returncode == 0, trace.stderr
    assert "(2 steps)" in trace.stdout and "forward_backward" in trace.stdout and "100.0%" in trace.stdout
    result = (tmp_path / "runs" / "cli-train" / "result.json").read_bytes()
    again = opentinker("train", "job.yaml", cwd=tmp_path)  # finished: nothing to run, nothing overwritten
    assert again.returncode == 0, again.stderr
    assert "already completed after 2 steps: nothing to run" in again.stderr
    assert (tmp_path / "runs" / "cli-train" / "result.json").read_bytes() == result
    longer = opentinker("train", "job.yaml", "stages.0.algorithm.steps=3", cwd=tmp_path)  # extends from its checkpoint
    assert longer.returncode == 0, longer.stderr
    assert "resuming from" in longer.stderr and "completed: 3 steps" in longer.stdout


def test_train_with_a_scheduler_submits_and_watches(tmp_path):
    (tmp_path / "job.yaml").write_text(JOB)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    result = opentinker("train", "job.yaml", "--scheduler", address, cwd=tmp_path)
    assert result.returncode == 1  # as `submit --watch`: nobody listens there
    assert f"cannot reach a scheduler at {address}" in result.stderr


def test_train_exits_2_on_a_bad_config(tmp_path):
    (tmp_path / "job.yaml").write_text(JOB.replace("steps: 2", "steps: -2"))
    result = opentinker("train", "job.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "job.yaml: 1 problem(s)" in result.stderr and "Traceback" not in result.stderr
