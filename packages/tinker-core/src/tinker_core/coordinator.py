"""Runs multi-agent episodes: turn order, per-turn timeouts, forfeits, self-play, transcripts.

The interface the rollout layer drives
--------------------------------------

An **agent** is a callable ``agent(role: str, observation) -> str``; an ``async def`` agent (or
one returning an awaitable) works too. ``role`` is the name of the role it plays this turn
(``"x"``, ``"o"``...), ``observation`` what :meth:`MultiAgentTextEnv.observe` shows that role.

``agents`` is either one agent, which then plays every role (**self-play**), or a dict
``{role: agent}`` with an agent for every role (**separate learners**; the same object may
appear under several roles).

:func:`play_episode` (and :func:`play_episode_async`) resets the env with ``seed``, then loops:
ask the role in ``env.agent_selection`` for an action, ``env.step`` it, credit the rewards,
until ``env.done``. Each agent call runs in a daemon worker thread
(:func:`tinker_core.timeouts.call_with_timeout`; async agents: under ``asyncio.wait_for``) with
``turn_timeout_s``; an agent that does not answer in time **forfeits** (reason
``"forfeit-timeout"``), one that raises or returns a non-string forfeits with reason
``"forfeit-error"``. The coordinator never waits for a stuck agent beyond its timeout, so no
episode can hang; a stuck thread is abandoned (its late answer is ignored), so agents should
not hold locks across calls. ``max_steps`` bounds the episode even for an env that never ends
(reason ``"truncated"``).

A forfeit ends the game through ``env.forfeit(role, reason)`` when the env has it (the games
of tinker-env-games: the offender loses -1, the other role wins +1); otherwise the coordinator
ends it itself, giving the offender ``forfeit_reward`` (default: the low end of the spec's
reward range) and the other roles 0.

However the episode ends, it ends for **all roles at once**: every role is marked
terminated or truncated, gets its final reward and its final observation in the result.

The result, :class:`EpisodeResult`:

- ``transcripts[role]``: the role's turns, a list of ``Turn(observation, action)`` (a
  2-tuple); illegal moves are included (they were actions), a timed-out call is not;
- ``turn_rewards[role]``: aligned with the transcript, the reward credited to the role from
  that action until its next one (rewards a role receives before its first action count only
  in ``rewards``);
- ``rewards[role]``: the role's total reward for the episode (the env's
  ``_cumulative_rewards``);
- ``outcomes[role]``: ``"win"``, ``"loss"`` or ``"draw"`` (from the env's ``infos`` when it
  says, else by comparing total rewards);
- ``winner`` (a role or None), ``reason``: ``"win"``, ``"draw"``, ``"forfeit-illegal"``,
  ``"forfeit-timeout"``, ``"forfeit-error"``, ``"truncated"`` (or an env's own reason;
  ``"terminated"`` when the env gives none), ``forfeited_by``, ``error`` (the message of a
  timeout or an agent exception), ``final_observations[role]``, ``num_steps``, ``self_play``,
  ``infos[role]``: a copy of the env's final ``infos[role]`` (game-specific end-of-game facts,
  e.g. the negotiation game's ``deal`` and ``score``).

Agents that need no model (a random mover, a perfect player) are offered by the envs
themselves, by name: see :mod:`tinker_core.opponents`.

Example::

    from tinker_core import make_env
    from tinker_core.coordinator import play_episode
    from tinker_core.opponents import make_opponent

    env = make_env("games/tictactoe-v0")
    agents = {"x": make_opponent(env, "random", seed=0), "o": make_opponent(env, "minimax")}
    result = play_episode(env, agents, seed=0)
    result.outcomes["o"]                 # "win" or "draw", never "loss"
    result.transcripts["x"][0]           # Turn(observation="Tic-tac-toe. You play X...", action="5")
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypedDict, Unpack

from tinker_core.contracts import Observation
from tinker_core.env import MultiAgentTextEnv
from tinker_core.episodes import Episode, Turn, observation_text
from tinker_core.timeouts import CallTimeout, call_with_timeout, start_daemon

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_TURN_TIMEOUT_S",
    "Agent",
    "AgentTimeout",
    "Coordinator",
    "EpisodeResult",
    "EpisodeRules",
    "EpisodeSettings",
    "Turn",
    "call_agent",
    "call_agent_async",
    "play_episode",
    "play_episode_async",
    "play_episodes",
]

Agent: TypeAlias = Callable[[str, Observation], "str | Awaitable[str]"]
Agents: TypeAlias = "Agent | Mapping[str, Agent]"

DEFAULT_TURN_TIMEOUT_S = 60.0
DEFAULT_MAX_STEPS = 1000


class EpisodeRules(TypedDict, total=False):
    """How the coordinator plays any episode (each optional; the defaults and their meaning are
    :func:`play_episode`'s); :class:`Coordinator` binds them."""

    turn_timeout_s: float | None
    max_steps: int
    forfeit_reward: float | None


class EpisodeSettings(EpisodeRules, total=False):
    """The keyword settings of :func:`play_episode` and :func:`play_episode_async`: the rules
    and this episode's ``env.reset`` arguments."""

    seed: int | None
    options: dict[str, Any] | None


class AgentTimeout(CallTimeout):
    """An agent did not answer within the per-turn timeout."""


@dataclass
class EpisodeResult:
    """Everything one multi-agent episode produced; see the module docstring."""

    roles: tuple[str, ...]
    transcripts: dict[str, list[Turn]]
    turn_rewards: dict[str, list[float]]
    rewards: dict[str, float]
    outcomes: dict[str, str]
    winner: str | None
    reason: str
    forfeited_by: str | None = None
    error: str | None = None
    final_observations: dict[str, Observation] = field(default_factory=dict)
    num_steps: int = 0
    self_play: bool = False
    seed: int | None = None
    env_id: str | None = None
    infos: dict[str, dict[str, Any]] = field(default_factory=dict)

    def episode(self, role: str) -> Episode:
        """``role``'s seat as an :class:`~tinker_core.episodes.Episode`: its own turns (observations as text), no trajectory."""
        turns = [(observation_text(t.observation), t.action) for t in self.transcripts.get(role, [])]
        outcome = self.outcomes.get(role)
        return Episode(None, float(self.rewards.get(role, 0.0)), len(turns), outcome == "win", self.error, turns,
                       self.reason == "truncated", role=role, outcome=outcome)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable copy (turns become ``[observation, action]`` lists)."""
        return {
            "env_id": self.env_id,
            "seed": self.seed,
            "roles": list(self.roles),
            "transcripts": {r: [list(t) for t in ts] for r, ts in self.transcripts.items()},
            "turn_rewards": self.turn_rewards,
            "rewards": self.rewards,
            "outcomes": self.outcomes,
            "winner": self.winner,
            "reason": self.reason,
            "forfeited_by": self.forfeited_by,
            "error": self.error,
            "final_observations": self.final_observations,
            "num_steps": self.num_steps,
            "self_play": self.self_play,
        }


# ---- calling agents with a timeout -----------------------------------------------------------


def _run_agent(agent: Agent, role: str, observation: Observation) -> object:
    """Call the agent; an awaitable answer is run to completion on a fresh event loop."""
    answer: object = agent(role, observation)
    if inspect.isawaitable(answer):
        awaitable = answer

        async def wait() -> object:
            return await awaitable

        answer = asyncio.run(wait())
    return answer


def _timeout_message(role: str, timeout_s: float | None) -> str:
    return f"agent for role {role!r} did not answer within {timeout_s} s"


def call_agent(agent: Agent, role: str, observation: Observation, timeout_s: float | None) -> object:
    """The agent's answer; raises :class:`AgentTimeout` after ``timeout_s`` (None: no limit,
    called in this thread) or whatever the agent raised."""
    try:
        return call_with_timeout(
            lambda: _run_agent(agent, role, observation),
            timeout_s,
            name=f"opentinker-agent-{role}",
            message=_timeout_message(role, timeout_s),
        )
    except CallTimeout as e:
        raise AgentTimeout(str(e)) from None


def _is_async(agent: Agent) -> bool:
    return inspect.iscoroutinefunction(agent) or inspect.iscoroutinefunction(
        getattr(agent, "__call__", None)  # noqa: B004 - async __call__ on a class instance
    )


async def call_agent_async(
    agent: Agent, role: str, observation: Observation, timeout_s: float | None
) -> object:
    """Like :func:`call_agent`, without blocking the event loop: ``async`` agents are awaited
    under ``asyncio.wait_for``, others run in a daemon thread."""
    if _is_async(agent):
        try:
            return await asyncio.wait_for(agent(role, observation), timeout_s)  # type: ignore[arg-type]
        except TimeoutError:
            raise AgentTimeout(_timeout_message(role, timeout_s)) from None
    loop = asyncio.get_running_loop()
    future: asyncio.Future[object] = loop.create_future()

    def settle(value: object, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def on_done(value: object, error: BaseException | None) -> None:
        # RuntimeError: the loop has closed, so nobody waits for this answer any more
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, value, error)

    start_daemon(lambda: _run_agent(agent, role, observation), on_done, name=f"opentinker-agent-{role}")
    try:
        return await asyncio.wait_for(future, timeout_s)
    except TimeoutError:
        raise AgentTimeout(_timeout_message(role, timeout_s)) from None


# ---- the episode loop --------------------------------------------------------------------------


class _Episode:
    """One episode's turns and bookkeeping; the sync and async loops differ only in how they
    call the agent."""

    def __init__(
        self,
        env: MultiAgentTextEnv,
        agents: Agents,
        *,
        seed: int | None = None,
        options: dict[str, Any] | None = None,
        turn_timeout_s: float | None = DEFAULT_TURN_TIMEOUT_S,
        max_steps: int = DEFAULT_MAX_STEPS,
        forfeit_reward: float | None = None,
    ) -> None:
        """Check the settings (:class:`EpisodeSettings`; the defaults live here), reset ``env``
        and match every role with its agent."""
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if turn_timeout_s is not None and turn_timeout_s <= 0:
            raise ValueError(f"turn_timeout_s must be > 0 or None, got {turn_timeout_s}")
        env.reset(seed=seed, options=options)
        self.env = env
        self.seed = seed
        self.max_steps = max_steps
        self.turn_timeout_s = turn_timeout_s
        roles = tuple(env.possible_agents)
        if isinstance(agents, Mapping):
            missing = [r for r in roles if r not in agents]
            if missing:
                raise ValueError(
                    f"agents has no agent for role(s) {missing}; give one per role "
                    f"({', '.join(roles)}) or a single agent for self-play"
                )
            self.agent_of = {r: agents[r] for r in roles}
            self.self_play = False
        elif callable(agents):
            self.agent_of = {r: agents for r in roles}
            self.self_play = True
        else:
            raise TypeError(
                f"agents must be a callable or a dict role -> callable, got {type(agents).__name__}"
            )
        self.roles = roles
        self.forfeit_reward = forfeit_reward
        self.transcripts: dict[str, list[Turn]] = {r: [] for r in roles}
        self.turn_rewards: dict[str, list[float]] = {r: [] for r in roles}
        self.steps = 0
        self.reason: str | None = None
        self.forfeited_by: str | None = None
        self.error: str | None = None

    def turns(self) -> Iterator[tuple[str, Agent, Observation]]:
        """The role to move, its agent and what it sees, until the episode is done, a role
        forfeited or ``max_steps`` were taken."""
        env = self.env
        while not env.done and self.forfeited_by is None and self.steps < self.max_steps:
            role = env.agent_selection
            yield role, self.agent_of[role], env.observe(role)

    def answer(self, role: str, observation: Observation, action: object) -> None:
        """Step the env with the agent's answer; a non-string forfeits (``forfeit-error``)."""
        if isinstance(action, str):
            self.record(role, observation, action)
        else:
            self.failed(
                role, TypeError(f"agent for role {role!r} returned {type(action).__name__}, not str")
            )

    def failed(self, role: str, error: Exception) -> None:
        """The agent's call raised: ``forfeit-timeout`` or ``forfeit-error``."""
        if isinstance(error, AgentTimeout):
            self.forfeit(role, "forfeit-timeout", str(error))
        else:
            self.forfeit(role, "forfeit-error", error)

    def _credit(self, before: dict[str, float]) -> None:
        after = self.env._cumulative_rewards
        for r in self.roles:
            delta = after.get(r, 0.0) - before.get(r, 0.0)
            if delta and self.turn_rewards[r]:
                self.turn_rewards[r][-1] += delta

    def record(self, role: str, observation: Observation, action: str) -> None:
        before = dict(self.env._cumulative_rewards)
        self.transcripts[role].append(Turn(observation, action))
        self.turn_rewards[role].append(0.0)
        self.env.step(action)
        self.steps += 1
        self._credit(before)

    def forfeit(self, role: str, reason: str, error: BaseException | str) -> None:
        self.reason, self.forfeited_by = reason, role
        self.error = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        before = dict(self.env._cumulative_rewards)
        env_forfeit = getattr(self.env, "forfeit", None)
        if callable(env_forfeit):
            env_forfeit(role, reason)
        else:
            low = (
                self.env.env_spec.reward_range[0]
                if self.forfeit_reward is None
                else self.forfeit_reward
            )
            self.env.rewards = {r: (float(low) if r == role else 0.0) for r in self.roles}
            self.env._accumulate_rewards()
            for r in self.roles:
                self.env.terminations[r] = True
        self._credit(before)

    def finish(self) -> EpisodeResult:
        env = self.env
        if not env.done:  # max_steps reached, or an env whose forfeit did not end it
            if self.reason is None:
                self.reason = "truncated"
            for r in self.roles:
                if not (env.terminations[r] or env.truncations[r]):
                    env.truncations[r] = True
        rewards = {r: float(env._cumulative_rewards.get(r, 0.0)) for r in self.roles}
        infos = {r: env.infos.get(r, {}) for r in self.roles}
        outcomes = {r: str(infos[r].get("outcome")) for r in self.roles}
        if not all(o in ("win", "loss", "draw") for o in outcomes.values()):
            top = max(rewards.values())
            winners = [r for r in self.roles if rewards[r] == top]
            everyone_equal = len(winners) == len(self.roles)
            outcomes = {
                r: "draw" if everyone_equal else ("win" if r in winners else "loss")
                for r in self.roles
            }
        win_roles = [r for r in self.roles if outcomes[r] == "win"]
        winner = win_roles[0] if len(win_roles) == 1 else None
        if self.reason is None:
            env_reasons = [infos[r].get("reason") for r in self.roles if infos[r].get("reason")]
            if env_reasons:
                self.reason = str(env_reasons[0])
            elif any(env.truncations[r] for r in self.roles):
                self.reason = "truncated"
            else:
                self.reason = "terminated"
        if self.reason == "forfeit-illegal" and self.forfeited_by is None:
            losers = [r for r in self.roles if outcomes[r] == "loss"]
            self.forfeited_by = losers[0] if len(losers) == 1 else None
        finals: dict[str, Observation] = {}
        for r in self.roles:
            try:
                finals[r] = env.observe(r)
            except Exception as e:  # noqa: BLE001 - a final view is a courtesy, not a must
                finals[r] = f"<observe failed: {type(e).__name__}: {e}>"
        spec = getattr(env, "env_spec", None)
        return EpisodeResult(
            roles=self.roles,
            transcripts=self.transcripts,
            turn_rewards=self.turn_rewards,
            rewards=rewards,
            outcomes=outcomes,
            winner=winner,
            reason=self.reason,
            forfeited_by=self.forfeited_by,
            error=self.error,
            final_observations=finals,
            num_steps=self.steps,
            self_play=self.self_play,
            seed=self.seed,
            env_id=spec.id if spec is not None else None,
            infos={r: dict(i) for r, i in infos.items()},
        )


