"""Scripted opponents an env offers by name: from an instance, a class or a registered env id."""

from __future__ import annotations

import types
from typing import Any

import pytest

from tinker_core import hookimpl
from tinker_core.env import EnvSpec, MultiAgentTextEnv
from tinker_core.opponents import make_opponent, scripted_opponents
from tinker_core.registry import register_plugin


class FirstWord:
    """Answers a seeded word; stands for a game's RandomAgent."""

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    def __call__(self, role: str, observation: Any) -> str:
        return f"{role}-{self.seed}"


class Duel(MultiAgentTextEnv):
    env_spec = EnvSpec(id="loc/duel-v0", roles=("a", "b"))
    scripted_opponents = {"first": FirstWord}  # the contract: a class attribute

    def __init__(self) -> None:
        self.possible_agents = ["a", "b"]


class Plain(MultiAgentTextEnv):
    env_spec = EnvSpec(id="loc/plain-v0", roles=("a", "b"))


def test_an_env_offers_its_opponents_from_instance_and_class() -> None:
    assert scripted_opponents(Duel) == {"first": FirstWord} == scripted_opponents(Duel())
    assert scripted_opponents(Plain) == {} == scripted_opponents(Plain())
    agent = make_opponent(Duel(), "first", seed=7)
    assert isinstance(agent, FirstWord) and agent("b", "obs") == "b-7"


def test_a_registered_env_id_is_looked_up_in_the_registry() -> None:
    plugin = types.ModuleType("duel_plugin")
    plugin.opentinker_register_envs = hookimpl(lambda register: register(Duel.env_spec, Duel))  # type: ignore[attr-defined]
    register_plugin(plugin, distribution="duel-dist")
    assert scripted_opponents("loc/duel-v0") == {"first": FirstWord}
    assert make_opponent("loc/duel-v0", "first", seed=1)("a", "") == "a-1"


def test_an_unknown_opponent_names_what_the_env_offers() -> None:
    with pytest.raises(ValueError, match=r"loc/duel-v0 offers no scripted opponent 'minimax' \(it offers: first\)"):
        make_opponent(Duel(), "minimax")
    with pytest.raises(ValueError, match=r"loc/plain-v0 offers no scripted opponent 'random' \(it offers: none\)"):
        make_opponent(Plain, "random")
