"""The conformance kit over every env this package registers, found through its entry point."""

from __future__ import annotations

import functools

import pytest

import tinker_core
import tinker_core.registry

testing = pytest.importorskip(
    "tinker_core.testing", reason="this tinker-core has no conformance kit"
)

ENV_IDS = ["math/arithmetic-v0", "math/calculator-v0", "math/dataset-v0"]


def test_the_plugin_registers_exactly_these(math_plugin_only: None) -> None:
    mine = [p for p in tinker_core.registry.list_plugins() if p.distribution == "tinker-env-math"]
    assert len(mine) == 1 and sorted(mine[0].registers["envs"]) == sorted(ENV_IDS)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_registered_env_conforms(math_plugin_only: None, env_id: str) -> None:
    testing.check_env(env_id, seeds=(0, 1, 2))


@pytest.mark.parametrize(
    "factory",
    [
        functools.partial(
            tinker_core.make_env, "math/arithmetic-v0", difficulty="hard", format_reward=0.1
        ),
        functools.partial(
            tinker_core.make_env, "math/arithmetic-v0", split="test", allow_negative=True
        ),
        functools.partial(tinker_core.make_env, "math/calculator-v0", max_turns=2, num_terms=5),
        functools.partial(tinker_core.make_env, "math/calculator-v0", tool_format="native"),
    ],
    ids=["arithmetic-hard", "arithmetic-test-split", "calculator-short", "calculator-native-tools"],
)
def test_configured_envs_conform(math_plugin_only: None, factory: functools.partial) -> None:
    testing.check_env(factory, seeds=(0, 1))


def test_calculator_conforms_with_tool_calls(math_plugin_only: None) -> None:
    actions = [
        "<calc>12*34</calc>",
        "<calc>__import__('os')</calc>",
        "<calc>2**99999</calc>",
        "<answer>408</answer>",
    ]
    testing.check_env("math/calculator-v0", seeds=(0, 1), actions=actions)


def test_calculator_conforms_with_native_tool_calls(math_plugin_only: None) -> None:
    call = '<tool_call>{{"name": "calculator", "arguments": {{"expression": "{}"}}}}</tool_call>'
    actions = [
        call.format("12*34"),
        call.format("2**99999"),
        call.format("1+1") + call.format("2*3"),
        '<tool_call>{"name": "calculator", "arguments": "12*34"}</tool_call>',
        "<answer>408</answer>",
    ]
    env = functools.partial(tinker_core.make_env, "math/calculator-v0", tool_format="native")
    testing.check_env(env, seeds=(0, 1), actions=actions)
