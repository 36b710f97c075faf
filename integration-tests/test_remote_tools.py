"""Native tool calls through an env served over gRPC (`opentinker env serve`): the spec's tools,
the tool messages (with their name and call id) and the parse of plain-text actions all travel."""

from __future__ import annotations

import pytest

import tinker_core.registry
from tinker_core import Action, check_env, format_tool_call
from tinker_core.remote import RemoteEnv, serve_env
from tinker_env_math.calculator import CALCULATOR_TOOL


@pytest.fixture(scope="module")
def server():
    mp = pytest.MonkeyPatch()
    mp.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-env-math")
    tinker_core.registry.reset_plugins()
    try:
        with serve_env("math/calculator-v0") as handle:
            yield handle
    finally:
        mp.undo()
        tinker_core.registry.reset_plugins()


def test_a_served_calculator_offers_its_tool_and_answers_calls_with_tool_messages(server) -> None:
    env = RemoteEnv(server.address, "math/calculator-v0", tool_format="native")
    try:
        assert env.env_spec.tools == (CALCULATOR_TOOL,) and env.env_spec.observation_type == "chat"
        env.reset(seed=0, options={"expression": "12*34"})
        # the rollout's parse does not travel; the env parses the text again on its side
        action = Action(format_tool_call("calculator", {"expression": "12*34"}) + "<tool_call>{oops</tool_call>", "end_of_turn", (), ())
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs[0] == {"role": "tool", "content": "408", "name": "calculator", "tool_call_id": "call_0"}
        assert obs[1]["role"] == "tool" and obs[1]["tool_call_id"] == "call_1" and "not valid JSON" in obs[1]["content"]
        assert info["tool_calls"] == 2 and not (terminated or truncated)
        assert env.step("<answer>408</answer>")[1:3] == (1.0, True)
    finally:
        env.close()


def test_a_served_calculator_with_native_tools_conforms(server) -> None:
    check_env(lambda: RemoteEnv(server.address, "math/calculator-v0", tool_format="native"), seeds=(0, 1))
