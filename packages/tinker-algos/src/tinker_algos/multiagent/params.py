"""``algorithm.params.multi_agent`` of a GRPO stage whose env has roles, checked against that env."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from tinker_algos.multiagent.roles import Learner, Opponent, opponent
from tinker_core.config import LeagueConfig, MultiAgentConfig, RoleLearnerConfig
from tinker_core.config.multi_agent_env import multi_agent_problems
from tinker_core.errors import ConfigError

if TYPE_CHECKING:
    from tinker_core.env import EnvSpec

__all__ = ["MultiAgentParams", "role_adapter"]


def role_adapter(adapter: str, role: str) -> str:
    """The name of ``role``'s LoRA adapter in ``learners`` mode: ``<adapter>-<role>`` (the job's
    adapter name first, so jobs sharing a model host keep apart), characters an adapter name
    cannot hold replaced by ``_``."""
    return f"{adapter}-{re.sub(r'[^A-Za-z0-9_-]', '_', role)}"


@dataclass(frozen=True)
class MultiAgentParams:
    """``algorithm.params.multi_agent`` of a GRPO stage whose env has roles.

    Attributes:
        mode: ``self_play`` (default): the policy plays every role and learns from all of them;
            ``opponent``: the policy plays ``learner_role`` against a scripted ``opponent``;
            ``learners``: each role is played by its own LoRA adapter (:func:`role_adapter`),
            trained by its own optimizer from its own turns only; ``league``: the policy plays a
            pool of its own past snapshots (and ``league.scripted`` opponents), see
            :mod:`~tinker_algos.algorithms.league`.
        opponent: a scripted opponent the env offers by name (default ``random``; the games of
            tinker-env-games offer ``random``, tic-tac-toe also ``minimax``) -- the opponent in
            ``opponent`` mode.
        learner_role: the role the policy plays in ``opponent`` mode (default: the first role).
        eval_opponent: who the greedy policy plays in held-out evaluation (default: ``opponent``;
            with ``eval_opponents``, its first); evaluation alternates the policy's role over the
            env's roles (``learners``: each role's adapter plays its own role).
        eval_opponents: every scripted opponent of held-out evaluation, in order (the config's
            ``eval_opponents``; else the one ``eval_opponent`` or ``opponent``, and then the
            evaluation logs no ``eval/vs/<opponent>/`` keys: :attr:`per_opponent` is False).
        roles: ``learners`` mode: every role of the env, with its own settings (an empty
            :class:`~tinker_core.config.RoleLearnerConfig` takes the stage's); empty otherwise.
        league: ``league`` mode: the pool's settings; None otherwise.
    """

    mode: Literal["self_play", "opponent", "learners", "league"] = "self_play"
    opponent: str = "random"
    learner_role: str | None = None
    eval_opponent: str | None = None
    eval_opponents: tuple[str, ...] = ()
    roles: Mapping[str, RoleLearnerConfig] = field(default_factory=dict)
    league: LeagueConfig | None = None

    @classmethod
    def for_env(
        cls, config: MultiAgentConfig | None, spec: EnvSpec, *, where: str = "algorithm.params.multi_agent", lora: bool = True
    ) -> MultiAgentParams:
        """The settings of ``config`` (already validated by the job config) checked against the env.

        What only the env can tell is checked here, raising ``ConfigError`` naming the field: the
        opponents that will be played (``opponent`` in ``opponent`` mode, and the evaluation
        opponent, ``eval_opponent`` or else ``opponent``) must be offered by the env (its
        ``scripted_opponents``, found through the registry by ``spec.id``), and ``learner_role``
        must be one of its roles. A multi-agent env that offers no opponent cannot be evaluated,
        and fails here, before training. ``learners`` mode needs a LoRA job (``lora``: one adapter
        per role) and ``roles`` naming exactly the env's roles.
        """
        config = config or MultiAgentConfig()
        problems = multi_agent_problems(config, spec, where, lora)  # tinker_core: config validate runs them too
        if problems:
            raise ConfigError(problems)
        roles: dict[str, RoleLearnerConfig] = {}
        if config.mode == "learners":
            roles = {r: (config.roles or {}).get(r) or RoleLearnerConfig() for r in spec.roles}
        league = (config.league or LeagueConfig()) if config.mode == "league" else None
        return cls(mode=config.mode, opponent=config.opponent, learner_role=config.learner_role,
                   eval_opponent=config.eval_opponent or (config.eval_opponents or [None])[0],
                   eval_opponents=tuple(config.eval_opponents or ()), roles=roles, league=league)

    @property
    def held_out_opponents(self) -> tuple[str, ...]:
        """Who held-out evaluation plays, in order: ``eval_opponents``, else ``eval_opponent``, else ``opponent``."""
        return self.eval_opponents or (self.eval_opponent or self.opponent,)

    @property
    def per_opponent(self) -> bool:
        """Whether held-out evaluation logs each opponent's numbers under ``eval/vs/<opponent>/``
        (the stage listed ``eval_opponents``)."""
        return bool(self.eval_opponents)

    def agents(self, roles: Sequence[str], adapter: str | None) -> Learner | dict[str, Learner | Opponent]:
        """The ``agents`` argument of :func:`~tinker_algos.multiagent.multi_agent_rollout` for training."""
        if self.mode == "self_play":
            return Learner(adapter)
        if self.mode == "learners":
            assert adapter is not None, "learners mode trains LoRA adapters (checked by for_env)"
            return {r: Learner(role_adapter(adapter, r)) for r in roles}
        if self.mode == "league":
            raise ValueError("league mode draws each task's opponent from its pool: use tinker_algos.algorithms.league.League")
        learner = self.learner_role or roles[0]
        return {r: Learner(adapter) if r == learner else opponent(self.opponent) for r in roles}
