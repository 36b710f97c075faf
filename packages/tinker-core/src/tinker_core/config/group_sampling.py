"""``rollout.dynamic_sampling`` and ``rollout.curriculum``: which groups a GRPO step trains on,
and which difficulty its prompts are drawn at.

Kept apart from :mod:`tinker_core.config.models` (its own small section). Applied by
``tinker_algos.rollout.group_filter`` (dynamic sampling, the difficulty filter) and
``tinker_algos.rollout.curriculum`` (the curriculum).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

GroupFilterName = Literal["tied", "pass_rate"]


class DynamicSamplingConfig(BaseModel):
    """Drop the groups without a learning signal and refill the step with fresh prompts.

    DAPO's dynamic sampling (verl's ``filter_groups``).
    ``filter: tied`` drops a group whose episodes all got the same reward (every group-relative
    advantage is 0 there). ``filter: pass_rate`` is the difficulty filter: it keeps a group only
    while its prompt's recent pass rate -- the share of successful episodes among the last
    ``window`` episodes of that prompt, over the steps it was drawn in, this group's included --
    lies strictly between 0 and 1 (a prompt the policy always or never solves is dropped). The
    dropped groups are replaced by groups of fresh prompts, sampled in at most ``max_rounds``
    extra rounds of ``prompts_per_step`` prompts each; a step still short after them trains on the
    groups it kept (``sampling/short_groups`` says how many were missing).
    """

    model_config = ConfigDict(extra="forbid", validate_default=True)

    enabled: bool = Field(False, description="Drop uninformative groups and refill the step with fresh prompts.")
    filter: GroupFilterName = Field(
        "tied", description="tied: drop groups whose rewards all tie; pass_rate: keep prompts whose recent pass rate is strictly between 0 and 1.",
    )
    max_rounds: int = Field(2, ge=0, le=16, description="Extra sampling rounds of prompts_per_step fresh prompts at most (bounded oversampling).")
    window: int = Field(16, ge=1, le=4096, description="pass_rate: the most recent episodes per prompt its pass rate is read from.")
    max_prompts: int = Field(100_000, ge=1, le=10_000_000, description="pass_rate: prompts remembered at most (the oldest are forgotten).")


class CurriculumConfig(BaseModel):
    """Draw training prompts at the env's difficulty levels, moving by recent success.

    The env declares its levels (``EnvSpec.difficulty_levels``). After each step, the success rate over the last ``window`` steps at the
    current level; at ``promote_at`` or above the next level starts, below ``demote_below`` the
    previous one (the window starts afresh after a move)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    enabled: bool = Field(False, description="Draw training prompts at the env's difficulty levels, moving by recent success.")
    start: int = Field(0, ge=0, le=1000, description="The level index the stage starts at.")
    window: int = Field(3, ge=1, le=1000, description="Steps of success rate a move is decided on.")
    promote_at: float = Field(0.8, gt=0.0, le=1.0, description="Success rate at which the next level starts.")
    demote_below: float | None = Field(None, ge=0.0, lt=1.0, description="Success rate below which the previous level returns; None: never.")

    @model_validator(mode="after")
    def _thresholds(self) -> CurriculumConfig:
        if self.demote_below is not None and self.demote_below >= self.promote_at:
            raise ValueError(f"demote_below ({self.demote_below}) must be below promote_at ({self.promote_at})")
        return self