def play_episode(env: MultiAgentTextEnv, agents: Agents, **settings: Unpack[EpisodeSettings]) -> EpisodeResult:
    """Play one episode of ``env`` (reset with ``seed``) with ``agents``; see the module doc.

    Args:
        env: a :class:`~tinker_core.env.MultiAgentTextEnv` (it is reset here).
        agents: one agent for self-play, or ``{role: agent}``.
        seed, options: passed to ``env.reset`` (default None).
        turn_timeout_s: seconds an agent may take per turn (default
            :data:`DEFAULT_TURN_TIMEOUT_S`); None calls it inline, unguarded.
        max_steps: the most ``env.step`` calls before the episode is truncated (default
            :data:`DEFAULT_MAX_STEPS`).
        forfeit_reward: for envs without ``forfeit()``: the offender's reward on a forfeit
            (default None: the low end of the spec's reward range).
    """
    ep = _Episode(env, agents, **settings)
    for role, agent, observation in ep.turns():
        try:
            action = call_agent(agent, role, observation, ep.turn_timeout_s)
        except Exception as e:  # noqa: BLE001 - a failing agent forfeits
            ep.failed(role, e)
        else:
            ep.answer(role, observation, action)
    return ep.finish()


async def play_episode_async(
    env: MultiAgentTextEnv, agents: Agents, **settings: Unpack[EpisodeSettings]
) -> EpisodeResult:
    """:func:`play_episode` for an event loop: ``async`` agents are awaited, sync ones run in
    worker threads, so many episodes can run concurrently (``asyncio.gather``). An ``async``
    agent must not block the loop (a blocking call inside it cannot be timed out)."""
    ep = _Episode(env, agents, **settings)
    for role, agent, observation in ep.turns():
        try:
            action = await call_agent_async(agent, role, observation, ep.turn_timeout_s)
        except Exception as e:  # noqa: BLE001 - a failing agent forfeits
            ep.failed(role, e)
        else:
            ep.answer(role, observation, action)
    return ep.finish()


