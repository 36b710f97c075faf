"""The GPU check's driver (``scripts/gpu_check.sh`` calls it): runs each step in its own process
under its own timeout and writes ONE JSON report plus the text log of everything the steps printed.

Steps on a GPU machine (the timeouts add up to 540 s, so the check ends within ten minutes):

=================  ====  ===================================================================
environment          30  torch, CUDA, cuDNN, the devices, bf16 support (fails: no CUDA device)
gpu-tests           170  ``pytest -m gpu packages`` (counts and the names of failures)
precision            90  a SmolLM2-135M GRPO step in fp32, bf16-mixed and fp16-mixed from the same
                         weights and batch: loss, grad norm and logprob gaps against fp32
sampler              60  ``sample`` vs ``model.generate`` new tokens/s (batches 16 and 64)
vllm                190  when ``vllm`` is importable: ``vllm serve`` SmolLM2 with LoRA, the
                         learner's adapter synced through the vllm engine (its probe check),
                         logprob parity of vLLM's samples with the learner, and the engine
                         conformance kit against that server; else skipped with the reason
=================  ====  ===================================================================

``--self-test`` (CPU, about a minute; CI runs it): the same driver with the tiny model on the
CPU and CUDA hidden: every gpu test must be collected and skipped with the reason, the
precision and sampler steps must produce their numbers, the vllm step is skipped, and the
report must have the shape :func:`check_report` checks.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STEPS_PY = ROOT / "scripts" / "gpu_check_steps.py"
SKIP_REASON = "needs a CUDA device (run scripts/gpu_check.sh on a GPU machine)"
SMOLLM2 = "smollm2-135m-instruct"
STATUSES = ("passed", "failed", "skipped", "timeout")
TIMEOUTS = {"environment": 30, "gpu-tests": 170, "precision": 90, "sampler": 60, "vllm": 190}
SELF_TEST_TIMEOUTS = {"environment": 60, "gpu-tests": 120, "precision": 120, "sampler": 120, "vllm": 10}


class Log:
    """Everything the steps print, to stdout and the text log."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("w")

    def write(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
        self.file.write(text)
        self.file.flush()


def run_cmd(cmd: list[str], timeout: float, log: Log, env: dict[str, str] | None = None) -> tuple[int | None, str]:
    """Run ``cmd`` in its own process group; on timeout kill the group. ``(returncode or None, output)``."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = None
    log.write(out)
    return rc, out


def json_step(name: str, args: list[str], timeout: float, log: Log, work: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """One step of ``gpu_check_steps.py``: its JSON result, or the failure."""
    out_json = work / f"{name}.json"
    rc, out = run_cmd([sys.executable, str(STEPS_PY), name, "--json", str(out_json), *args], timeout, log, env)
    if rc is None:
        return {"status": "timeout", "reason": f"did not finish in {timeout:.0f} s"}
    if rc != 0 or not out_json.exists():
        return {"status": "failed", "reason": (out.strip().splitlines() or ["no output"])[-1][:500]}
    return {"status": "passed", "result": json.loads(out_json.read_text())}


def gpu_tests(timeout: float, log: Log, work: Path, *, self_test: bool, env: dict[str, str]) -> dict[str, Any]:
    """``pytest -m gpu``; on the self-test every gpu test must be skipped with :data:`SKIP_REASON`."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "packages").glob("*/tests/test_*.py")
                   if "pytest.mark.gpu" in p.read_text())
    xml = work / "gpu-tests.xml"
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-rs", "-p", "no:cacheprovider", f"--junitxml={xml}",
           *(files if self_test else ["packages"])]
    rc, _ = run_cmd(cmd, timeout, log, env)
    if rc is None:
        return {"status": "timeout", "reason": f"did not finish in {timeout:.0f} s"}
    if not xml.exists():
        return {"status": "failed", "reason": f"pytest exited {rc} without a report"}
    cases = list(ET.parse(xml).getroot().iter("testcase"))
    result: dict[str, Any] = {"files": files, "collected": len(cases), "passed": 0, "failed": [], "skipped": []}
    for c in cases:
        name = f"{c.get('classname')}::{c.get('name')}"
        skipped = c.find("skipped")
        if c.find("failure") is not None or c.find("error") is not None:
            result["failed"].append(name)
        elif skipped is not None:
            result["skipped"].append({"test": name, "reason": skipped.get("message", "")})
        else:
            result["passed"] += 1
    if not cases:
        return {"status": "failed", "reason": "no gpu test was collected", "result": result}
    if self_test:
        off = [s for s in result["skipped"] if SKIP_REASON not in s["reason"]]
        if result["passed"] or result["failed"] or off:
            return {"status": "failed", "reason": f"on the CPU every gpu test must be skipped with '{SKIP_REASON}'", "result": result}
        return {"status": "passed", "result": result}
    if result["failed"] or rc != 0:
        return {"status": "failed", "reason": f"{len(result['failed'])} gpu tests failed", "result": result}
    return {"status": "passed", "result": result}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vllm_step(timeout: float, log: Log, work: Path, *, self_test: bool) -> dict[str, Any]:
    """``vllm serve`` SmolLM2 with LoRA, then the parity step and the engine's real-server test."""
    if importlib.util.find_spec("vllm") is None:
        return {"status": "skipped", "reason": "vllm is not importable here (pip install vllm on the GPU machine)"}
    if self_test:
        return {"status": "skipped", "reason": "the self-test starts no vLLM server"}
    from tinker_algos.hub.presets import preset_dir

    vllm_cli = Path(sys.executable).parent / "vllm"  # the console script of this environment's vllm
    if not vllm_cli.exists():
        return {"status": "failed", "reason": f"vllm is importable but {vllm_cli} is missing; reinstall vllm"}
    deadline = time.monotonic() + timeout
    model_dir, port = preset_dir(SMOLLM2), _free_port()
    url = f"http://127.0.0.1:{port}"
    server_log = (work / "vllm-serve.log").open("w")
    server = subprocess.Popen(
        [str(vllm_cli), "serve", str(model_dir), "--enable-lora", "--max-lora-rank", "8",
         "--port", str(port), "--gpu-memory-utilization", "0.3", "--max-model-len", "2048", "--enforce-eager"],
        cwd=ROOT, stdout=server_log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"},
    )
    try:
        while True:
            try:
                urllib.request.urlopen(f"{url}/v1/models", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline - 60:
                    log.write((work / "vllm-serve.log").read_text()[-4000:])
                    return {"status": "failed", "reason": f"vllm serve did not answer at {url} (exit {server.poll()})"}
                time.sleep(2)
        log.write(f"vllm serve up at {url} after {timeout - (deadline - time.monotonic()):.0f} s\n")
        adapter = work / "vllm-adapter"
        step = json_step("vllm", ["--device", "cuda", "--model", SMOLLM2, "--vllm-url", url, "--adapter-dir", str(adapter)],
                         max(10.0, deadline - time.monotonic() - 30), log, work)
        if step["status"] != "passed":
            return step
        env = {"OPENTINKER_VLLM_URL": url, "OPENTINKER_VLLM_ADAPTER": str(adapter)}
        test = "packages/tinker-engine-vllm/tests/test_vllm_engine.py::test_the_conformance_kit_against_a_real_vllm_server"
        rc, _ = run_cmd([sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", test], max(10.0, deadline - time.monotonic()), log, env)
        step["result"]["conformance_kit"] = {None: "timeout", 0: "passed"}.get(rc, "failed")
        if rc != 0:
            return {"status": "failed", "reason": "the engine conformance kit failed against vllm serve", "result": step["result"]}
        return step
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        server_log.close()


def check_report(report: dict[str, Any]) -> list[str]:
    """What is wrong with the report's shape (empty: nothing)."""
    problems = []
    for key, kind in {"kind": str, "format_version": int, "mode": str, "started": str, "git": (str, type(None)),
                      "wall_s": float, "budget_s": (int, float), "passed": bool, "steps": list}.items():
        if not isinstance(report.get(key), kind):
            problems.append(f"{key}: missing or not {kind}")
    names = [s.get("name") for s in report.get("steps", [])]
    if names != list(TIMEOUTS):
        problems.append(f"steps: {names}, expected {list(TIMEOUTS)}")
    for s in report.get("steps", []):
        if s.get("status") not in STATUSES or not isinstance(s.get("timeout_s"), (int, float)) or not isinstance(s.get("wall_s"), float):
            problems.append(f"step {s.get('name')}: status, timeout_s or wall_s missing")
        if s.get("status") == "passed" and not isinstance(s.get("result"), dict):
            problems.append(f"step {s.get('name')}: passed without a result")
        if s.get("status") != "passed" and not s.get("reason"):
            problems.append(f"step {s.get('name')}: {s.get('status')} without a reason")
    by_name = {s.get("name"): s for s in report.get("steps", [])}
    prec = (by_name.get("precision", {}).get("result") or {}).get("precisions", {})
    if by_name.get("precision", {}).get("status") == "passed":
        for p in ("fp32", "bf16-mixed", "fp16-mixed"):
            if not {"loss", "grad_norm", "loss_abs_diff_vs_fp32", "logprob_max_abs_diff_vs_fp32"} <= set(prec.get(p, {})):
                problems.append(f"precision: {p} lacks its loss and logprob agreement")
    runs = (by_name.get("sampler", {}).get("result") or {}).get("runs", [])
    if by_name.get("sampler", {}).get("status") == "passed" and not all({"sample_tok_s", "generate_tok_s"} <= set(r) for r in runs or [{}]):
        problems.append("sampler: runs lack sample_tok_s / generate_tok_s")
    if report.get("passed") != all(s.get("status") in ("passed", "skipped") for s in report.get("steps", [])):
        problems.append("passed: does not follow from the steps")
    return problems


def git_revision() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--self-test", action="store_true")
    p.add_argument("--output", help="the text log (default bench/results/gpu_check.txt; self-test: a temp dir)")
    p.add_argument("--json", help="the JSON report (default: the text log's path with .json)")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="gpu_check."))
    default_dir = work if args.self_test else ROOT / "bench" / "results"
    text = Path(args.output) if args.output else default_dir / "gpu_check.txt"
    report_path = Path(args.json) if args.json else text.with_suffix(".json")
    log = Log(text)
    self_test = args.self_test
    timeouts = SELF_TEST_TIMEOUTS if self_test else TIMEOUTS
    env = {"CUDA_VISIBLE_DEVICES": ""} if self_test else {}  # the self-test holds on a GPU machine too
    device, model = ("cpu", "tiny") if self_test else ("cuda", SMOLLM2)
    small = ["--prompts", "4", "--group", "4", "--new-tokens", "16"] if self_test else []
    sampler_args = ["--batches", "8", "--new-tokens", "16", "--repeats", "1"] if self_test else ["--batches", "16", "64"]
    report: dict[str, Any] = {
        "kind": "opentinker-gpu-check", "format_version": 1, "mode": "self-test" if self_test else "gpu",
        "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "git": git_revision(),
        "budget_s": sum(timeouts.values()), "text_log": str(text), "steps": [],
    }
    t_start = time.perf_counter()
    runners = {
        "environment": lambda t: json_step("environment", [], t, log, work, env),
        "gpu-tests": lambda t: gpu_tests(t, log, work, self_test=self_test, env=env),
        "precision": lambda t: json_step("precision", ["--device", device, "--model", model, *small], t, log, work, env),
        "sampler": lambda t: json_step("sampler", ["--device", device, "--model", model, *sampler_args], t, log, work, env),
        "vllm": lambda t: vllm_step(t, log, work, self_test=self_test),
    }
    no_cuda = False
    for name, timeout in timeouts.items():
        log.write(f"\n=== {name} (timeout {timeout} s) ===\n")
        t0 = time.perf_counter()
        if no_cuda:
            step = {"status": "skipped", "reason": "no CUDA device visible to torch; on a CPU machine run --self-test"}
        else:
            step = runners[name](timeout)
        step = {"name": name, "timeout_s": timeout, "wall_s": round(time.perf_counter() - t0, 2), **step}
        if name == "environment" and step["status"] == "passed":
            report["environment"] = step["result"]
            if not self_test and not step["result"]["cuda_available"]:
                step.update(status="failed", reason="no CUDA device visible to torch; on a CPU machine run --self-test")
                no_cuda = True
        log.write(f"--- {name}: {step['status']}{': ' + step['reason'] if step.get('reason') else ''} ({step['wall_s']} s)\n")
        report["steps"].append(step)
    report["wall_s"] = round(time.perf_counter() - t_start, 2)
    report["passed"] = all(s["status"] in ("passed", "skipped") for s in report["steps"])
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(report, indent=2, default=float) + "\n")
    problems = check_report(report)
    if self_test:
        log.write("\n=== report shape ===\n" + ("\n".join(f"FAIL: {x}" for x in problems) or "report shape ok") + "\n")
    ok = report["passed"] and not problems
    log.write(f"\nreport written to {report_path} (log {text})\n")
    log.write(f"=== {'self-test' if self_test else 'GPU check'} {'passed' if ok else 'FAILED'} ===\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
