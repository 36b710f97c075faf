"""math/calculator-v0: the multi-turn tool protocol."""

from __future__ import annotations

import pytest

from tinker_env_math.calculator import CALCULATOR_SPEC, CalculatorEnv, calculator_problems


def test_seeded_problems() -> None:
    env = CalculatorEnv()
    first = [env.reset(seed=s)[1]["expression"] for s in range(10)]
    assert first == [CalculatorEnv().reset(seed=s)[1]["expression"] for s in range(10)]
    assert len(set(first)) > 5
    expr, answer = calculator_problems(1, seed=4)[0]
    assert expr == CalculatorEnv().reset(seed=4)[1]["expression"]
    assert int(answer) == eval(expr, {"__builtins__": {}})  # test oracle only: digits and + - *


def test_tool_then_answer() -> None:
    env = CalculatorEnv()
    obs, info = env.reset(seed=0, options={"expression": "347*29+118"})
    assert obs.startswith("What is 347*29+118?\n") and "<calc>" in obs
    assert info["answer"] == "10181"
    obs, reward, term, trunc, info = env.step("Let me compute. <calc>347*29</calc>")
    assert (obs, reward, term, trunc) == ("<result>10063</result>\n", 0.0, False, False)
    assert info["event"] == "calc" and info["tool_calls"] == 1
    obs, reward, term, trunc, _ = env.step("<calc>10063 + 118</calc>")
    assert obs == "<result>10181</result>\n"
    obs, reward, term, trunc, info = env.step("<answer>10181</answer>")
    assert (reward, term, trunc) == (1.0, True, False)
    assert info["correct"] and info["turn"] == 3
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("1")


@pytest.mark.parametrize(
    ("action", "reward"),
    [
        ("10181", 1.0),
        ("10181.\n", 1.0),
        ("The answer is 10181", 1.0),
        ("#### 10181", 1.0),
        (r"\boxed{10181}", 1.0),
        ("<answer>10180</answer>", 0.0),
        ("<answer>none</answer>", 0.0),
        ("<calc>1+1</calc><answer>10181</answer>", 1.0),
    ],  # <answer> ends the episode
)
def test_final_answer_forms(action: str, reward: float) -> None:
    env = CalculatorEnv()
    env.reset(options={"expression": "347*29+118"})
    _, r, terminated, truncated, info = env.step(action)
    assert (r, terminated, truncated, info["event"]) == (reward, True, False, "final")


def test_format_reward_for_wrong_final_answer() -> None:
    env = CalculatorEnv(format_reward=0.2)
    env.reset(options={"expression": "2*3"})
    assert env.step("<answer>7</answer>")[1] == 0.2


@pytest.mark.parametrize(
    ("action", "fragment"),
    [
        ("<calc>__import__('os').system('ls')</calc>", "unexpected character '_'"),
        ("<calc>2**10**10</calc>", "magnitude limit"),
        ("<calc>" + "1+" * 60 + "1</calc>", "longer than 100 characters"),
        ("<calc>1/0</calc>", "division by zero"),
        ("<calc>12*34", "unclosed <calc> tag"),
        ("<calc></calc>", "empty expression"),
        ("hmm, let me think", "no <calc>expression</calc> call"),
        ("", "no <calc>expression</calc> call"),
    ],
)
def test_bad_calls_are_error_observations(action: str, fragment: str) -> None:
    env = CalculatorEnv()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs.startswith("<error>") and obs.endswith("</error>\n")
    assert fragment in obs
    assert (reward, terminated, truncated, info["event"]) == (0.0, False, False, "error")


def test_turn_limit_truncates() -> None:
    env = CalculatorEnv(max_turns=2)
    assert env.env_spec.max_turns == 2 and CALCULATOR_SPEC.max_turns == 4
    env.reset(seed=0)
    assert env.step("<calc>1+1</calc>")[3] is False
    obs, reward, terminated, truncated, _ = env.step("<calc>1+2</calc>")
    assert (obs, reward, terminated, truncated) == ("<result>3</result>\n", 0.0, False, True)
    with pytest.raises(RuntimeError):
        env.step("<answer>3</answer>")


def test_magnitude_limit_kwarg() -> None:
    env = CalculatorEnv(max_magnitude=1000)
    env.reset(options={"expression": "30*40"})
    assert "magnitude limit" in env.step("<calc>30*40</calc>")[0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_terms": 1}, "num_terms"),
        ({"max_turns": 0}, "max_turns"),
        ({"max_expression_chars": 0}, "max_expression_chars"),
        ({"format_reward": -0.1}, "format_reward"),
        ({"ops": "/"}, "ops must be"),
    ],
)
def test_bad_kwargs(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CalculatorEnv(**kwargs)
