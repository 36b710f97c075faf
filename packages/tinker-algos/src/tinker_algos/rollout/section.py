"""A stage's ``rollout`` section turned into the sampler's parameters and :func:`rollout`'s
arguments, in one place: the job's own process (:meth:`StageContext.group_rollout`) and a rollout
worker (:func:`tinker_algos.distributed.rollout_worker.sample_unit`) sample a step's tasks the
same way, which the distributed run's bit-for-bit tests rely on.

A stage reads its section once, when its context is built (:func:`section_rollout_call`, and
:func:`section_sampling_params` without a seed): a step seeds the parameters, takes the live
sampling settings (:data:`LIVE_SAMPLING`, which a run may change between two steps) and calls."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from tinker_core.config.live import LIVE_SETTINGS

if TYPE_CHECKING:
    from tinker_algos.model.models import PolicyModel
    from tinker_algos.model.prompts import PromptRenderer
    from tinker_algos.rollout.episodes import RolloutResult
    from tinker_algos.sampling.sampler import SamplingParams
    from tinker_core.config import RolloutConfig

__all__ = ["BOUND_ONCE", "LIVE_SAMPLING", "section_rollout", "section_rollout_call", "section_sampling_params"]

BOUND_ONCE: tuple[str, ...] = ("group_size", "max_turns", "turn_timeout_s", "max_error_rate", "reuse_kv_cache")
"""The rollout section's settings :func:`section_rollout_call` binds once (none of them is live)."""

LIVE_SAMPLING: tuple[str, ...] = tuple(k.split(".", 1)[1] for k in LIVE_SETTINGS if k.startswith("rollout."))
"""The rollout section's live settings (``temperature``): sampling parameters of the same name,
read at every step (:meth:`tinker_algos.algorithms.base.StageContext.sampling_params`)."""


def section_sampling_params(r: RolloutConfig, seed: int | None) -> SamplingParams:
    """The sampling parameters of the rollout section ``r``, seeded with ``seed`` (None: unseeded,
    a template a step seeds with ``dataclasses.replace``)."""
    from tinker_algos.sampling.sampler import SamplingParams

    return SamplingParams(
        max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, stop=tuple(r.stop), seed=seed,
    )


def section_rollout_call(r: RolloutConfig) -> Callable[..., RolloutResult]:
    """:func:`~tinker_algos.rollout.episodes.rollout` with the group size, turn limit, timeouts,
    error rate and KV-cache reuse of the rollout section ``r`` bound, read once: it is called with
    ``(policy, env_factory, seeds, params, adapter=, renderer=, engine=)``."""
    from tinker_algos.rollout.episodes import rollout

    return partial(rollout, **{k: getattr(r, k) for k in BOUND_ONCE})


def section_rollout(
    r: RolloutConfig,
    policy: PolicyModel,
    env_factory: Callable[[], Any],
    seeds: Sequence[int],
    params: SamplingParams,
    *,
    adapter: str | None,
    renderer: PromptRenderer | None,
    engine: Any = None,
) -> RolloutResult:
    """:func:`section_rollout_call` of ``r``, called once with these arguments."""
    return section_rollout_call(r)(policy, env_factory, seeds, params, adapter=adapter, renderer=renderer, engine=engine)
