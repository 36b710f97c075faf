"""math/calculator-v0: the multi-turn tool protocol."""

from __future__ import annotations

import pytest

from tinker_core import Action, EnvSpec, ToolCall, format_tool_call
from tinker_env_math.calculator import (
    CALCULATOR_SPEC,
    CALCULATOR_TOOL,
    CalculatorEnv,
    calculator_problems,
)


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


# ---- native tool calls (tool_format="native") ------------------------------------------------------
def native_call(expression: object) -> str:
    return format_tool_call("calculator", {"expression": expression})


def test_native_tools_are_declared_in_the_spec_and_observations_are_chat() -> None:
    env = CalculatorEnv(tool_format="native")
    assert env.env_spec.tools == (CALCULATOR_TOOL,) and env.env_spec.observation_type == "chat"
    assert EnvSpec.from_json(env.env_spec.to_json()) == env.env_spec
    assert CALCULATOR_SPEC.tools == () and CalculatorEnv().env_spec is CALCULATOR_SPEC  # the tag path is unchanged
    obs, info = env.reset(seed=0, options={"expression": "347*29+118"})
    assert obs == [{"role": "user", "content": "What is 347*29+118?\nUse the calculator tool to calculate. "
                    "Reply <answer>number</answer> to finish.\n"}]
    assert info["answer"] == "10181"


def test_native_tool_then_answer() -> None:
    env = CalculatorEnv(tool_format="native")
    env.reset(seed=0, options={"expression": "347*29+118"})
    obs, reward, term, trunc, info = env.step("Let me compute.\n" + native_call("347*29"))
    assert obs == [{"role": "tool", "content": "10063", "name": "calculator", "tool_call_id": "call_0"}]
    assert (reward, term, trunc, info["event"], info["tool_calls"]) == (0.0, False, False, "calc", 1)
    obs, *_ = env.step(native_call("10063+118"))
    assert obs[0]["content"] == "10181"
    obs, reward, term, trunc, info = env.step("<answer>10181</answer>")
    assert (obs, reward, term, trunc, info["correct"]) == ([], 1.0, True, False, True)


def test_native_calls_parsed_by_the_rollout_are_used_as_given() -> None:
    env = CalculatorEnv(tool_format="native")
    env.reset(options={"expression": "2*3"})
    # the rollout parsed this action: its tool_calls are what the env answers, not its text
    action = Action("anything", "end_of_turn", (ToolCall("calculator", {"expression": "40+2"}, "call_0"),), ())
    obs, *_ = env.step(action)
    assert obs == [{"role": "tool", "content": "42", "name": "calculator", "tool_call_id": "call_0"}]


def test_several_native_calls_are_each_answered_in_order() -> None:
    env = CalculatorEnv(tool_format="native")
    env.reset(options={"expression": "2*3"})
    obs, _, _, _, info = env.step(native_call("1+1") + native_call("2**99999") + native_call("6*7"))
    assert [(m["tool_call_id"], m["content"]) for m in obs] == [
        ("call_0", "2"), ("call_1", obs[1]["content"]), ("call_2", "42")]
    assert obs[1]["content"].startswith("error: ")
    assert info["tool_calls"] == 3 and info["event"] == "calc"


@pytest.mark.parametrize(
    ("action", "error"),
    [
        ('<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}</tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "search", "arguments": {}}</tool_call>', "unknown tool 'search'"),
        ('<tool_call>{"name": "calculator", "arguments": {}}</tool_call>', "missing required argument(s) 'expression'"),
        ('<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}', "unclosed <tool_call>"),
        ('<tool_call>{"name": "calculator", "arguments": {"expression": ["1"]}}</tool_call>', "'expression' must be a string"),
        ('<tool_call>{"name": "calculator", "arguments": {"expression": "import os"}}</tool_call>', "error: "),
    ],
)
def test_a_malformed_native_call_is_answered_with_an_error_tool_message(action: str, error: str) -> None:
    env = CalculatorEnv(tool_format="native")
    env.reset(options={"expression": "2*3"})
    obs, reward, term, trunc, info = env.step(action)
    assert (reward, term, trunc, info["event"]) == (0.0, False, False, "error")
    assert len(obs) == 1 and obs[0]["role"] == "tool" and obs[0]["content"].startswith("error: ")
    assert error in obs[0]["content"]


def test_native_mode_without_a_call_or_answer_says_what_is_expected() -> None:
    env = CalculatorEnv(tool_format="native", max_turns=2)
    env.reset(options={"expression": "2*3"})
    obs, _, _, trunc, _ = env.step("<calc>2*3</calc>")  # a tag is not a tool call in native mode
    assert obs == [{"role": "user", "content": "<error>no calculator tool call or <answer>number</answer> found</error>\n"}]
    assert not trunc
    assert env.step("6")[1:3] == (1.0, True)  # a bare number is still a final answer


def test_tool_format_is_checked() -> None:
    with pytest.raises(ValueError, match="tool_format must be 'tags' or 'native'"):
        CalculatorEnv(tool_format="json")
