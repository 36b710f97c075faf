"""The players of one multi-agent episode, and the learners' trajectories it leaves.

:class:`EpisodeAgents` gives the coordinator one ``async`` agent per role: a learner role
samples through the :class:`~tinker_algos.multiagent.batcher.Batcher` and records its turns in
its own :class:`~tinker_algos.rollout.PolicyTurns` (the object a single-agent episode uses too:
a turn FSM with observations masked and actions trained; with the env's tools, ``EnvSpec.tools``,
shown in the role's first prompt and parsed from its samples into
:attr:`~tinker_core.contracts.Action.tool_calls`, as in a single-agent episode); a scripted
role calls its agent under ``turn_timeout_s`` (the coordinator's
:func:`~tinker_core.coordinator.call_agent_async`). After the episode,
:meth:`EpisodeAgents.trajectories` closes each learner role's FSM with the coordinator's
per-turn rewards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any

from tinker_algos.model.prompts import PromptRenderer
from tinker_algos.multiagent.batcher import Batcher
from tinker_algos.multiagent.guarded_env import EpisodeError
from tinker_algos.multiagent.roles import Agent, Learner, Scripted
from tinker_algos.rollout.episodes import PolicyTurns
from tinker_core.contracts import Observation, Trajectory
from tinker_core.coordinator import EpisodeResult, call_agent_async
from tinker_core.seeding import derive_seed

__all__ = ["AsyncAgent", "EpisodeAgents"]


class AsyncAgent:
    """Wraps a coroutine function so the coordinator sees an ``async def __call__`` agent."""

    def __init__(self, fn: Callable[[str, Any], Any]) -> None:
        self.fn = fn

    async def __call__(self, role: str, observation: Observation) -> str:
        return await self.fn(role, observation)


@dataclass
class EpisodeAgents:
    """The agents of one episode: the policy's seats (one FSM per learner role, each shown the
    env's ``tools``) and the scripted agents (built for this episode from
    ``derive_seed(seed, index, role)``)."""

    index: int
    seed: InitVar[int]
    roles: Sequence[str]
    plan: InitVar[Mapping[str, Learner | Scripted]]
    batcher: Batcher
    renderer: PromptRenderer
    context_limit: int
    max_new_tokens: int
    turn_timeout_s: float | None
    system_prompt: str = ""
    tools: Sequence[Mapping[str, Any]] = ()
    seats: dict[str, PolicyTurns] = field(init=False)
    scripted: dict[str, Agent] = field(init=False)
    new_tokens: int = field(init=False, default=0)
    overflow: str | None = field(init=False, default=None)
    order: list[str] = field(init=False, default_factory=list)  # the roles in the order of their first move

    def __post_init__(self, seed: int, plan: Mapping[str, Learner | Scripted]) -> None:
        self.roles = tuple(self.roles)
        self.seats = {r: PolicyTurns(self.renderer, self.system_prompt, p.adapter)
                      for r, p in plan.items() if isinstance(p, Learner)}
        for seat in self.seats.values():  # the env's tools (EnvSpec.tools), as in a single-agent episode
            seat.tools = tuple(dict(t) for t in self.tools)
        self.scripted = {r: p.make(derive_seed(seed, self.index, r)) for r, p in plan.items() if isinstance(p, Scripted)}

    @property
    def seating(self) -> tuple[str, ...]:
        """The roles by seat: the first mover first; roles that never moved last, in env order."""
        return (*self.order, *(r for r in self.roles if r not in self.order))

    def _seated(self, role: str) -> None:
        if role not in self.order:
            self.order.append(role)

    async def learner(self, role: str, observation: Observation) -> str:
        """The policy's move for ``role``: sample, record in the role's FSM, answer the text (an
        :class:`~tinker_core.env.Action` carrying how the turn ended).

        The observation is rendered by the renderer: the first as the role's prompt (with the
        env's system prompt and tools), later ones appended after the role's last sampled tokens;
        the action carries the sample's parsed tool calls when the env declares tools."""
        self._seated(role)
        seat = self.seats[role]
        obs_ids = seat.render(observation)
        context = seat.fsm.num_tokens + len(obs_ids)
        if context + self.max_new_tokens > self.context_limit:
            self.overflow = (
                f"role {role!r}: context of {context} tokens + max_new_tokens="
                f"{self.max_new_tokens} exceeds the model's window of {self.context_limit} tokens"
            )
            raise EpisodeError("context_overflow", self.overflow)
        seq = await self.batcher.request((self.index, self.roles.index(role)), seat.adapter, seat.fsm.tokens + obs_ids)
        # no await from here on: the turn is recorded exactly when the coordinator gets the action
        seat.observe(obs_ids)  # PENDING (first turn) or INTERACTING: masked
        self.new_tokens += len(seq.tokens)
        return seat.act(seq)

    def scripted_agent(self, role: str) -> Agent:
        """The scripted agent of ``role``, each call limited to ``turn_timeout_s``."""
        agent = self.scripted[role]

        async def call(r: str, observation: Observation) -> Any:
            self._seated(r)
            return await call_agent_async(agent, r, observation, self.turn_timeout_s)

        return call

    def for_coordinator(self, self_play: bool) -> AsyncAgent | dict[str, AsyncAgent]:
        """The ``agents`` argument of the coordinator: one agent (self-play) or one per role."""
        if self_play:
            return AsyncAgent(self.learner)
        return {
            r: AsyncAgent(self.learner) if r in self.seats else AsyncAgent(self.scripted_agent(r))
            for r in self.roles
        }

    def trajectories(self, result: EpisodeResult, group_id: int, seed: int) -> dict[str, Trajectory]:
        """The trajectory of every learner role that acted, rewarded per turn from ``result``."""
        out: dict[str, Trajectory] = {}
        for ri, role in enumerate(self.roles):
            seat = self.seats.get(role)
            if seat is None or seat.fsm.num_turns == 0:
                continue
            rewards = result.turn_rewards[role]
            if len(rewards) != seat.fsm.num_turns:  # pragma: no cover - an internal invariant
                raise RuntimeError(
                    f"episode {self.index} role {role!r}: the coordinator recorded {len(rewards)} turns, "
                    f"the FSM {seat.fsm.num_turns}"
                )
            for r in rewards:  # the coordinator credits each turn once the game is over
                seat.fsm.end_turn(r)
            out[role] = seat.finish(
                group_id=group_id * len(self.roles) + ri,
                role=role,
                adapter=seat.adapter,
                episode=self.index,
                seed=seed,
                outcome=result.outcomes[role],
                reason=result.reason,
            )
        return out
