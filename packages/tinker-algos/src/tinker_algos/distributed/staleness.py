"""Bounded staleness, without models: when a group may start sampling, and whether a sampled
group is too old to train on.

Two layers, as in AReaL and SkyRL (admission) and verl / prime-rl (the check when training):

* **Admission** (:meth:`StalenessBound.admits`): with ``B`` groups per step and the learner at
  version ``v`` (updates applied in the stage), group number ``g`` of the stage (``g = step * B +
  p``) may start sampling only while ``g < (S + v + 1) * B``: the batches of steps up to ``v + S``
  are sampled or in flight, no further. With ``S = 0`` a step's groups start after the previous
  update (on-policy); with ``S = 1`` the next step's groups sample while this step trains.
* **The check** (:meth:`StalenessBound.stale`): a group sampled with weights of version ``u``,
  trained at version ``v``, is ``v - u`` updates old; above ``S`` it is too stale (a worker whose
  weights arrived late). ``staleness_strategy: drop`` drops it and samples its prompts again;
  ``wait`` makes workers wait for new enough weights, so none should ever be found (the job
  fails naming the worker if one is).

:func:`staleness_metrics` are the per-step ``staleness/*`` keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StalenessBound:
    """The bound ``max_staleness`` (``S``) for a stage of ``groups_per_step`` (``B``) groups."""

    max_staleness: int
    groups_per_step: int

    def __post_init__(self) -> None:
        if self.max_staleness < 0 or self.groups_per_step < 1:
            raise ValueError(f"StalenessBound needs max_staleness >= 0 and groups_per_step >= 1, got {self}")

    def admits(self, started: int, version: int) -> bool:
        """Whether one more group may start: ``started`` groups of the stage were accepted or are
        running, the learner is at ``version``."""
        return started < (self.max_staleness + version + 1) * self.groups_per_step

    def last_admitted_step(self, version: int) -> int:
        """The last step whose groups may be sampling at ``version``: ``version + S``."""
        return version + self.max_staleness

    def min_version(self, step: int) -> int:
        """The oldest weights step ``step`` may train on: version ``step - S`` (at least 0)."""
        return max(0, step - self.max_staleness)

    def stale(self, sampled_versions_G: Sequence[int], train_version: int) -> list[int]:
        """Indices of the groups more than ``S`` versions behind ``train_version``."""
        return [i for i, u in enumerate(sampled_versions_G) if train_version - int(u) > self.max_staleness]


def staleness_metrics(sampled_versions_G: Sequence[int], train_version: int, span_G: Sequence[int] | None = None) -> dict[str, float]:
    """``staleness/min|mean|max`` (versions behind at training, over the step's groups) and
    ``staleness/version_span_max`` (the most versions one group's episodes were sampled across)."""
    behind = train_version - np.asarray(list(sampled_versions_G), dtype=np.float64)
    if behind.size == 0:
        return {}
    out = {"staleness/min": float(behind.min()), "staleness/mean": float(behind.mean()), "staleness/max": float(behind.max())}
    out["staleness/version_span_max"] = float(max(span_G)) if span_G else 0.0
    return out
