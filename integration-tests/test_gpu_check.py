"""scripts/gpu_check.sh (issue 17): its CPU self-test passes here, so the script, the gpu-marked
tests and bench/bench_gpu.py are ready for the day a GPU machine runs the real check."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.sh"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPU_CHECK_PYTHON": sys.executable}  # this environment's python, not uv run's
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)


def test_the_self_test_passes_on_the_cpu():
    result = run("--self-test")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "syntax ok" in out
    # every gpu test is collected and skipped, each with the reason that names the script
    assert "gpu tests collected, all skipped with the reason" in out
    assert "test_gpu.py" in out and "test_gpu_hosts.py" in out
    assert "needs a CUDA device (run scripts/gpu_check.sh on a GPU machine)" in out
    assert "ok: bench CPU path ran" in out
    for phase in ("sampling", "training"):  # the table's rows: tokens/s on the tiny model
        assert re.search(rf"^\|\s+tiny \|[^\n]*\| {phase} \|", out, re.MULTILINE), out[-2000:]
    assert out.rstrip().endswith("=== self-test passed ===")


def test_options_are_checked_before_anything_runs():
    assert run("--bogus").returncode == 2
    usage = run("--help")
    assert usage.returncode == 0 and "--self-test" in usage.stdout and "pytest -m gpu" in usage.stdout
