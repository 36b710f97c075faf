"""Rollouts: episodes of a policy in text environments (:mod:`.episodes`), agent programs and
their calls, isolation of agent code, and the env probe a stage runs before training.

``from tinker_algos.rollout import rollout, RolloutResult, ...`` keeps working: the names of the
former module ``tinker_algos.rollout`` (now :mod:`tinker_algos.rollout.episodes`) load from it on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_core.lazy import lazy_package

if TYPE_CHECKING:  # pragma: no cover - the names, listed once (lazy_package reads them too)
    from tinker_algos.rollout.episodes import Episode as Episode
    from tinker_algos.rollout.episodes import PolicyTurns as PolicyTurns
    from tinker_algos.rollout.episodes import RolloutError as RolloutError
    from tinker_algos.rollout.episodes import RolloutResult as RolloutResult
    from tinker_algos.rollout.episodes import context_limit as context_limit
    from tinker_algos.rollout.episodes import env_factories as env_factories
    from tinker_algos.rollout.episodes import evaluate as evaluate
    from tinker_algos.rollout.episodes import make_env as make_env
    from tinker_algos.rollout.episodes import rollout as rollout

__getattr__, __dir__, __all__ = lazy_package(__name__)
