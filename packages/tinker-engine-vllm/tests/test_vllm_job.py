"""A job with ``rollout.engine: vllm``: registered through the hook, refused before its first step
when no server answers, and trained against the stand-in (a LoRA GRPO job)."""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tinker_core.registry
import tinker_engine_vllm.plugin
from tinker_core import EnvSpec, hookimpl
from tinker_core.engines import EngineUnavailableError
from tinker_env_echo.envs import EchoEnv

PARITY = EnvSpec(id="test/parity-v0", description="Reward 1 when the answer's first character has an odd code.",
                 max_turns=1, reward_range=(0.0, 1.0))


class ParityEnv(EchoEnv):
    """An env a random policy gets right half the time: every group's rewards differ, so GRPO moves
    the adapter each step (an echo task it never solves would leave it where it was)."""

    env_spec = PARITY

    def step(self, action: str):
        return "", float(bool(action) and ord(action[0]) % 2 == 1), True, False, {}


@pytest.fixture
def plugins() -> Iterator[None]:
    """tinker-algos (hf, the losses), tinker-env-echo, the parity env and this package's plugin."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos,tinker-env-echo")
        tinker_core.registry.reset_plugins()
        tinker_core.registry.register_plugin(tinker_engine_vllm.plugin, distribution="tinker-engine-vllm")
        tinker_core.registry.register_plugin(
            types.SimpleNamespace(opentinker_register_envs=hookimpl(lambda register: register(PARITY, ParityEnv))), distribution="parity",
        )
        yield
    tinker_core.registry.reset_plugins()


def job(tiny_dir: Path, url: str, steps: int = 2) -> dict[str, Any]:
    return {
        "name": "vllm-job", "seed": 1, "model": {"name": str(tiny_dir)},
        "env": {"id": "test/parity-v0", "kwargs": {"words": ["ab", "cd"]}},
        "algorithm": {"name": "grpo", "steps": steps, "eval_size": 2},
        "lora": {"rank": 4, "alpha": 8},
        "optimizer": {"lr": 0.02},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 4, "engine": "vllm",
                    "engine_options": {"url": url, "timeout_s": 10}},
        "logging": {"tensorboard": False, "plot": False},
    }


def test_the_plugin_registers_vllm(plugins: None) -> None:
    entry = tinker_core.registry.get_rollout_engine("vllm")
    assert entry.distribution == "tinker-engine-vllm" and "vLLM server" in entry.description


def test_a_job_without_a_reachable_server_fails_before_its_first_step_in_one_line(plugins: None, tiny_dir: Path, tmp_path: Path) -> None:
    from tinker_algos import train

    with pytest.raises(EngineUnavailableError) as info:
        train(job(tiny_dir, "http://127.0.0.1:9"), run_dir=tmp_path)
    line = str(info.value)
    assert "\n" not in line and line.startswith("rollout.engine 'vllm': no vLLM server answers at http://127.0.0.1:9")
    assert "vllm serve" in line and "pip install vllm" in line
    assert not (tmp_path / "metrics.jsonl").exists() or not (tmp_path / "metrics.jsonl").read_text().strip()


def test_a_lora_job_trains_with_the_vllm_engine_against_the_stand_in(plugins: None, tiny_dir: Path, standin: Any, tmp_path: Path) -> None:
    from tinker_algos import train

    state, url = standin
    result = train(job(tiny_dir, url, steps=3), run_dir=tmp_path)
    assert result.status == "completed"
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["optim/grad_norm"] > 0 for r in rows)  # the adapter moved every step
    assert state.loads == ["vllm-job-v0", "vllm-job-v1", "vllm-job-v2"]  # a new name per version, each checked
    assert sorted(state.adapters) == ["vllm-job-v2"]  # the older ones retired


@pytest.mark.parametrize(("pitfall", "named"), [
    ("stale_cache", r"adapter 'vllm-job-v1' \(v1\): prompts this server scored before .* new prompts agree .* stale prefix cache .*vllm#42125"),
    ("zero_effect", r"loaded \(200 OK\) but changes nothing.*vllm#34186"),
    ("drop_on_pause", r"dropped adapter 'vllm-job-v0' \(v0\) by the pause before the update.*verl#7434"),
])
def test_each_pitfall_fails_the_job_with_a_message_naming_it(
    plugins: None, tiny_dir: Path, standin: Any, tmp_path: Path, pitfall: str, named: str,
) -> None:
    from tinker_algos import train
    from tinker_core.engines import WeightSyncError

    state, url = standin
    state.pitfalls.add(pitfall)
    with pytest.raises(WeightSyncError, match=named):
        train(job(tiny_dir, url, steps=3), run_dir=tmp_path)
    rows = (tmp_path / "metrics.jsonl").read_text().splitlines() if (tmp_path / "metrics.jsonl").exists() else []
    assert len(rows) == 1  # step 1 trained on v0's samples (a fresh adapter: the base model's); step 2 never sampled
