"""``algorithm.params.multi_agent`` of a GRPO stage whose env has roles: parsed and checked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from tinker_algos.multiagent.roles import Learner, Opponent, opponent
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

    FIELDS: ClassVar[tuple[str, ...]] = ("mode", "opponent", "learner_role", "eval_opponent")

    @classmethod
    def from_params(cls, raw: Any, spec: EnvSpec, *, where: str = "algorithm.params.multi_agent") -> MultiAgentParams:
        """Validate ``raw`` (a dict or None) against the env's spec; raise ``ConfigError`` naming the field.

        The opponents that will be played (``opponent`` in ``opponent`` mode, and the evaluation
        opponent, ``eval_opponent`` or else ``opponent``) must be offered by the env (its
        ``scripted_opponents``, found through the registry by ``spec.id``): a multi-agent env
        that offers none cannot be evaluated, and fails here, before training.
        """
        raw = {} if raw is None else raw
        if not isinstance(raw, Mapping):
            raise ConfigError([f"{where}: must be a mapping like {{mode: self_play}}, got {type(raw).__name__}"])
        problems: list[str] = []
        unknown = sorted(set(raw) - set(cls.FIELDS))
        if unknown:
            problems.append(f"{where}: unknown key(s) {unknown}; known: {', '.join(cls.FIELDS)}")
        mode = raw.get("mode", "self_play")
        if mode not in ("self_play", "opponent"):
            problems.append(f"{where}.mode: {mode!r} is not 'self_play' or 'opponent'")
        opp = raw.get("opponent", "random")
        eval_opp = raw.get("eval_opponent")
        # training (mode: opponent) plays `opponent`; held-out evaluation plays `eval_opponent`,
        # by default `opponent`: check each name that will be played, or that was written
        checked = [("eval_opponent", eval_opp)] if eval_opp is not None else []
        if "opponent" in raw or mode == "opponent" or eval_opp is None:
            checked.insert(0, ("opponent", opp))
        offered = _offered(spec)
        for key, value in checked:
            if value not in offered:
                default = "" if key in raw else " (the default)"
                problems.append(
                    f"{where}.{key}: {value!r}{default} is not a scripted opponent of {spec.id} "
                    f"(it offers: {', '.join(offered) or 'none'}; held-out evaluation plays "
                    "against eval_opponent, default: opponent)"
                )
        learner_role = raw.get("learner_role")
        if learner_role is not None and learner_role not in spec.roles:
            problems.append(f"{where}.learner_role: {learner_role!r} is not a role of {spec.id} ({', '.join(spec.roles)})")
        if learner_role is not None and mode == "self_play":
            problems.append(f"{where}.learner_role: only used with mode: opponent (self-play trains every role)")
        if problems:
            raise ConfigError(problems)
        return cls(mode=mode, opponent=opp, learner_role=learner_role, eval_opponent=eval_opp)

    def agents(self, roles: Sequence[str], adapter: str | None) -> Learner | dict[str, Learner | Opponent]:
        """The ``agents`` argument of :func:`~tinker_algos.multiagent.multi_agent_rollout` for training."""
        if self.mode == "self_play":
            return Learner(adapter)
        learner = self.learner_role or roles[0]
        return {r: Learner(adapter) if r == learner else opponent(self.opponent) for r in roles}
