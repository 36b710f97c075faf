"""Two real Ray nodes on this machine, each in its own network namespace with its own address.

The test makes two namespaces joined by a veth pair with a private /30 (addresses only on the
interfaces it made, no route anywhere else), runs ``ray start --head`` in the first and
``ray start --address`` in the second (which alone has the custom resource the job's rollout
workers ask for), and a scheduler in the first (``netns_driver.py``). The distributed job's two
rollout workers are placed on the second node; after the job's first step the test kills every
process of the second namespace. The workers cannot come back (no other node has their resource),
so the job samples in its own process on the first node and finishes there. Everything it made is
deleted when it ends, pass or fail. It skips, saying why, where it cannot make namespaces (not
root, no ``ip``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tinker_scheduler.config import DEFAULT_RUNNER
from tinker_scheduler.worker import resolve_runner

HERE = Path(__file__).parent
SUBNET = ("10.231.77.1", "10.231.77.2")  # a private /30: the two ends of the veth pair
RAY_PORT = 6390
NODE_B_RESOURCE = "opentinker-test-node-b"


def _skip_reason() -> str | None:
    if sys.platform != "linux":
        return "network namespaces are Linux-only"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    try:
        resolve_runner(DEFAULT_RUNNER)
    except (ImportError, AttributeError):
        return f"{DEFAULT_RUNNER} is not importable"
    probe = f"otprobe{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60)


def _kill_namespace(ns: str) -> None:
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


@pytest.fixture
def namespaces() -> Iterator[tuple[str, str]]:
    """Two namespaces ``(a, b)`` joined by a veth pair, each end with one address of the /30."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tag = uuid.uuid4().hex[:6]
    a, b = f"ot-a-{tag}", f"ot-b-{tag}"
    try:
        _run("ip", "netns", "add", a)
        _run("ip", "netns", "add", b)
        _run("ip", "link", "add", f"ota{tag}", "type", "veth", "peer", "name", f"otb{tag}")
        _run("ip", "link", "set", f"ota{tag}", "netns", a)
        _run("ip", "link", "set", f"otb{tag}", "netns", b)
        for ns, dev, addr in ((a, f"ota{tag}", SUBNET[0]), (b, f"otb{tag}", SUBNET[1])):
            _run("ip", "-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            _run("ip", "-n", ns, "link", "set", dev, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        yield a, b
    finally:
        for ns in (b, a):
            _kill_namespace(ns)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # takes its veth end with it


def _in(ns: str, *cmd: str, env: dict[str, str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], env=env, text=True, capture_output=True, **kwargs)  # type: ignore[call-overload, no-any-return]


@pytest.mark.slow
def test_a_job_whose_rollout_workers_lose_their_node_finishes_on_the_first(namespaces: tuple[str, str], tmp_path: Path) -> None:
    a, b = namespaces
    ray = str(Path(sys.executable).parent / "ray")
    ray_tmp = Path(tempfile.mkdtemp(prefix="otray-", dir="/tmp"))  # short: Ray's socket paths must fit in 107 bytes
    env = {
        **os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
        "OPENTINKER_FAULTS": "",
    }
    env.pop("RAY_ADDRESS", None)
    head = _in(a, ray, "start", "--head", "--node-ip-address", SUBNET[0], "--port", str(RAY_PORT), "--num-cpus", "2",
               "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", str(ray_tmp), env=env, timeout=120)
    assert head.returncode == 0, head.stderr[-2000:]
    node = _in(b, ray, "start", "--address", f"{SUBNET[0]}:{RAY_PORT}", "--node-ip-address", SUBNET[1], "--num-cpus", "1",
               "--resources", json.dumps({NODE_B_RESOURCE: 2}), "--disable-usage-stats", env=env, timeout=120)
    assert node.returncode == 0, node.stderr[-2000:]
    config = {
        "name": "two-nodes",
        "seed": 0,
        "model": {"name": "tiny", "device": "cpu"},
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd"]}},
        "algorithm": {"name": "grpo", "steps": 40, "eval_size": 2},  # long enough to be killed in the middle
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 3},
        "logging": {"tensorboard": False, "plot": False},
        "resources": {"cpus": 1},
        "execution": {
            "rollout_workers": 2, "worker_restart_timeout_s": 10, "max_restarts": 1,
            "rollout_worker": {"num_cpus": 0.5, "resources": {NODE_B_RESOURCE: 1}},
        },
    }
    out = tmp_path / "out"
    out.mkdir()
    driver = subprocess.Popen(
        ["ip", "netns", "exec", a, sys.executable, str(HERE / "netns_driver.py"), f"{SUBNET[0]}:{RAY_PORT}", str(out), json.dumps(config)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 600
        while not (out / "first-step.json").exists():
            assert driver.poll() is None, f"the driver ended before the first step:\n{driver.stdout.read()[-4000:] if driver.stdout else ''}"
            assert time.monotonic() < deadline, "no first step within 10 minutes"
            time.sleep(0.5)
        _kill_namespace(b)  # the second node's raylet, its workers: all of it
        output, _ = driver.communicate(timeout=900)
    finally:
        if driver.poll() is None:
            driver.kill()
        # not `ray stop`: it stops every Ray on the machine (namespaces do not hide processes),
        # this test's session Ray and other jobs' included; the namespace's own processes are exact
        _kill_namespace(a)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert (out / "result.json").exists(), output[-4000:]
    result = json.loads((out / "result.json").read_text())
    from tinker_core.proto import jobs_pb2

    assert result["state"] == jobs_pb2.JOB_STATE_SUCCEEDED, (result["reason"], result["logs"][-20:])
    assert result["steps"][-1] == 40
    assert any("every rollout worker is gone" in line for line in result["logs"]), result["logs"][-20:]
    rows = [json.loads(line) for line in (Path(result["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 41))
    assert rows[0]["sync/workers"] == 2.0 and rows[-1]["sync/workers"] == 0.0
