"""The Tinker ecosystem check: the registry's ``tinker`` SDK and ``tinker-cookbook`` (pins in
``tinker_sdk/sdk_venv.py``), in their own virtual environment, run unmodified against
``opentinker scheduler start --tinker-port``:

(a) ``tinker_sdk/sdk_roundtrip.py``: train, sample, save and restore a LoRA with its optimizer;
(b) the cookbook's ``tinker_cookbook.recipes.math_rl.train`` with ``env=arithmetic``, two steps;
(c) ``tinker_sdk/custom_loss.py``: ``forward_backward_custom`` with a loss written on the client.

The model is the tiny preset written to a directory under the scheduler's ``--model-root``: the
cookbook loads the tokenizer of ``model_name`` with ``from_pretrained``, so the name must be a
directory (no hub at run time). The environment is made once per machine and pin set (about
10 s with a warm uv cache; a cold one downloads torch) and reused from ``$OPENTINKER_CACHE``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "tinker_sdk"
pytestmark = pytest.mark.skipif(shutil.which("uv") is None, reason="makes its virtual environment with uv")


def _sdk_venv():
    spec = importlib.util.spec_from_file_location("sdk_venv", HERE / "sdk_venv.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sdk_python(tmp_path_factory) -> Path:
    log = tmp_path_factory.mktemp("sdk-venv") / "install.log"
    try:
        return _sdk_venv().venv_python(log=log)
    except RuntimeError as e:
        pytest.fail(f"could not make the tinker/tinker-cookbook environment: {e}")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A scheduler started as a user would, with the Tinker API on a free port, and a tenant key."""
    pytest.importorskip("tinker_scheduler", reason="needs tinker-scheduler (the integration session installs it)")
    from tinker_algos.models import build_tiny_model

    tmp = tmp_path_factory.mktemp("tinker-gateway")
    tiny = build_tiny_model(tmp / "models" / "tiny")
    ray_tmp = tempfile.mkdtemp(prefix="ot-ray-")  # short: Ray's unix sockets live here
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": ray_tmp,
           "HF_HUB_OFFLINE": "1", "OPENTINKER_CACHE": str(tmp / "cache")}
    cli = [sys.executable, "-m", "tinker_client.cli", "scheduler"]
    db = str(tmp / "db.sqlite")
    key = subprocess.run([*cli, "add-tenant", "alice", "--db", db], capture_output=True, text=True, env=env,
                         check=True, timeout=120).stdout.strip()
    proc = subprocess.Popen(
        [*cli, "start", "--port", "0", "--tinker-port", "0", "--metrics-port", "-1", "--num-cpus", "2", "--db", db,
         "--runs-dir", str(tmp / "runs"), "--model-root", str(tmp / "models")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
    )
    try:
        deadline, seen, url = time.monotonic() + 180, [], None
        while url is None:
            line = proc.stdout.readline()
            seen.append(line)
            if m := re.search(r"tinker API at (http://\S+)", line):
                url = m.group(1)
            elif (not line and proc.poll() is not None) or time.monotonic() > deadline:
                pytest.fail("scheduler did not start:\n" + "".join(seen[-20:]))
        yield {"url": url, "key": "tml-" + key, "model": str(tiny), "tmp": tmp}
    finally:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # Ray's helpers too
        shutil.rmtree(ray_tmp, ignore_errors=True)


def run_sdk(python: Path, gateway: dict, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python *args`` as the separate environment's user: only the gateway's URL and key set."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(TINKER_BASE_URL=gateway["url"], TINKER_API_KEY=gateway["key"], HF_HUB_OFFLINE="1",
               TINKER_TELEMETRY="0", PYTHONNOUSERSITE="1", TOKENIZERS_PARALLELISM="false")
    r = subprocess.run([str(python), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=480)
    assert r.returncode == 0, f"exit {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return r


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_sdk_trains_samples_saves_and_restores_with_optimizer(sdk_python, gateway, tmp_path) -> None:
    out = last_json(run_sdk(sdk_python, gateway, str(HERE / "sdk_roundtrip.py"), gateway["model"], cwd=tmp_path).stdout)
    assert out["tinker"].startswith("0.38.")
    assert Path(out["tinker_file"]).is_relative_to(sdk_python.parent.parent)  # the registry's SDK, not ours
    assert out["losses"][0] > out["losses"][1] > out["losses"][2], out["losses"]
    assert len(out["samples"]) == 2 and all(1 <= len(s) <= 4 for s in out["samples"])
    assert out["state"] == f"tinker://{out['model_id']}/weights/after-3"
    assert out["restored_model_id"] != out["model_id"]
    assert out["loss_restored"] == pytest.approx(out["loss_before"], rel=1e-5)  # same weights
    a, b = out["loss_stepped"]  # the same Adam moments: the next identical step stays identical
    assert a == pytest.approx(b, rel=1e-5) and a < out["loss_before"]


def test_cookbook_math_rl_arithmetic_runs_its_steps(sdk_python, gateway, tmp_path) -> None:
    log_path = tmp_path / "math_rl"
    r = run_sdk(sdk_python, gateway, "-m", "tinker_cookbook.recipes.math_rl.train", f"model_name={gateway['model']}",
                "renderer_name=role_colon", "env=arithmetic", "group_size=2", "groups_per_batch=2", "max_tokens=4",
                "lora_rank=4", "learning_rate=1e-3", "max_steps=2",  # the default loss_fn: stable_reinforce
                f"log_path={log_path}", "behavior_if_log_dir_exists=delete", "eval_every=0", "save_every=0",
                cwd=tmp_path)
    assert "Training completed successfully" in r.stdout + r.stderr
    rows = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "optim/step" in row]
    assert [row["step"] for row in steps] == [0, 1]
    for row in steps:
        assert row["env/all/total_episodes"] == 4 and "env/all/reward/total" in row and row["tokens/trained"] > 0
    final = json.loads((log_path / "checkpoints.jsonl").read_text().splitlines()[-1])
    assert final["name"] == "final" and final["state_path"].startswith("tinker://")


def test_forward_backward_custom_loss(sdk_python, gateway, tmp_path) -> None:
    out = last_json(run_sdk(sdk_python, gateway, str(HERE / "custom_loss.py"), gateway["model"], cwd=tmp_path).stdout)
    assert out["nll"][0] > out["nll"][1] > out["nll"][2], out["nll"]  # the custom loss is what trains
    # the custom mean agrees with the server's own cross-entropy sum over the same tokens
    assert out["final_mean_nll"] == pytest.approx(out["ce_sum"] / out["n_targets"], rel=1e-4)
