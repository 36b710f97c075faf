"""As a new user would, in two terminals: `opentinker scheduler start`, then submit, watch, list."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

JOB = """
name: cli-e2e
seed: 0
model: {name: tiny}
env: {id: echo/echo-v0}
stages:
  - {algorithm: {name: sft, steps: 3, batch_size: 4, eval_size: 2}}
  - {algorithm: {name: grpo, steps: 2, eval_size: 2}}
rollout: {prompts_per_step: 2, group_size: 2, max_new_tokens: 3}
checkpoint: {every: 2}
logging: {tensorboard: false}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tinker_client.cli", *args], capture_output=True, text=True, env=env, timeout=600)


def test_submit_watch_list_through_the_cli(scheduler):
    address, env, tmp = scheduler
    config = tmp / "job.yaml"
    config.write_text(JOB)
    submitted = cli("submit", str(config), "--scheduler", address, env=env)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    watched = cli("watch", job_id, "--scheduler", address, env=env)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "[SUCCEEDED]" in watched.stdout and "step 5:" in watched.stdout
    run_dir = Path(watched.stdout.split("run dir: ")[1].splitlines()[0])
    assert (run_dir / "metrics.jsonl").is_file() and (run_dir / "curve.png").is_file()
    assert any((run_dir / "checkpoints").iterdir())
    listed = cli("list", "--state", "succeeded", "--scheduler", address, env=env)
    assert job_id in listed.stdout and "SUCCEEDED" in listed.stdout
    unknown = cli("cancel", "job-nope", "--scheduler", address, env=env)
    assert unknown.returncode == 2 and "NOT_FOUND" in unknown.stderr
    bad = cli("list", "--state", "sleeping", "--scheduler", address, env=env)
    assert bad.returncode == 2 and "unknown job state 'sleeping'" in bad.stderr


def test_an_unreachable_scheduler_exits_1_with_a_hint():
    result = cli("list", "--scheduler", f"127.0.0.1:{free_port()}", env=dict(os.environ))
    assert result.returncode == 1 and "cannot reach a scheduler" in result.stderr and "hint:" in result.stderr
