"""Scripted opponents: agents that need no model, offered by the multi-agent envs themselves.

The contract
------------
A :class:`~tinker_core.env.MultiAgentTextEnv` class may declare the opponents it can be played
against, by name, in a class attribute::

    class TicTacToeEnv(BoardGameEnv):
        scripted_opponents = {"random": RandomAgent, "minimax": MinimaxAgent}

Each value is an :class:`OpponentFactory`: ``factory(seed=seed)`` returns a fresh agent
(``agent(role, observation) -> str``, as in :mod:`tinker_core.coordinator`) whose choices
depend only on that seed and what it is shown. A class whose ``__init__`` takes ``seed`` is one.

Code that knows no env package (tinker-algos' ``algorithm.params.multi_agent: {opponent:
minimax}``) finds an opponent through the env: :func:`scripted_opponents` lists what an env
offers (from an instance, a class, or a registered env id, so a config can be checked before
any env is built), :func:`make_opponent` builds one. An env that declares none offers none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tinker_core.coordinator import Agent

__all__ = ["OpponentFactory", "make_opponent", "scripted_opponents"]


class OpponentFactory(Protocol):
    """Builds a scripted opponent: ``factory(seed=seed) -> agent``."""

    def __call__(self, *, seed: int | None = None) -> Agent: ...


def scripted_opponents(env: object) -> dict[str, OpponentFactory]:
    """The scripted opponents ``env`` offers, by name (its ``scripted_opponents`` attribute).

    ``env`` is an env, an env class, or a registered env id (its registered factory is looked
    at, so register the env class itself). An env that declares none gives ``{}``.
    """
    if isinstance(env, str):
        from tinker_core.registry import get_registry

        env = get_registry("envs").get(env).obj
    return dict(getattr(env, "scripted_opponents", None) or {})


def make_opponent(env: object, name: str, seed: int | None = None) -> Agent:
    """The scripted opponent ``name`` of ``env`` (as for :func:`scripted_opponents`), seeded.

    Raises ValueError naming what the env offers when it has no opponent of that name.
    """
    offered = scripted_opponents(env)
    if name not in offered:
        raise ValueError(
            f"{_env_name(env)} offers no scripted opponent {name!r} (it offers: "
            f"{', '.join(sorted(offered)) or 'none'}); an env declares them in its class "
            "attribute scripted_opponents"
        )
    return offered[name](seed=seed)


def _env_name(env: object) -> str:
    if isinstance(env, str):
        return env
    spec = getattr(env, "env_spec", None)
    return spec.id if spec is not None else getattr(env, "__name__", type(env).__name__)
