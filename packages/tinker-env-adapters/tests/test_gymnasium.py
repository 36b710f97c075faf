"""Gymnasium's own envs as ``gym/<id>`` text envs, against the installed gymnasium."""

from __future__ import annotations

import functools

import pytest

import tinker_core
from tinker_core import check_env
from tinker_core.registry import list_plugins
from tinker_env_adapters import AdapterError

ENVS = ["gym/FrozenLake-v1", "gym/Taxi-v4", "gym/CliffWalking-v1", "gym/Blackjack-v1"]


@pytest.mark.parametrize("env_id", ENVS)
def test_discrete_envs_conform(adapters_only: None, env_id: str) -> None:
    check_env(env_id, seeds=(0, 1), max_steps=200)


def test_make_kwargs_pass_through_and_a_solved_path_scores(adapters_only: None) -> None:
    factory = functools.partial(tinker_core.make_env, "gym/FrozenLake-v1", is_slippery=False, max_turns=8)
    check_env(factory, seeds=(0,), actions=["1", "2"])
    env = factory()
    obs, _ = env.reset(seed=0)
    assert obs.startswith("[S]FFF") and obs.endswith("Observation: 0")
    rewards = [env.step(a)[1] for a in ("1", "1", "2", "2", "1", "2")]  # down, down, right, right, down, right
    assert rewards[-1] == 1.0 and env.env_spec.reward_range == (0.0, 1.0) and env.env_spec.max_turns == 8


def test_an_unparsable_action_ends_the_episode(adapters_only: None) -> None:
    env = tinker_core.make_env("gym/Taxi-v4")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("go north")
    assert (reward, terminated, truncated) == (0.0, False, True) and info == {"invalid_action": "go north"}


def test_a_space_without_text_form_names_env_and_space(adapters_only: None) -> None:
    with pytest.raises(AdapterError, match=r"'gym/CartPole-v1': gymnasium's CartPole-v1 has observation space Box"):
        tinker_core.make_env("gym/CartPole-v1")


def test_gymnasium_s_registry_is_registered_but_not_opentinker_s_own_envs(adapters_only: None) -> None:
    envs = next(p for p in list_plugins() if p.distribution == "tinker-env-adapters").registers["envs"]
    assert {"gym/FrozenLake-v1", "gym/CartPole-v1"} <= set(envs)
    assert not [e for e in envs if e.startswith("gym/gym.") or e.startswith("gym/math")]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_max_turns_must_be_at_least_1(adapters_only: None, bad: object) -> None:
    """Issue 43: ``max_turns: 0`` read as "the default" and was accepted."""
    with pytest.raises(AdapterError, match=r"max_turns must be an int >= 1"):
        tinker_core.make_env("gym/FrozenLake-v1", max_turns=bad)
    assert tinker_core.make_env("gym/FrozenLake-v1", max_turns=1).env_spec.max_turns == 1


def adapters_info():
    return next(p for p in list_plugins() if p.distribution == "tinker-env-adapters")


def test_gym_ids_without_a_text_form_are_marked_unavailable_and_indeed_fail_to_build(adapters_only: None) -> None:
    """The seed documents' ``Pendulum-v1``: registered (so a config naming it gets the reason),
    marked unavailable; every marked id whose family imports here fails to build for that reason."""
    info = adapters_info()
    assert info.unavailable["gym/Pendulum-v1"].startswith("no text form (Box observations)")
    assert "gym/FrozenLake-v1" not in info.unavailable and "gym/Taxi-v4" not in info.unavailable
    classic = ["gym/CartPole-v1", "gym/Acrobot-v1", "gym/MountainCar-v0", "gym/MountainCarContinuous-v0", "gym/Pendulum-v1"]
    for env_id in classic:  # gymnasium's classic_control imports here (box2d, mujoco and jax do not)
        assert info.unavailable[env_id].startswith("no text form")
        with pytest.raises(AdapterError, match="has observation space Box"):
            tinker_core.make_env(env_id)


def test_every_gym_id_not_marked_builds_here(adapters_only: None) -> None:
    info = adapters_info()
    buildable = [e for e in info.registers["envs"] if e.startswith("gym/") and e not in info.unavailable]
    assert set(ENVS) <= set(buildable)
    for env_id in buildable:
        env = tinker_core.make_env(env_id)
        observation, _ = env.reset(seed=0)
        assert isinstance(observation, str) and observation
