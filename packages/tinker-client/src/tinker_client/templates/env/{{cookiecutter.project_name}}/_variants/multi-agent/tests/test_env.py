"""Tests of ``{{ cookiecutter.__env_id }}`` and its solo view: the conformance kit, then the rules."""

from __future__ import annotations

import pytest
from tinker_core import play_episode
from tinker_core import make_opponent
from tinker_core import env_spec, get_registry
from tinker_core import check_env, check_multi_agent_env

from {{ cookiecutter.__module }}.env import (
    SOLO_SPEC,
    SPEC,
    RandomTaker,
    {{ cookiecutter.__class }}Game,
    {{ cookiecutter.__class }}SoloEnv,
    legal_takes,
)


def take_one(observation, info):
    """A policy that always plays legally: take one stone."""
    return "1"


def test_the_game_passes_the_conformance_kit():
    check_multi_agent_env({{ cookiecutter.__class }}Game)
    check_multi_agent_env({{ cookiecutter.__class }}Game, actions=take_one)  # whole legal games, too


def test_the_solo_env_passes_the_conformance_kit():
    check_env({{ cookiecutter.__class }}SoloEnv)
    check_env({{ cookiecutter.__class }}SoloEnv, actions=take_one)


def test_the_installed_plugin_registers_both_envs():
    # Goes through the entry point in pyproject.toml: fails until `pip install -e .`
    registry = get_registry("envs")
    for spec in (SPEC, SOLO_SPEC):
        assert registry.get(spec.id).distribution == "{{ cookiecutter.project_name }}"
        assert env_spec(spec.id) == spec
    check_multi_agent_env(SPEC.id)
    check_env(SOLO_SPEC.id)


def test_whoever_takes_the_last_stone_wins():
    game = {{ cookiecutter.__class }}Game(min_stones=5, max_stones=5)
    game.reset(seed=0)
    assert game.stones == 5 and game.agent_selection == "first"
    game.step("1")   # first: 4 left, a losing pile for the player to move
    game.step("3")   # second: 1 left
    assert not game.done and game.infos["first"]["legal_moves"] == [1]
    game.step("1")   # first takes the last stone
    assert game.done and game.winner == "first"
    assert game._cumulative_rewards == {"first": 1.0, "second": -1.0}
    assert "You won." in game.observe("first") and "You lost." in game.observe("second")


def test_an_illegal_move_loses_at_once():
    game = {{ cookiecutter.__class }}Game()
    game.reset(seed=1)
    game.step("take four, please")
    assert game.done and game.winner == "second"
    assert game.rewards == {"first": -1.0, "second": 1.0}
    with pytest.raises(RuntimeError, match="call reset"):
        game.step("1")


def test_legal_takes():
    assert legal_takes(5) == [1, 2, 3]
    assert legal_takes(2) == [1, 2]


def test_the_solo_env_lets_the_bot_reply_and_credits_first():
    env = {{ cookiecutter.__class }}SoloEnv(min_stones=4, max_stones=4)
    observation, info = env.reset(seed=0)
    assert "4 stones left" in observation and info["legal_moves"] == [1, 2, 3]
    observation, reward, terminated, truncated, info = env.step("3")  # 1 left: the bot takes it
    assert (reward, terminated, truncated) == (-1.0, True, False)
    assert info["winner"] == "second" and "You lost." in observation


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="min_stones"):
        {{ cookiecutter.__class }}Game(min_stones=6, max_stones=3)


def test_the_game_offers_a_random_opponent_that_plays_legally():
    game = {{ cookiecutter.__class }}Game()
    assert isinstance(make_opponent(game, "random", seed=0), RandomTaker)
    for seed in range(5):
        result = play_episode(game, {r: make_opponent(game, "random", seed=seed + i) for i, r in enumerate(game.possible_agents)}, seed=seed)
        assert sorted(result.rewards.values()) == [-1.0, 1.0]  # someone took the last stone
        assert game.reason.endswith("took the last stone"), game.reason
