"""``algorithm.params.multi_agent`` of a GRPO stage whose env has roles, checked against that env."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from tinker_algos.multiagent.roles import Learner, Opponent, opponent
from tinker_core.config import MultiAgentConfig
from tinker_core.errors import ConfigError, UnknownNameError
from tinker_core.opponents import scripted_opponents

if TYPE_CHECKING:
    from tinker_core.env import EnvSpec

__all__ = ["MultiAgentParams"]


def _offered(spec: EnvSpec) -> list[str]:
    """The names of the scripted opponents the env of ``spec`` offers (none for an env that is
    not registered under its id)."""
    try:
        return sorted(scripted_opponents(spec.id))
    except UnknownNameError:
        return []


@dataclass(frozen=True)
class MultiAgentParams:
    """``algorithm.params.multi_agent`` of a GRPO stage whose env has roles.

    Attributes:
        mode: ``self_play`` (default): the policy plays every role and learns from all of them;
            ``opponent``: the policy plays ``learner_role`` against a scripted ``opponent``.
        opponent: a scripted opponent the env offers by name (default ``random``; the games of
            tinker-env-games offer ``random``, tic-tac-toe also ``minimax``) -- the opponent in
            ``opponent`` mode.
        learner_role: the role the policy plays in ``opponent`` mode (default: the first role).
        eval_opponent: who the greedy policy plays in held-out evaluation (default: ``opponent``);
            evaluation alternates the policy's role over the env's roles.
    """

    mode: Literal["self_play", "opponent"] = "self_play"
    opponent: str = "random"
    learner_role: str | None = None
    eval_opponent: str | None = None

    @classmethod
    def for_env(
        cls, config: MultiAgentConfig | None, spec: EnvSpec, *, where: str = "algorithm.params.multi_agent"
    ) -> MultiAgentParams:
        """The settings of ``config`` (already validated by the job config) checked against the env.

        What only the env can tell is checked here, raising ``ConfigError`` naming the field: the
        opponents that will be played (``opponent`` in ``opponent`` mode, and the evaluation
        opponent, ``eval_opponent`` or else ``opponent``) must be offered by the env (its
        ``scripted_opponents``, found through the registry by ``spec.id``), and ``learner_role``
        must be one of its roles. A multi-agent env that offers no opponent cannot be evaluated,
        and fails here, before training.
        """
        config = config or MultiAgentConfig()
        written = config.model_fields_set
        # training (mode: opponent) plays `opponent`; held-out evaluation plays `eval_opponent`,
        # by default `opponent`: check each name that will be played, or that was written
        checked = [("eval_opponent", config.eval_opponent)] if config.eval_opponent is not None else []
        if "opponent" in written or config.mode == "opponent" or config.eval_opponent is None:
            checked.insert(0, ("opponent", config.opponent))
        offered = _offered(spec)
        problems = [
            f"{where}.{key}: {value!r}{'' if key in written else ' (the default)'} is not a scripted opponent of "
            f"{spec.id} (it offers: {', '.join(offered) or 'none'}; held-out evaluation plays against "
            "eval_opponent, default: opponent)"
            for key, value in checked
            if value not in offered
        ]
        if config.learner_role is not None and config.learner_role not in spec.roles:
            problems.append(f"{where}.learner_role: {config.learner_role!r} is not a role of {spec.id} ({', '.join(spec.roles)})")
        if problems:
            raise ConfigError(problems)
        return cls(mode=config.mode, opponent=config.opponent, learner_role=config.learner_role,
                   eval_opponent=config.eval_opponent)

    def agents(self, roles: Sequence[str], adapter: str | None) -> Learner | dict[str, Learner | Opponent]:
        """The ``agents`` argument of :func:`~tinker_algos.multiagent.multi_agent_rollout` for training."""
        if self.mode == "self_play":
            return Learner(adapter)
        learner = self.learner_role or roles[0]
        return {r: Learner(adapter) if r == learner else opponent(self.opponent) for r in roles}
