"""math/arithmetic-v0: generation, seeding, held-out split, scoring, discovery."""

from __future__ import annotations

import re

import pytest

import tinker_core
import tinker_core.registry
from tinker_env_math.arithmetic import (
    ARITHMETIC_SPEC,
    ArithmeticEnv,
    arithmetic_problems,
    gold_answer,
    problem_split,
    score_answer,
)

PROMPT_RE = re.compile(r"^(\d+)([-+*])(\d+)=$")


def _oracle(prompt: str) -> int:
    a, op, b = PROMPT_RE.match(prompt).groups()  # type: ignore[union-attr]
    return {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]


def _episode_prompts(env: ArithmeticEnv, seed: int, n: int) -> list[str]:
    prompts = [env.reset(seed=seed)[0]]
    prompts += [env.reset()[0] for _ in range(n - 1)]
    return prompts


def test_same_seed_same_problems() -> None:
    a, b = ArithmeticEnv(ops="+-*"), ArithmeticEnv(ops="+-*")
    assert _episode_prompts(a, 7, 20) == _episode_prompts(b, 7, 20)
    assert _episode_prompts(a, 7, 20) == _episode_prompts(a, 7, 20)  # re-seeding restarts
    assert _episode_prompts(a, 7, 20) != _episode_prompts(a, 8, 20)


def test_default_prompt_format_and_gold() -> None:
    env = ArithmeticEnv()
    for seed in range(50):
        prompt, info = env.reset(seed=seed)
        a, op, b = PROMPT_RE.match(prompt).groups()  # type: ignore[union-attr]
        assert op == "+" and len(a) == 2 and len(b) == 2
        assert info["answer"] == str(_oracle(prompt))
        assert info["target"] == info["answer"] + "\n"


@pytest.mark.parametrize(
    ("kwargs", "digit_range", "ops"),
    [
        ({"digits": 1}, (1, 1), {"+"}),
        ({"digits": 3, "ops": "*"}, (3, 3), {"*"}),
        ({"digits": [1, 3], "ops": ["+", "-"]}, (1, 3), {"+", "-"}),
        ({"difficulty": "easy"}, (1, 1), {"+", "-"}),
        ({"difficulty": "medium"}, (2, 2), {"+", "-"}),
        ({"difficulty": "hard"}, (3, 3), {"+", "-", "*"}),
        ({"difficulty": "hard", "digits": 2}, (2, 2), {"+", "-", "*"}),  # explicit wins
    ],
)
def test_digits_ops_difficulty(kwargs: dict, digit_range: tuple[int, int], ops: set[str]) -> None:
    env = ArithmeticEnv(split="all", **kwargs)
    seen_ops = set()
    for seed in range(200):
        prompt, info = env.reset(seed=seed)
        a, op, b = PROMPT_RE.match(prompt).groups()  # type: ignore[union-attr]
        seen_ops.add(op)
        for operand in (a, b):
            assert digit_range[0] <= len(operand) <= digit_range[1]
            assert operand == str(int(operand))  # no leading zeros
        assert info["answer"] == str(_oracle(prompt))
        if op == "-":
            assert int(info["answer"]) >= 0  # allow_negative defaults to False
    assert seen_ops == ops


def test_allow_negative() -> None:
    env = ArithmeticEnv(ops="-", allow_negative=True, split="all")
    answers = [int(env.reset(seed=s)[1]["answer"]) for s in range(100)]
    assert min(answers) < 0 < max(answers)


def test_rewards() -> None:
    env = ArithmeticEnv()
    prompt, info = env.reset(seed=0, options={"prompt": "12+35="})
    assert prompt == "12+35=" and info["answer"] == "47"
    cases = {
        "47\n": 1.0,
        "47": 1.0,
        " 47. ": 1.0,
        "The answer is 47": 1.0,
        r"\boxed{47}": 1.0,
        "#### 47": 1.0,
        "46\n": 0.0,
        "": 0.0,
        "forty-seven": 0.0,
    }
    for action, expected in cases.items():
        env.reset(options={"prompt": "12+35="})
        obs, reward, terminated, truncated, step_info = env.step(action)
        assert (obs, reward, terminated, truncated) == ("", expected, True, False), action
        assert step_info["correct"] is (expected == 1.0)


