from __future__ import annotations

import pytest

import tinker_core
import tinker_core.registry
from tinker_env_echo import CallResponseEnv, CountdownEnv, EchoEnv


def test_echo_rewards_an_exact_echo_only():
    env = EchoEnv()
    obs, info = env.reset(seed=7)
    word = info["target"]
    assert obs == f"Say: {word}\n"
    assert env.step(f"  {word}\n")[1:4] == (1.0, True, False)
    env.reset(seed=7)
    assert env.step(word.upper())[1] == 0.0


def test_countdown_pays_per_correct_number_and_stops_on_a_mistake():
    env = CountdownEnv(max_start=5)
    obs, info = env.reset(seed=1)
    n = info["start"]
    total = 0.0
    for k in range(n - 1, -1, -1):
        obs, r, term, trunc, _ = env.step(str(k))
        total += r
    assert total == n and term and not trunc
    env.reset(seed=1)
    _, r, term, _, _ = env.step("wrong")
    assert r == 0.0 and term


def test_call_response_scores_both_roles():
    env = CallResponseEnv()
    env.reset(seed=0)
    assert env.agent_selection == "caller"
    env.step("river")
    assert env.agent_selection == "responder" and env.observe("responder") == "Echo: river\n"
    env.step("river")
    assert env.done and env._cumulative_rewards == {"caller": 1.0, "responder": 1.0}


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="words must not be empty"):
        EchoEnv(words=())
    with pytest.raises(ValueError, match="max_start must be in 1..10"):
        CountdownEnv(max_start=0)


@pytest.mark.parametrize("env_id", ["echo/echo-v0", "echo/countdown-v0"])
def test_registered_envs_pass_the_conformance_kit(env_id):
    testing = pytest.importorskip("tinker_core.testing", reason="conformance kit not importable")
    testing.check_env(env_id)


def test_registered_multi_agent_env_passes_the_conformance_kit():
    testing = pytest.importorskip("tinker_core.testing", reason="conformance kit not importable")
    testing.check_multi_agent_env("echo/call-response-v0")


def test_entry_point_registers_all_three():
    tinker_core.registry.reset_plugins()
    assert {"echo/echo-v0", "echo/countdown-v0", "echo/call-response-v0"} <= set(tinker_core.registry.get_registry("envs").names())
