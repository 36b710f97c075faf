"""Who plays a role of a multi-agent episode: the policy (:class:`Learner`) or an agent that is
not trained (:class:`Scripted`, or an env's named opponent, :func:`opponent`).

Named opponents (``opponent("random")``, ``opponent("minimax")``) are not known here: the env
being played offers them by name (``scripted_opponents``, the contract of
:mod:`tinker_core.opponents`), so this package never imports an env package.
:func:`resolve_agents` looks them up on the rollout's env.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tinker_core.coordinator import Agent
from tinker_core.opponents import scripted_opponents

__all__ = ["Agent", "Learner", "Opponent", "RoleSpec", "Scripted", "opponent", "resolve_agents"]

@dataclass(frozen=True)
class Learner:
    """A role played by the policy (with LoRA ``adapter``; None: whatever is active).

    Its turns are recorded and returned as a :class:`~tinker_core.contracts.Trajectory`.
    """

    adapter: str | None = None


@dataclass(frozen=True)
class Scripted:
    """A role played by an agent that is not trained (an opponent, a rule, a fixed bot).

    ``make(seed)`` builds the agent for one episode (``seed`` is derived from the episode's seed,
    its index and the role), so a stateful agent such as a seeded random player is
    deterministic however the episodes interleave. Wrap a stateless agent with :meth:`of`.
    """

    make: Callable[[int], Agent]
    name: str = "scripted"

    @classmethod
    def of(cls, agent: Agent, name: str | None = None) -> Scripted:
        """The same ``agent`` object in every episode (it must not keep per-episode state)."""
        return cls(lambda _seed: agent, name or type(agent).__name__)


@dataclass(frozen=True)
class Opponent:
    """A role played by the scripted opponent ``name`` that the env offers (its
    ``scripted_opponents``); :meth:`resolve` turns it into a :class:`Scripted` for an env."""

    name: str

    def resolve(self, env: object) -> Scripted:
        """The opponent as :class:`Scripted` for ``env`` (an env, env class or env id); a fresh,
        seeded agent per episode. Raises ValueError naming what the env offers."""
        offered = scripted_opponents(env)
        if self.name not in offered:
            spec = getattr(env, "env_spec", None)
            what = spec.id if spec is not None else str(env)
            raise ValueError(
                f"opponent {self.name!r}: {what} offers no such scripted opponent (it offers: "
                f"{', '.join(sorted(offered)) or 'none'})"
            )
        factory = offered[self.name]
        return Scripted(lambda seed: factory(seed=seed), self.name)


def opponent(name: str) -> Opponent:
    """The scripted opponent ``name`` of the env being played, e.g. ``random`` (every board game
    of tinker-env-games: a seeded random legal move) or ``minimax`` (perfect tic-tac-toe)."""
    return Opponent(name)


RoleSpec = Learner | Scripted | Opponent | str | Agent
"""What may play a role: a :class:`Learner`, an adapter name (a learner with that adapter), a
:class:`Scripted` agent, an env's named :class:`Opponent`, or a plain agent callable (wrapped
with :meth:`Scripted.of`)."""


def resolve_agents(
    agents: Learner | str | Mapping[str, RoleSpec] | None,
    adapter: str | None,
    roles: Sequence[str],
    env: object,
) -> tuple[bool, dict[str, Learner | Scripted]]:
    """``(self_play, {role: Learner | Scripted})`` for the ``roles`` of ``env`` (named opponents
    are looked up on it)."""
    if agents is None:
        return True, {r: Learner(adapter) for r in roles}
    if isinstance(agents, str):
        agents = Learner(agents)
    if isinstance(agents, Learner):
        return True, {r: agents for r in roles}
    if not isinstance(agents, Mapping):
        raise TypeError(
            f"agents must be None (self-play), a Learner, an adapter name or a dict role -> "
            f"Learner | Scripted | opponent(name) | adapter name | agent; got {type(agents).__name__}"
        )
    missing = [r for r in roles if r not in agents]
    unknown = [r for r in agents if r not in roles]
    if missing or unknown:
        raise ValueError(
            f"agents must name every role of the env exactly once (roles: {', '.join(roles)}); "
            f"missing {missing}, unknown {unknown}"
        )
    plan: dict[str, Learner | Scripted] = {}
    for r in roles:
        a = agents[r]
        if isinstance(a, str):
            plan[r] = Learner(a)
        elif isinstance(a, Learner | Scripted):
            plan[r] = a
        elif isinstance(a, Opponent):
            plan[r] = a.resolve(env)
        elif callable(a):
            plan[r] = Scripted.of(a)
        else:
            raise TypeError(
                f"agents[{r!r}] is a {type(a).__name__}; give a Learner, Scripted, opponent(name), "
                "adapter name or agent"
            )
    if not any(isinstance(p, Learner) for p in plan.values()):
        raise ValueError("agents has no Learner: at least one role must be played by the policy")
    return False, plan
