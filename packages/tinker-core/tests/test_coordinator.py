"""The multi-agent coordinator on generic envs, driven by scripted agents (no model, no game package).

The games' own behaviour under the coordinator (forfeit through the env, minimax) is tested in
tinker-env-games.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tinker_core.coordinator import (
    AgentTimeout,
    Coordinator,
    EpisodeResult,
    Turn,
    call_agent,
    play_episode,
    play_episode_async,
    play_episodes,
)
from tinker_core.env import EnvSpec, MultiAgentTextEnv
from tinker_core.timeouts import CallTimeout

TIMEOUT_S = 0.2  # for the stuck agents; answering agents get GENEROUS_S
GENEROUS_S = 30.0


class Moves:
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
        self.first = int(self.np_random.integers(0, 100))  # seeded: shows in the observation

    def observe(self, agent: str) -> str:
        return f"{agent} sees step {self.count} of game {self.first}\n"

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


def test_self_play_records_what_each_role_saw_and_did() -> None:
    agent = Moves(["1", "2", "3", "4"])
    env = RelayEnv(length=4)
    result = play_episode(env, agent, seed=0, turn_timeout_s=GENEROUS_S)
    assert result.self_play and result.reason == "terminated"
    assert result.rewards == {"a": 2.0, "b": 2.0}
    assert result.outcomes == {"a": "draw", "b": "draw"} and result.winner is None
    assert result.turn_rewards == {"a": [1.0, 1.0], "b": [1.0, 1.0]}
    assert [t.action for t in result.transcripts["a"]] == ["1", "3"]
    assert [(r, o) for r, o in agent.seen if r == "b"] == [("b", t.observation) for t in result.transcripts["b"]]
    assert isinstance(result.transcripts["a"][0], Turn) and len(result.transcripts["a"][0]) == 2
    assert result.env_id == "test/relay-v0" and result.seed == 0
    assert env.done and all(env.terminations.values())
    check_consistency(result)


def test_separate_agents_see_only_their_roles() -> None:
    a, b = Moves(["1", "2"]), Moves(["3", "4"])
    result = play_episode(RelayEnv(), {"a": a, "b": b}, seed=1, turn_timeout_s=GENEROUS_S)
    assert not result.self_play
    assert {r for r, _ in a.seen} == {"a"} and {r for r, _ in b.seen} == {"b"}
    check_consistency(result)


def test_a_stuck_agent_forfeits_with_the_low_reward(release: threading.Event) -> None:
    result = play_episode(RelayEnv(), {"a": Moves(["go"]), "b": stuck_agent(release)}, seed=0, turn_timeout_s=TIMEOUT_S)
    assert (result.reason, result.forfeited_by, result.winner) == ("forfeit-timeout", "b", "a")
    assert "did not answer within 0.2 s" in (result.error or "")
    assert result.rewards == {"a": 1.0, "b": -2.0}  # b gets the low end of the reward range
    assert result.outcomes == {"a": "win", "b": "loss"}
    assert result.transcripts["b"] == []  # the timed-out call produced no turn
    assert set(result.final_observations) == {"a", "b"}
    custom = play_episode(
        RelayEnv(), {"a": Moves(["go"]), "b": stuck_agent(release)}, seed=0, turn_timeout_s=TIMEOUT_S, forfeit_reward=-5.0
    )
    assert custom.rewards["b"] == -5.0
    check_consistency(result)


def test_an_agent_that_raises_or_answers_a_non_string_forfeits() -> None:
    def boom(role: str, observation: Any) -> str:
        raise ValueError("boom")

    result = play_episode(RelayEnv(), {"a": boom, "b": Moves(["1"])}, seed=0)
    assert (result.reason, result.forfeited_by, result.error) == ("forfeit-error", "a", "ValueError: boom")
    bad = play_episode(RelayEnv(), lambda role, obs: 5, seed=0)  # type: ignore[arg-type,return-value]
    assert bad.reason == "forfeit-error" and "returned int, not str" in (bad.error or "")


def test_call_agent_times_out_in_a_daemon_thread(release: threading.Event) -> None:
    with pytest.raises(AgentTimeout, match="agent for role 'b' did not answer within 0.2 s") as e:
        call_agent(stuck_agent(release), "b", "obs", TIMEOUT_S)
    assert isinstance(e.value, CallTimeout) and isinstance(e.value, TimeoutError)
    assert call_agent(lambda role, obs: threading.current_thread().name, "a", "obs", GENEROUS_S) == "opentinker-agent-a"
    assert call_agent(lambda role, obs: f"{role}:{obs}", "a", "obs", None) == "a:obs"  # inline
    with pytest.raises(TimeoutError, match="mine"):  # the agent's own TimeoutError is not a timeout
        call_agent(lambda role, obs: (_ for _ in ()).throw(TimeoutError("mine")), "a", "obs", GENEROUS_S)


def test_async_agents_in_the_sync_loop() -> None:
    async def agent(role: str, observation: Any) -> str:
        await asyncio.sleep(0)
        return "1"

    result = play_episode(RelayEnv(), agent, seed=0, turn_timeout_s=GENEROUS_S)
    assert result.reason == "terminated" and result.num_steps == 4


def test_async_loop_with_mixed_and_stuck_agents(release: threading.Event) -> None:
    async def async_ok(role: str, observation: Any) -> str:
        return "1"

    async def async_stuck(role: str, observation: Any) -> str:
        await asyncio.sleep(3600)
        return "1"

    async def main() -> list[EpisodeResult]:
        normal = play_episode_async(RelayEnv(), {"a": async_ok, "b": Moves(["1", "2"])}, seed=0, turn_timeout_s=GENEROUS_S)
        stuck_async = play_episode_async(RelayEnv(), {"a": async_stuck, "b": async_ok}, seed=0, turn_timeout_s=TIMEOUT_S)
        stuck_sync = play_episode_async(RelayEnv(), {"a": async_ok, "b": stuck_agent(release)}, seed=0, turn_timeout_s=TIMEOUT_S)
        return list(await asyncio.gather(normal, stuck_async, stuck_sync))

    normal, stuck_async, stuck_sync = asyncio.run(main())
    assert normal.reason == "terminated"
    assert (stuck_async.reason, stuck_async.forfeited_by) == ("forfeit-timeout", "a")
    assert (stuck_sync.reason, stuck_sync.forfeited_by) == ("forfeit-timeout", "b")
    for r in (normal, stuck_async, stuck_sync):
        check_consistency(r)


def test_async_and_sync_loops_agree() -> None:
    sync = play_episode(RelayEnv(), Moves(["1", "2", "3", "4"]), seed=3)
    asynchronous = asyncio.run(play_episode_async(RelayEnv(), Moves(["1", "2", "3", "4"]), seed=3))
    assert sync.to_dict() == asynchronous.to_dict()


def test_max_steps_truncates_an_endless_env() -> None:
    env = RelayEnv(length=0)
    result = play_episode(env, lambda role, obs: "x", seed=0, max_steps=7)
    assert result.reason == "truncated" and result.num_steps == 7
    assert env.done and all(env.truncations.values())


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"no agent for role\(s\) \['b'\]"):
        play_episode(RelayEnv(), {"a": Moves(["1"])})
    with pytest.raises(TypeError, match="agents must be a callable"):
        play_episode(RelayEnv(), "random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="turn_timeout_s"):
        play_episode(RelayEnv(), Moves([]), turn_timeout_s=0)
    with pytest.raises(ValueError, match="max_steps"):
        play_episode(RelayEnv(), Moves([]), max_steps=0)


def test_seeded_episodes_are_deterministic_and_results_pickle() -> None:
    def run() -> list[EpisodeResult]:
        return play_episodes(RelayEnv, lambda role, obs: obs.split()[-1], seeds=range(5))

    first = run()
    assert [r.to_dict() for r in first] == [r.to_dict() for r in run()]
    assert len({r.transcripts["a"][0].observation for r in first}) > 1  # the seed reached the env
    assert pickle.loads(pickle.dumps(first[0])) == first[0]


def test_coordinator_object() -> None:
    coordinator = Coordinator(RelayEnv(), Moves(["1"] * 8), turn_timeout_s=GENEROUS_S, max_steps=3)
    assert coordinator.run(seed=0).reason == "truncated"
    assert asyncio.run(coordinator.arun(seed=1)).num_steps == 3
