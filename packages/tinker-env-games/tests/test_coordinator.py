"""The multi-agent coordinator, driven by scripted agents (no model)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tinker_core.env import EnvSpec, MultiAgentTextEnv
from tinker_env_games.connect_four import ConnectFourEnv
from tinker_env_games.coordinator import (
    Coordinator,
    EpisodeResult,
    Turn,
    play_episode,
    play_episode_async,
    play_episodes,
)
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


class RelayEnv(MultiAgentTextEnv):
    """A generic env without forfeit(): roles a, b alternate; each action scores +1 for its
    author; the episode ends after ``length`` steps (never, when length is 0)."""

    env_spec = EnvSpec(id="test/relay-v0", max_turns=4, reward_range=(-2.0, 1.0), roles=("a", "b"))

    def __init__(self, length: int = 4) -> None:
        self.possible_agents = ["a", "b"]
        self.length = length

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        super().reset(seed=seed, options=options)
        self.agent_selection = "a"
        self.count = 0

    def observe(self, agent: str) -> str:
        return f"{agent} sees step {self.count}\n"

    def step(self, action: str) -> None:
        self.rewards = {"a": 0.0, "b": 0.0}
        self.rewards[self.agent_selection] = 1.0
        self.count += 1
        self.agent_selection = "b" if self.agent_selection == "a" else "a"
        if self.length and self.count >= self.length:
            self.terminations = {"a": True, "b": True}
        self._accumulate_rewards()


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


def test_non_string_action_forfeits() -> None:
    result = play_episode(TicTacToeEnv(), lambda role, obs: 5, seed=0)  # type: ignore[arg-type,return-value]
    assert result.reason == "forfeit-error" and "returned int, not str" in (result.error or "")


def test_illegal_moves_forfeit_through_the_env() -> None:
    result = play_episode(
        TicTacToeEnv(), {"x": Scripted(["a", "b", "c"]), "o": RandomAgent(0)}, seed=0
    )
    assert (result.reason, result.forfeited_by, result.winner) == ("forfeit-illegal", "x", "o")
    assert [t.action for t in result.transcripts["x"]] == ["a", "b", "c"]
    assert result.turn_rewards["x"] == [-0.1, -0.1, -1.0]
    assert result.rewards["x"] == pytest.approx(-1.2)
    check_consistency(result)


def test_async_agents_in_the_sync_loop() -> None:
    async def agent(role: str, observation: Any) -> str:
        await asyncio.sleep(0)
        return RandomAgent(seed=len(observation))(role, observation)

    result = play_episode(TicTacToeEnv(), agent, seed=0, turn_timeout_s=GENEROUS_S)
    assert result.reason in ("win", "draw") and result.num_steps >= 5
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


def test_async_and_sync_loops_agree() -> None:
    def agents() -> dict[str, Any]:
        return {"x": RandomAgent(seed=7), "o": RandomAgent(seed=8)}

    sync = play_episode(ConnectFourEnv(), agents(), seed=3)
    asynchronous = asyncio.run(play_episode_async(ConnectFourEnv(), agents(), seed=3))
    assert sync.to_dict() == asynchronous.to_dict()


def test_generic_env_without_forfeit(release: threading.Event) -> None:
    result = play_episode(
        RelayEnv(),
        {"a": Scripted(["go"]), "b": stuck_agent(release)},
        seed=0,
        turn_timeout_s=TIMEOUT_S,
    )
    assert (result.reason, result.forfeited_by) == ("forfeit-timeout", "b")
    assert result.rewards == {"a": 1.0, "b": -2.0}  # b gets the low end of the reward range
    assert result.outcomes == {"a": "win", "b": "loss"}
    assert result.final_observations == {"a": "a sees step 1\n", "b": "b sees step 1\n"}
    custom = play_episode(
        RelayEnv(),
        {"a": Scripted(["go"]), "b": stuck_agent(release)},
        seed=0,
        turn_timeout_s=TIMEOUT_S,
        forfeit_reward=-5.0,
    )
    assert custom.rewards["b"] == -5.0


def test_generic_env_that_ends_by_itself() -> None:
    result = play_episode(RelayEnv(length=4), Scripted(["1", "2", "3", "4"]), seed=0)
    assert result.reason == "terminated" and result.rewards == {"a": 2.0, "b": 2.0}
    assert result.outcomes == {"a": "draw", "b": "draw"} and result.winner is None
    assert result.turn_rewards == {"a": [1.0, 1.0], "b": [1.0, 1.0]}


def test_max_steps_truncates_an_endless_env() -> None:
    env = RelayEnv(length=0)
    result = play_episode(env, lambda role, obs: "x", seed=0, max_steps=7)
    assert result.reason == "truncated" and result.num_steps == 7
    assert env.done and all(env.truncations.values())


def test_bad_agents_argument() -> None:
    with pytest.raises(ValueError, match=r"no agent for role\(s\) \['o'\]"):
        play_episode(TicTacToeEnv(), {"x": RandomAgent(0)})
    with pytest.raises(TypeError, match="agents must be a callable"):
        play_episode(TicTacToeEnv(), "random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="turn_timeout_s"):
        play_episode(TicTacToeEnv(), RandomAgent(0), turn_timeout_s=0)


def test_seeded_episodes_are_deterministic() -> None:
    def run() -> list[dict[str, Any]]:
        agents = {"x": RandomAgent(seed=1), "o": RandomAgent(seed=2)}
        return [r.to_dict() for r in play_episodes(TicTacToeEnv, agents, seeds=range(10))]

    assert run() == run()


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
