"""The games under tinker-core's multi-agent coordinator, driven by scripted agents (no model).

The coordinator itself (both loops, agent calls, arguments, determinism, envs without
forfeit()) is tested in tinker-core on a generic env; here: what the games add.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tinker_core import (
    Coordinator,
    EpisodeResult,
    MultiAgentTextEnv,
    Turn,
    make_opponent,
    play_episode,
    play_episode_async,
    scripted_opponents,
)
from tinker_env_games.connect_four import ConnectFourEnv
from tinker_env_games.opponents import MinimaxAgent, RandomAgent
from tinker_env_games.tictactoe import TicTacToeEnv

TIMEOUT_S = 0.2  # for the stuck agents; answering agents get GENEROUS_S
GENEROUS_S = 30.0


class Scripted:
    """Plays the given moves in order (one list shared by every role it plays)."""

    def __init__(self, moves: list[str]) -> None:
        self.moves = list(moves)
        self.seen: list[tuple[str, Any]] = []

    def __call__(self, role: str, observation: Any) -> str:
        self.seen.append((role, observation))
        return self.moves.pop(0)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown, so abandoned stuck agents finish instead of lingering."""
    event = threading.Event()
    yield event
    event.set()


def stuck_agent(release: threading.Event) -> Any:
    def agent(role: str, observation: Any) -> str:
        release.wait()
        return "1"

    return agent


def check_consistency(result: EpisodeResult) -> None:
    """Invariants every result satisfies."""
    for role in result.roles:
        assert len(result.turn_rewards[role]) == len(result.transcripts[role])
        if result.transcripts[role]:
            assert sum(result.turn_rewards[role]) == pytest.approx(result.rewards[role])
        assert role in result.final_observations
    assert result.num_steps == sum(len(t) for t in result.transcripts.values())
    json.dumps(result.to_dict())


def test_self_play_transcripts_and_rewards() -> None:
    agent = Scripted(["1", "4", "2", "5", "3"])
    env = TicTacToeEnv()
    result = play_episode(env, agent, seed=0, turn_timeout_s=GENEROUS_S)
    assert result.self_play
    assert (result.winner, result.reason, result.forfeited_by) == ("x", "win", None)
    assert result.outcomes == {"x": "win", "o": "loss"}
    assert result.rewards == {"x": 1.0, "o": -1.0}
    assert [t.action for t in result.transcripts["x"]] == ["1", "2", "3"]
    assert [t.action for t in result.transcripts["o"]] == ["4", "5"]
    # each turn records exactly what that role was shown, and turns are 2-tuples
    assert [(r, o) for r, o in agent.seen if r == "o"] == [
        ("o", t.observation) for t in result.transcripts["o"]
    ]
    obs, action = result.transcripts["x"][0]
    assert obs.startswith("Tic-tac-toe. You play X.") and action == "1"
    assert isinstance(result.transcripts["x"][0], Turn)
    # the winning move is credited to x's last turn, the loss to o's last turn
    assert result.turn_rewards == {"x": [0.0, 0.0, 1.0], "o": [0.0, -1.0]}
    assert env.done and all(env.terminations.values())
    assert "You won." in result.final_observations["x"]
    assert result.env_id == "games/tictactoe-v0" and result.seed == 0
    check_consistency(result)


def test_separate_learners() -> None:
    x, o = Scripted(["1", "3", "4", "8", "9"]), Scripted(["2", "5", "6", "7"])
    result = play_episode(TicTacToeEnv(), {"x": x, "o": o}, seed=1, turn_timeout_s=GENEROUS_S)
    assert not result.self_play
    assert {r for r, _ in x.seen} == {"x"} and {r for r, _ in o.seen} == {"o"}
    assert result.reason == "draw" and result.winner is None
    assert result.outcomes == {"x": "draw", "o": "draw"}
    check_consistency(result)


def test_stuck_agent_forfeits_on_timeout(release: threading.Event) -> None:
    moves = Scripted(["5"])
    agents = {"x": moves, "o": stuck_agent(release)}
    result = play_episode(TicTacToeEnv(), agents, seed=0, turn_timeout_s=TIMEOUT_S)
    assert (result.reason, result.forfeited_by, result.winner) == ("forfeit-timeout", "o", "x")
    assert result.outcomes == {"x": "win", "o": "loss"}
    assert result.rewards == {"x": 1.0, "o": -1.0}
    assert "did not answer within 0.2 s" in (result.error or "")
    assert result.transcripts["o"] == []  # the timed-out call produced no turn
    assert result.turn_rewards["x"] == [1.0]
    assert "wins by forfeit (forfeit-timeout)" in result.final_observations["x"]
    check_consistency(result)


def test_agent_that_raises_forfeits() -> None:
    def boom(role: str, observation: Any) -> str:
        raise ValueError("boom")

    result = play_episode(TicTacToeEnv(), {"x": boom, "o": RandomAgent(0)}, seed=0)
    assert (result.reason, result.forfeited_by, result.winner) == ("forfeit-error", "x", "o")
    assert result.error == "ValueError: boom"
    assert result.rewards == {"x": -1.0, "o": 1.0}
    check_consistency(result)


