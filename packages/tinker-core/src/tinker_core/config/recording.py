"""The ``logging`` section: where metrics go (JSONL, trackers, the plot, the trace) and which
sampled episodes a run records in ``rollouts.jsonl`` (``logging.rollouts``).

The record format is :class:`tinker_core.episodes.RolloutRecord`, the writer ``tinker_algos.records.recording``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tinker_core.config.checkpointing import MAX_STEPS

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


Tracker = Literal["tensorboard", "wandb", "mlflow", "trackio"]
TRACKERS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tinker-algos[tensorboard]"),
    "wandb": ("wandb", "tinker-algos[wandb]"),
    "mlflow": ("mlflow", "tinker-algos[mlflow]"),  # mlflow-skinny >= 3.17.2 (imports with protobuf 7)
    "trackio": ("trackio", "tinker-algos[trackio]"),
}
"""``logging.report_to`` names -> (the module it imports, what to ``pip install`` for it)."""


class LoggingConfig(BaseModel):
    """Where metrics go: JSONL, experiment trackers (TensorBoard, W&B, MLflow, trackio), a plot."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    jsonl: bool = Field(True, description="Write metrics.jsonl in the run directory.")
    tensorboard: bool = Field(
        True,
        description="Write TensorBoard event files (skipped with one warning when tensorboard is not installed); "
        "with report_to set, it follows whether report_to lists tensorboard.",
    )
    report_to: list[Tracker] | None = Field(
        None,
        description="Experiment trackers that get every logged step: tensorboard, wandb, mlflow, trackio. "
        "None: [tensorboard] when 'tensorboard' is true, else none. Each needs its library "
        "(pip install 'tinker-algos[wandb]', ...); a listed one that is missing fails the job before it starts.",
    )
    project: str = Field(
        "opentinker", min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="The W&B project, MLflow experiment or trackio project the job's run goes to (named after the job).",
    )
    plot: bool = Field(True, description="Write a learning-curve PNG at the end (skipped with one warning without matplotlib).")
    every: int = Field(1, ge=1, le=MAX_STEPS, description="Log metrics every N steps.")
    rollouts: RolloutsLogConfig = Field(default_factory=RolloutsLogConfig, description="Which sampled episodes go to rollouts.jsonl in the run directory (the logging.rollouts section below).")
    trace: bool = Field(True, description="Write trace.json: each step's phases as Chrome/Perfetto trace events (opentinker trace RUN_DIR sums them up).")

    @model_validator(mode="after")
    def _one_tensorboard_switch(self) -> LoggingConfig:
        if self.report_to is None:
            return self
        self.report_to = list(dict.fromkeys(self.report_to))  # each tracker once, in the given order
        listed = "tensorboard" in self.report_to
        if "tensorboard" in self.model_fields_set and self.tensorboard != listed:
            raise ValueError(
                f"tensorboard: {str(self.tensorboard).lower()} contradicts report_to: {self.report_to}; "
                "drop 'tensorboard' and list the trackers in report_to"
            )
        self.tensorboard = listed  # written back, so config.json reads the same way again
        return self

    def trackers(self) -> list[str]:
        """The trackers this job reports to (``report_to``, or ``[tensorboard]`` by default)."""
        if self.report_to is not None:
            return list(self.report_to)
        return ["tensorboard"] if self.tensorboard else []
