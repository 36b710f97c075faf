"""scripts/gpu_check.sh (issues 17, 45): its CPU self-test passes here and writes the one JSON
report the GPU run writes, so the script, its driver, the gpu-marked tests and the measuring steps
are ready for the day a GPU machine runs the real check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
SKIP_REASON = "needs a CUDA device (run scripts/gpu_check.sh on a GPU machine)"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPU_CHECK_PYTHON": sys.executable}  # this environment's python, not uv run's
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)


def test_the_self_test_passes_on_the_cpu_and_writes_the_report(tmp_path):
    result = run("--cpu-selftest", "--output", str(tmp_path / "gpu_check.txt"))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "syntax ok" in out and "report shape ok" in out
    assert out.rstrip().endswith("=== self-test passed ===")
    assert (tmp_path / "gpu_check.txt").read_text().strip().endswith("=== self-test passed ===")

    report = json.loads((tmp_path / "gpu_check.json").read_text())
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_check import check_report

    assert check_report(report) == []
    assert (report["kind"], report["mode"], report["passed"]) == ("opentinker-gpu-check", "self-test", True)
    steps = {s["name"]: s for s in report["steps"]}
    assert list(steps) == ["environment", "gpu-tests", "precision", "sampler", "vllm"]
    assert report["environment"]["cuda_available"] is False  # CUDA hidden, so this holds on a GPU machine too
    # every gpu test is collected and skipped, each with the reason that names the script
    tests = steps["gpu-tests"]["result"]
    assert {Path(f).name for f in tests["files"]} == {"test_gpu.py", "test_gpu_hosts.py"}
    assert tests["collected"] == len(tests["skipped"]) > 0 and tests["passed"] == 0 and tests["failed"] == []
    assert all(SKIP_REASON in s["reason"] for s in tests["skipped"])
    # the precision step compared bf16-mixed and fp16-mixed with fp32 on the same batch
    prec = steps["precision"]["result"]["precisions"]
    assert prec["fp32"]["loss_abs_diff_vs_fp32"] == 0.0
    assert prec["fp16-mixed"]["grad_scale"] == 65536.0 and prec["bf16-mixed"]["grad_scale"] is None
    for p in ("bf16-mixed", "fp16-mixed"):
        assert 0 < prec[p]["logprob_max_abs_diff_vs_fp32"] < 0.1, prec[p]  # close, and not the same numbers
    (row,) = steps["sampler"]["result"]["runs"]
    assert row["sample_tok_s"] > 0 and row["generate_tok_s"] > 0
    assert steps["vllm"]["status"] == "skipped" and steps["vllm"]["reason"]
    # a damaged report is caught
    broken = {**report, "steps": report["steps"][:2]}
    assert any("steps:" in p for p in check_report(broken))


def test_options_are_checked_before_anything_runs():
    assert run("--bogus").returncode == 2
    usage = run("--help")
    assert usage.returncode == 0 and "--self-test" in usage.stdout and "pytest -m gpu" in usage.stdout
    assert "bench/results/gpu_check.json" in usage.stdout
