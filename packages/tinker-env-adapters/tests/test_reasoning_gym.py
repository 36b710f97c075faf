"""reasoning-gym tasks as ``reasoning_gym/<task>-v0``, against the real reasoning-gym package."""

from __future__ import annotations

import functools

import pytest

import tinker_core
from tinker_core import check_env

reasoning_gym = pytest.importorskip("reasoning_gym", reason="needs tinker-env-adapters[reasoning-gym]")

from reasoning_gym.factory import DATASETS  # noqa: E402

from tinker_env_adapters import (  # noqa: E402
    REASONING_GYM_TASKS,
    TEST_SEED_OFFSET,
    AdapterError,
    ReasoningGymEnv,
)

CONFORMING = ["basic_arithmetic", "chain_sum", "spell_backward", "word_sorting", "countdown"]


def test_the_task_list_is_the_installed_reasoning_gym_s() -> None:
    assert sorted(REASONING_GYM_TASKS) == sorted(DATASETS)


@pytest.mark.parametrize("task", CONFORMING)
def test_tasks_conform(adapters_only: None, task: str) -> None:
    check_env(f"reasoning_gym/{task}-v0", seeds=(0, 1))


def test_configured_test_split_conforms(adapters_only: None) -> None:
    factory = functools.partial(
        tinker_core.make_env, "reasoning_gym/basic_arithmetic-v0",
        size=20, seed=3, split="test", config={"min_terms": 2, "max_terms": 2},
    )
    check_env(factory, seeds=(0, 1))


def test_the_right_answer_scores_one_tagged_or_bare_and_a_wrong_one_zero(adapters_only: None) -> None:
    env = tinker_core.make_env("reasoning_gym/basic_arithmetic-v0", size=10)
    for reply in ("think... <answer>{}</answer>", "{}"):
        _, info = env.reset(seed=0)
        obs, reward, terminated, truncated, step_info = env.step(reply.format(info["answer"]))
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert step_info["parsed"] == info["answer"]
    env.reset(seed=0)
    assert env.step("<answer>not a number</answer>")[1] == 0.0


def test_entries_are_reasoning_gym_s_own_and_splits_use_disjoint_generator_seeds() -> None:
    train = ReasoningGymEnv("chain_sum", size=5, seed=7)
    test = ReasoningGymEnv("chain_sum", size=5, seed=7, split="test")
    assert train.dataset.seed == 7 and test.dataset.seed == 7 + TEST_SEED_OFFSET
    direct = reasoning_gym.create_dataset("chain_sum", size=5, seed=7)
    for i in range(5):
        question, _ = train.reset(options={"index": i})
        assert question == direct[i]["question"]
    train_q = {train.dataset[i]["question"] for i in range(5)}
    test_q = {test.dataset[i]["question"] for i in range(5)}
    assert train_q != test_q


def test_the_spec_asks_chat_models_for_answer_tags(adapters_only: None) -> None:
    spec = tinker_core.env_spec("reasoning_gym/countdown-v0")
    assert "<answer>" in spec.system_prompt and spec.max_turns == 1 and spec.reward_range == (0.0, 1.0)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"config": {"nope": 1}}, "unknown field(s) ['nope']; BasicArithmeticDatasetConfig has:"),
        ({"config": {"seed": 1}}, "pass ['seed'] as env kwargs, not inside config"),
        ({"split": "dev"}, "split must be 'train' or 'test'"),
        ({"size": 0}, "size must be an int >= 1"),
    ],
)
def test_bad_kwargs_name_the_env_and_the_fix(kwargs: dict, fragment: str) -> None:
    with pytest.raises(AdapterError, match="reasoning_gym/basic_arithmetic-v0") as e:
        ReasoningGymEnv("basic_arithmetic", **kwargs)
    assert fragment in str(e.value)


def test_an_unknown_task_gets_a_did_you_mean() -> None:
    with pytest.raises(AdapterError, match="no task 'basic_arithmetik' .*did you mean 'basic_arithmetic'"):
        ReasoningGymEnv("basic_arithmetik")
