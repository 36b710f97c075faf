"""The conformance kit over every env this package registers, found through its entry point."""

from __future__ import annotations

import functools
import zlib

import pytest

import tinker_core
import tinker_core.registry
from tinker_core import make_opponent
from tinker_env_games.opponents import legal_moves_in

testing = pytest.importorskip(
    "tinker_core.testing", reason="this tinker-core has no conformance kit"
)

SINGLE_AGENT = ["games/guess-number-v0"]
BOARD_GAMES = ["games/tictactoe-v0", "games/connect-four-v0"]
MULTI_AGENT = [*BOARD_GAMES, "games/negotiation-v0", "games/reference-v0"]


def test_the_plugin_registers_exactly_these(games_plugin_only: None) -> None:
    mine = [p for p in tinker_core.registry.list_plugins() if p.distribution == "tinker-env-games"]
    assert len(mine) == 1 and sorted(mine[0].registers["envs"]) == sorted(
        SINGLE_AGENT + MULTI_AGENT
    )
    assert [
        i for i in sorted(mine[0].registers["envs"]) if tinker_core.registry.env_spec(i).is_multi_agent
    ] == sorted(MULTI_AGENT)


@pytest.mark.parametrize("env_id", SINGLE_AGENT)
def test_single_agent_env_conforms(games_plugin_only: None, env_id: str) -> None:
    testing.check_env(env_id)


@pytest.mark.parametrize("env_id", MULTI_AGENT)
def test_multi_agent_env_conforms(games_plugin_only: None, env_id: str) -> None:
    testing.check_multi_agent_env(env_id)


@pytest.mark.parametrize("env_id", BOARD_GAMES)
def test_multi_agent_env_conforms_with_legal_play(games_plugin_only: None, env_id: str) -> None:
    """Whole games of legal moves, chosen by a deterministic function of the observation."""

    def policy(observation: str, info: dict) -> str:
        moves = legal_moves_in(observation)
        assert moves == info["legal_moves"]
        return str(moves[zlib.crc32(observation.encode()) % len(moves)])

    testing.check_multi_agent_env(env_id, actions=policy)


def test_configured_envs_conform(games_plugin_only: None) -> None:
    testing.check_env(
        functools.partial(
            tinker_core.make_env, "games/guess-number-v0", low=-5, high=5, max_turns=3
        )
    )
    testing.check_multi_agent_env(
        functools.partial(tinker_core.make_env, "games/tictactoe-v0", max_illegal_moves=1)
    )
    testing.check_multi_agent_env(
        functools.partial(tinker_core.make_env, "games/negotiation-v0", max_messages=2, invalid_penalty=1.0)
    )
    testing.check_multi_agent_env(
        functools.partial(tinker_core.make_env, "games/reference-v0", num_objects=2, max_words=1)
    )


@pytest.mark.parametrize(
    ("env_id", "opponent"),
    [
        ("games/negotiation-v0", "conceder"),
        ("games/negotiation-v0", "random"),
        ("games/reference-v0", "literal"),
    ],
)
def test_dialogue_games_conform_with_scripted_play(games_plugin_only: None, env_id: str, opponent: str) -> None:
    """Whole games played by an env's own scripted agents, which read only the observation."""

    def policy(observation: str, info: dict) -> str:
        role = observation.split("You are ", 1)[1].split(";")[0].split(".")[0].removeprefix("the ")
        agent = make_opponent(env_id, opponent, seed=zlib.crc32(observation.encode()))
        return agent(role, observation)

    testing.check_multi_agent_env(env_id, actions=policy)
