"""TextArena two-player games as ``textarena/<game>-v0``, against the real TextArena package."""

from __future__ import annotations

import functools

import pytest

import tinker_core
from tinker_core import check_multi_agent_env, make_opponent, play_episode

pytest.importorskip("textarena", reason="needs tinker-env-adapters[textarena]")

from tinker_env_adapters import AdapterError, RandomMoveAgent, TextArenaEnv  # noqa: E402

GAMES = ["TicTacToe", "ConnectFour", "Nim", "KuhnPoker", "IteratedPrisonersDilemma"]


def legal_move(observation: str, info: dict) -> str:
    """A deterministic policy (the kit's contract): a move the observation lists, chosen by its length."""
    return RandomMoveAgent(seed=len(observation))("", observation)


@pytest.mark.parametrize("game", GAMES)
def test_games_conform_with_default_and_legal_moves(adapters_only: None, game: str) -> None:
    check_multi_agent_env(f"textarena/{game}-v0", seeds=(0, 1))
    check_multi_agent_env(f"textarena/{game}-v0", seeds=(0,), actions=legal_move)


def test_a_configured_variant_conforms(adapters_only: None) -> None:
    factory = functools.partial(tinker_core.make_env, "textarena/Othello-small-v0", max_turns=12, observation="recent")
    check_multi_agent_env(factory, seeds=(0,), actions=legal_move)


def test_self_play_episode_ends_with_textarena_s_outcome(adapters_only: None) -> None:
    env = tinker_core.make_env("textarena/TicTacToe-v0")
    result = play_episode(env, make_opponent(env, "random", seed=1), seed=0)
    assert result.reason == "terminated" or result.reason
    assert sorted(result.outcomes.values()) in (["draw", "draw"], ["loss", "win"])
    assert sum(result.rewards.values()) == 0.0 and result.num_steps >= 5
    assert result.transcripts["player_0"][0].observation.startswith("[GAME] You are Player 0 in Tic Tac Toe.")


def test_illegal_moves_are_answered_then_lose(adapters_only: None) -> None:
    env = tinker_core.make_env("textarena/TicTacToe-v0")
    env.reset(seed=0)
    first = env.agent_selection
    env.step("no move here")
    assert not env.done and env.agent_selection == first
    assert "attempted an invalid move" in env.observe(first)
    env.step("still none")
    assert env.done and env.rewards[first] == -1.0 and env.infos[first]["outcome"] == "loss"
    assert env.infos[first]["invalid_move"] is True


def test_forfeit_makes_the_role_lose(adapters_only: None) -> None:
    env = tinker_core.make_env("textarena/Nim-v0")
    env.reset(seed=0)
    env.forfeit("player_1", "forfeit-timeout")
    assert env.done and env._cumulative_rewards == {"player_0": 1.0, "player_1": -1.0}
    assert env.infos["player_1"] == {"outcome": "loss", "reason": "forfeit-timeout", "invalid_move": True}


def test_truncation_after_max_turns_is_a_draw(adapters_only: None) -> None:
    env = tinker_core.make_env("textarena/IteratedPrisonersDilemma-v0", max_turns=3)
    env.reset(seed=0)
    for _ in range(3):
        env.step("[cooperate]")
    assert env.done and all(env.truncations.values()) and env.infos["player_0"]["outcome"] == "draw"


def test_recent_observation_keeps_the_prompt_and_drops_old_boards(adapters_only: None) -> None:
    full = tinker_core.make_env("textarena/TicTacToe-v0")
    recent = tinker_core.make_env("textarena/TicTacToe-v0", observation="recent")
    for env in (full, recent):
        env.reset(seed=0)
        for move in ("[0]", "[4]", "[8]"):
            env.step(move)
    role = full.agent_selection
    assert recent.observe(role).startswith("[GAME] You are Player")
    assert len(recent.observe(role)) < len(full.observe(role))
    assert full.observe(role).endswith(recent.observe(role).split("\n", 1)[1][-200:])


def test_the_registered_factory_offers_the_random_opponent(adapters_only: None) -> None:
    assert list(tinker_core.scripted_opponents("textarena/ConnectFour-v0")) == ["random"]


def test_a_game_that_cannot_start_with_two_players_names_env_and_cause() -> None:
    env = TextArenaEnv("GuessTheNumber-v0")  # a one-player game
    with pytest.raises(AdapterError, match=r"'textarena/GuessTheNumber-v0'.*could not start a two-player game offline"):
        env.reset(seed=0)


def test_an_unknown_game_names_the_env() -> None:
    with pytest.raises(AdapterError, match="'textarena/NoSuchGame-v0': the installed TextArena has no game"):
        TextArenaEnv("NoSuchGame-v0")