def test_illegal_moves_forfeit_through_the_env() -> None:
    result = play_episode(
        TicTacToeEnv(), {"x": Scripted(["a", "b", "c"]), "o": RandomAgent(0)}, seed=0
    )
    assert (result.reason, result.forfeited_by, result.winner) == ("forfeit-illegal", "x", "o")
    assert [t.action for t in result.transcripts["x"]] == ["a", "b", "c"]
    assert result.turn_rewards["x"] == [-0.1, -0.1, -1.0]
    assert result.rewards["x"] == pytest.approx(-1.2)
    check_consistency(result)


def test_async_loop_with_mixed_and_stuck_agents(release: threading.Event) -> None:
    async def async_random(role: str, observation: Any) -> str:
        return RandomAgent(seed=0)(role, observation)

    async def async_stuck(role: str, observation: Any) -> str:
        await asyncio.sleep(3600)
        return "1"

    async def main() -> list[EpisodeResult]:
        normal = play_episode_async(
            TicTacToeEnv(),
            {"x": async_random, "o": MinimaxAgent()},
            seed=0,
            turn_timeout_s=GENEROUS_S,
        )
        stuck_async = play_episode_async(
            TicTacToeEnv(),
            {"x": async_stuck, "o": MinimaxAgent()},
            seed=0,
            turn_timeout_s=TIMEOUT_S,
        )
        stuck_sync = play_episode_async(
            ConnectFourEnv(),
            {"x": RandomAgent(0), "o": stuck_agent(release)},
            seed=0,
            turn_timeout_s=TIMEOUT_S,
        )
        return list(await asyncio.gather(normal, stuck_async, stuck_sync))

    normal, stuck_async, stuck_sync = asyncio.run(main())
    assert normal.outcomes["o"] in ("win", "draw") and normal.reason in ("win", "draw")
    assert (stuck_async.reason, stuck_async.forfeited_by) == ("forfeit-timeout", "x")
    assert (stuck_sync.reason, stuck_sync.forfeited_by) == ("forfeit-timeout", "o")
    assert stuck_sync.outcomes == {"x": "win", "o": "loss"}
    for r in (normal, stuck_async, stuck_sync):
        check_consistency(r)


def test_coordinator_object() -> None:
    coordinator = Coordinator(
        TicTacToeEnv(), {"x": MinimaxAgent(), "o": MinimaxAgent()}, turn_timeout_s=GENEROUS_S
    )
    assert coordinator.run(seed=0).reason == "draw"
    assert asyncio.run(coordinator.arun(seed=1)).reason == "draw"


@pytest.mark.parametrize("env_id", ["games/guess-number-v0", "games/tictactoe-v0", "games/connect-four-v0"])
def test_envs_and_results_pickle(games_plugin_only: None, env_id: str) -> None:
    """Envs and results travel between rollout workers: pickled copies behave the same."""
    import pickle

    import tinker_core

    env = tinker_core.make_env(env_id)
    env.reset(seed=5)
    clone = pickle.loads(pickle.dumps(env))
    if isinstance(env, MultiAgentTextEnv):
        env.step("3")
        clone.step("3")
        assert clone.observe("o") == env.observe("o") and clone.rewards == env.rewards
        result = play_episode(env, RandomAgent(seed=0), seed=1)
        assert pickle.loads(pickle.dumps(result)) == result
    else:
        assert clone.step("50") == env.step("50")


def test_every_lazy_name_of_the_package_loads() -> None:
    import tinker_env_games

    for name in tinker_env_games.__all__:
        assert getattr(tinker_env_games, name) is not None, name
    assert "play_episode" not in tinker_env_games.__all__  # the coordinator is tinker-core's


@pytest.mark.parametrize(
    ("env_id", "names"),
    [("games/tictactoe-v0", {"random", "minimax", "mixed"}), ("games/connect-four-v0", {"random"}), ("games/guess-number-v0", set())],
)
def test_games_offer_their_scripted_opponents_by_name(games_plugin_only: None, env_id: str, names: set[str]) -> None:
    import tinker_core

    assert set(scripted_opponents(env_id)) == names
    env = tinker_core.make_env(env_id)
    assert set(scripted_opponents(env)) == names
    for name in names:  # a fresh, seeded agent: the same seed plays the same moves
        env.reset(seed=0)
        obs = env.observe(env.agent_selection)
        a, b = make_opponent(env, name, seed=3), make_opponent(env, name, seed=3)
        assert a is not b and a(env.agent_selection, obs) == b(env.agent_selection, obs)
    assert isinstance(make_opponent("games/tictactoe-v0", "minimax", seed=1), MinimaxAgent)
    assert isinstance(make_opponent("games/connect-four-v0", "random", seed=1), RandomAgent)
    if "minimax" not in names:
        with pytest.raises(ValueError, match=f"{env_id} offers no scripted opponent 'minimax'"):
            make_opponent(env, "minimax")