def test_negative_answers_and_format_reward() -> None:
    env = ArithmeticEnv(format_reward=0.1)
    env.reset(options={"prompt": "5-12="})
    assert env.step("-7\n")[1] == 1.0
    env.reset(options={"prompt": "5-12="})
    assert env.step("7\n")[1] == 0.1  # well-formed but wrong
    env.reset(options={"prompt": "5-12="})
    assert env.step("no idea")[1] == 0.0
    assert score_answer("The answer is -7.", "-7") == 1.0
    assert score_answer("I got 3 or 4", "-7", format_reward=0.5) == 0.0  # no explicit form


def test_step_needs_reset() -> None:
    env = ArithmeticEnv()
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("1")
    env.reset(seed=0)
    env.step("1")
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("1")


def test_gold_answer() -> None:
    assert gold_answer("12+35=") == "47"
    assert gold_answer("12*3=") == "36"
    assert gold_answer("3-10=") == "-7"
    with pytest.raises(ValueError, match="not an arithmetic prompt"):
        gold_answer("twelve")


def test_eval_set_is_deterministic_unique_and_held_out() -> None:
    problems = arithmetic_problems(200, seed=123)
    assert problems == arithmetic_problems(200, seed=123)
    assert problems != arithmetic_problems(200, seed=124)
    prompts = [p.prompt for p in problems]
    assert len(set(prompts)) == 200
    assert all(problem_split(p) == "test" for p in prompts)
    for prompt, answer in problems:  # unpacks as (prompt, answer)
        assert answer == str(_oracle(prompt))
    first = problems[0]
    assert first.text == first.prompt + first.answer + "\n"
    # the env's training distribution never poses a held-out problem
    env = ArithmeticEnv()
    train_prompts = {env.reset(seed=s)[0] for s in range(500)}
    assert not train_prompts & set(prompts)
    assert all(problem_split(p) == "train" for p in train_prompts)


def test_split_fraction_is_about_a_tenth() -> None:
    prompts = [f"{a}+{b}=" for a in range(10, 100) for b in range(10, 100)]
    test_share = sum(problem_split(p) == "test" for p in prompts) / len(prompts)
    assert 0.08 < test_share < 0.12


def test_problem_space_too_small() -> None:
    with pytest.raises(ValueError, match="distinct 'test' problems"):
        arithmetic_problems(50, seed=0, digits=1, ops="+")
    assert len(arithmetic_problems(50, seed=0, digits=1, ops="+", unique=False)) == 50


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"digits": 0}, "digits must be between 1 and 9"),
        ({"digits": [3, 2]}, "min <= max"),
        ({"digits": [1, 2, 3]}, r"\[min, max\]"),
        ({"ops": "/"}, "ops must be"),
        ({"ops": ""}, "ops must be"),
        ({"difficulty": "insane"}, "difficulty must be one of easy, medium, hard"),
        ({"split": "val"}, "split must be"),
        ({"format_reward": 1.0}, r"format_reward must be in \[0, 1\)"),
    ],
)
def test_bad_kwargs_name_the_argument(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ArithmeticEnv(**kwargs)


def test_make_env_through_the_entry_point(math_plugin_only: None) -> None:
    env = tinker_core.make_env("math/arithmetic-v0", digits=1, ops="*")
    assert isinstance(env, ArithmeticEnv)
    assert env.env_spec == ARITHMETIC_SPEC
    prompt, info = env.reset(seed=3)
    assert "*" in prompt
    assert env.step(info["answer"] + "\n")[1] == 1.0
    assert tinker_core.registry.env_spec("math/arithmetic-v0").action_format.startswith("the result")
    with pytest.raises(KeyError, match="did you mean 'math/arithmetic-v0'"):
        tinker_core.make_env("math/arithmetics-v0")


def test_readme_example(math_plugin_only: None) -> None:
    env = tinker_core.make_env("math/arithmetic-v0", digits=2, ops="+-")
    assert env.reset(seed=0) == ("67-56=", {"answer": "11", "target": "11\n"})
    assert env.step("11\n")[1:3] == (1.0, True)


@pytest.mark.parametrize("env_id", ["math/arithmetic-v0", "math/calculator-v0", "math/dataset-v0"])
def test_envs_pickle_mid_episode(math_plugin_only: None, env_id: str) -> None:
    """Envs travel to rollout workers: a pickled copy continues exactly like the original."""
    import pickle

    env = tinker_core.make_env(env_id)
    env.reset(seed=5)
    clone = pickle.loads(pickle.dumps(env))
    assert clone.step("<calc>1+1</calc>") == env.step("<calc>1+1</calc>")
    assert clone.reset() == env.reset()
