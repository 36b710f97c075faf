"""SkyRL-gym envs as ``skyrl/<name>-v0`` chat envs, against the real skyrl-gym package."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

import tinker_core
from tinker_core import check_env

skyrl_gym = pytest.importorskip("skyrl_gym", reason="needs tinker-env-adapters[skyrl-gym]")

from tinker_env_adapters import SKYRL_ENVS, AdapterError, SkyRLGymEnv  # noqa: E402

ROWS = [
    {"prompt": [{"role": "user", "content": f"What is {a} + {b}? End with '#### <answer>'."}],
     "reward_spec": {"ground_truth": str(a + b)}, "extra_info": {"max_turns": 3}}
    for a, b in [(2, 3), (10, 7), (41, 1)]
]


def test_the_env_list_is_the_installed_skyrl_gym_s() -> None:
    assert sorted(SKYRL_ENVS) == sorted(skyrl_gym.registry)


@pytest.mark.parametrize("name", ["gsm8k", "gsm8k_multi_turn"])
def test_envs_conform(adapters_only: None, name: str) -> None:
    factory = functools.partial(tinker_core.make_env, f"skyrl/{name}-v0", rows=ROWS)
    check_env(factory, seeds=(0, 1), actions=["#### 5", "no answer", "#### 17"])


def test_rewards_and_turns_are_skyrl_s(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS))
    env = SkyRLGymEnv("gsm8k_multi_turn", data_path=str(path))
    messages, info = env.reset(options={"index": 1})
    assert messages == ROWS[1]["prompt"] and info == {"index": 1}
    obs, reward, terminated, truncated, _ = env.step("I think #### 16")  # formatted, wrong
    assert 0.0 < reward < 1.0 and not terminated and obs[0]["role"] == "user" and "####" in obs[0]["content"]
    obs, reward, terminated, truncated, _ = env.step("#### 17")
    assert (obs, reward, terminated, truncated) == ([], 1.0, True, False)


def test_single_turn_gsm8k_scores_the_answer(adapters_only: None) -> None:
    env = tinker_core.make_env("skyrl/gsm8k-v0", rows=ROWS)
    assert tinker_core.env_spec("skyrl/gsm8k-v0").observation_type == "chat"
    env.reset(options={"index": 0})
    assert env.step("#### 5")[1:3] == (1.0, True)
    env.reset(options={"index": 0})
    assert env.step("#### 6")[1] == 0.0


def test_without_rows_the_error_says_what_to_pass() -> None:
    with pytest.raises(AdapterError, match=r"'skyrl/gsm8k-v0' needs its problems: SkyRL-gym ships none. Pass rows="):
        SkyRLGymEnv("gsm8k")


def test_a_row_the_env_cannot_use_names_the_row() -> None:
    env = SkyRLGymEnv("gsm8k", rows=[{"prompt": "2+2?"}])
    with pytest.raises(AdapterError, match=r"'skyrl/gsm8k-v0': SkyRL-gym's gsm8k rejected row 0"):
        env.reset(seed=0)
