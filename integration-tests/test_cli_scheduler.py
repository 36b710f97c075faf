"""As a new user would, in two terminals: `opentinker scheduler start`, then submit, watch, list."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

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


@pytest.fixture
def scheduler(tmp_path):
    pytest.importorskip("tinker_scheduler", reason="needs tinker-scheduler (the integration session installs it)")
    port, metrics = free_port(), free_port()
    ray_tmp = tempfile.mkdtemp(prefix="ot-ray-")  # short: Ray's unix sockets live here
    env = {
        **os.environ,
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
        "RAY_AUTH_MODE": "disabled",
        "RAY_TMPDIR": ray_tmp,
        "OPENTINKER_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tinker_client.cli", "scheduler", "start", "--port", str(port), "--num-cpus", "2",
         "--db", str(tmp_path / "db.sqlite"), "--runs-dir", str(tmp_path / "runs"), "--metrics-port", str(metrics)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        seen = []
        while True:
            line = proc.stdout.readline()
            seen.append(line)
            if "listening on" in line:
                break
            if (not line and proc.poll() is not None) or time.monotonic() > deadline:
                pytest.fail("scheduler did not start:\n" + "".join(seen[-20:]))
        yield f"127.0.0.1:{port}", env, tmp_path
    finally:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # Ray's helpers too
        shutil.rmtree(ray_tmp, ignore_errors=True)


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