def play_episodes(
    make_env: Callable[[], MultiAgentTextEnv],
    agents: Agents,
    seeds: Iterable[int],
    *,
    options: dict[str, Any] | None = None,
    **rules: Unpack[EpisodeRules],
) -> list[EpisodeResult]:
    """One episode per seed, each on a fresh env from ``make_env()``; options and rules as
    :func:`play_episode`."""
    return [play_episode(make_env(), agents, seed=s, options=options, **rules) for s in seeds]


@dataclass
class Coordinator:
    """:func:`play_episode` with its settings bound, for a rollout worker to hold on to.

    ``Coordinator(env, agents, turn_timeout_s=30).run(seed=3)``; ``await ....arun(seed=3)``.
    """

    env: MultiAgentTextEnv
    agents: Agents
    turn_timeout_s: float | None = DEFAULT_TURN_TIMEOUT_S
    max_steps: int = DEFAULT_MAX_STEPS
    forfeit_reward: float | None = None

    def _kwargs(self) -> EpisodeRules:
        return {
            "turn_timeout_s": self.turn_timeout_s,
            "max_steps": self.max_steps,
            "forfeit_reward": self.forfeit_reward,
        }

    def run(self, seed: int | None = None, options: dict[str, Any] | None = None) -> EpisodeResult:
        return play_episode(self.env, self.agents, seed=seed, options=options, **self._kwargs())

    async def arun(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> EpisodeResult:
        return await play_episode_async(
            self.env, self.agents, seed=seed, options=options, **self._kwargs()
        )
