"""The GPU check's ``vllm`` step (scripts/gpu_check_steps.py) against the vllm engine's stand-in
server (packages/tinker-engine-vllm/tests/conftest.py), since no real vLLM runs here: the step
syncs a trained adapter through the engine and measures vLLM's logprobs against the learner's;
a server whose adapter changes nothing fails it with the engine's message."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


standin_mod = load("vllm_standin", ROOT / "packages" / "tinker-engine-vllm" / "tests" / "conftest.py")
steps = load("gpu_check_steps", ROOT / "scripts" / "gpu_check_steps.py")


def run_step(tmp_path: Path, pitfalls: set[str]) -> dict:
    from tinker_algos.model.models import PolicyModel

    state = standin_mod.StandIn(PolicyModel.load("tiny", device="cpu", precision="fp32"))
    state.pitfalls |= pitfalls
    with standin_mod.serving(state) as url:
        steps.main(["vllm", "--json", str(tmp_path / "vllm.json"), "--device", "cpu", "--model", "tiny",
                    "--vllm-url", url, "--adapter-dir", str(tmp_path / "adapter")])
    return json.loads((tmp_path / "vllm.json").read_text())


def test_the_vllm_step_syncs_an_adapter_and_measures_parity(tmp_path):
    result = run_step(tmp_path, set())
    assert result["adapters"] == ["gpucheck-v1"] and result["weight_version"] == 1
    assert result["sampled_tokens"] > 0
    # the stand-in runs the same model on the same CPU: the same numbers up to float rounding
    assert result["logprob_max_abs_diff_vs_learner"] < 1e-4
    assert (tmp_path / "adapter" / "adapter_config.json").exists()  # left for the conformance test


def test_a_zero_effect_adapter_fails_the_step_naming_it(tmp_path):
    from tinker_core.engines import WeightSyncError

    with pytest.raises(WeightSyncError, match=r"loaded \(200 OK\) but changes nothing.*vllm#34186"):
        run_step(tmp_path, {"zero_effect"})
