"""``checkpoint``: when a run checkpoints, which checkpoints it keeps, whether it resumes.

Kept apart from :mod:`tinker_core.config.models` (its own small section). The keep policy is
applied by ``tinker_algos.run.job`` (``tinker_algos.run.plan.kept_steps``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_STEPS = 10_000_000
"""``algorithm.steps``, and the step counts of ``eval_every``, ``checkpoint.every``, ``keep_every``, ``logging.every``, warmup."""


class CheckpointConfig(BaseModel):
    """When to checkpoint, which to keep, whether to resume.

    The checkpoints kept are the newest ``keep_last`` plus every one whose step is a multiple of
    ``keep_every`` (a sparse history to fork from); the others are deleted as newer ones are written.
    """

    model_config = ConfigDict(extra="forbid", validate_default=True)

    every: int = Field(0, ge=0, le=MAX_STEPS, description="Checkpoint every N steps; 0 = only at the end.")
    keep_last: int = Field(2, ge=1, le=1000, description="The newest checkpoints kept (at most 1000); older ones are deleted unless keep_every keeps them.")
    keep_every: int = Field(
        0, ge=0, le=MAX_STEPS,
        description="Also keep every checkpoint whose step is a multiple of N (e.g. 100: steps 100, 200, ... stay to fork from); 0 keeps none beyond keep_last.",
    )
    keep: int | None = Field(
        None, ge=1, le=1000, exclude=True,
        description="The older name of keep_last: when given it sets keep_last (giving both, with different values, is an error).",
    )
    resume: bool = Field(True, description="Resume from the newest intact checkpoint in the run directory (damaged ones are skipped and logged).")

    @model_validator(mode="after")
    def _keep_alias(self) -> CheckpointConfig:
        if self.keep is not None:
            if "keep_last" in self.model_fields_set and self.keep_last != self.keep:
                raise ValueError(
                    f"keep ({self.keep}) is the older name of keep_last ({self.keep_last}); give one of them"
                )
            self.keep_last, self.keep = self.keep, None
        return self
