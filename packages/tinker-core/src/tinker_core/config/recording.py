"""``logging.rollouts``: which sampled episodes a run records in ``rollouts.jsonl``.

Kept apart from :mod:`tinker_core.config.models` (its own small section); the record format is
:mod:`tinker_core.rollout_records`, the writer ``tinker_algos.records.recording``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_PER_STEP = 4096


class RolloutsLogConfig(BaseModel):
    """Which sampled episodes a run records in `rollouts.jsonl` (see the guide *Rollouts and traces*).

    ``per_step`` of every ``every``-th step's episodes (training), and at most ``per_step`` of each
    held-out evaluation's; ``per_step: 0`` records none.
    """

    model_config = ConfigDict(extra="forbid", validate_default=True)

    every: int = Field(1, ge=1, le=10**7, description="Record the episodes of every N-th step (evaluations are recorded whenever they run).")
    per_step: int = Field(
        16, ge=0, le=MAX_PER_STEP,
        description="Episodes recorded per step and per evaluation (0: record none, no rollouts.jsonl).",
    )
    keep: Literal["all", "best-and-worst"] = Field(
        "all",
        description="Which episodes when a step has more than per_step: 'all' takes them in group order "
        "(whole groups first); 'best-and-worst' the highest rewards (per_step - per_step // 2 of them) and the lowest (per_step // 2).",
    )
