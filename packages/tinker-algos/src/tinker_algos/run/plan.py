"""Where a run is and what each step does besides learning.

* :class:`Progress` -- the next step of the next stage and the steps done in all; a checkpoint's
  ``progress.json``, so a resumed run starts exactly where it stopped.
* :class:`StepPlan` -- decided before a step runs (evaluate? log? checkpoint as what progress?)
  and updated by the step's evaluation: a stage's ``stop_at`` that it reaches ends the stage there.
* :func:`kept_steps` -- which checkpoints the keep policy (``checkpoint.keep_last``, ``keep_every``) keeps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class Progress:
    """Where a run is: the next step of the next stage, and the steps done in all (progress.json)."""

    stage_index: int = 0
    stage_step: int = 0
    global_step: int = 0

    @classmethod
    def read(cls, checkpoint: Path) -> Progress:
        return cls(**json.loads((checkpoint / "progress.json").read_text()))


@dataclass(frozen=True)
class StepPlan:
    """What step ``stage_step`` of a stage does besides learning (decided before it runs)."""

    stage_step: int
    global_step: int
    evaluate: bool
    report: bool
    #: the progress a checkpoint written after the step records; None: no checkpoint
    save_as: Progress | None
    #: the stage's ``stop_at`` (checked against this step's evaluation), None without one
    stop_at: dict[str, float] | None = None
    #: the next stage's first step: where the run goes on when this step ends the stage early
    next_stage: Progress | None = None
    ends_stage_early: bool = False

    def after_evaluation(self, ev: dict[str, float]) -> StepPlan:
        """The plan once the step's evaluation is known: a ``stop_at`` it reaches ends the stage
        here, so the checkpoint after this step records the next stage's first step."""
        if not ev or not self.stop_at or self.next_stage is None:
            return self
        if all(ev.get(m, -math.inf) >= v for m, v in self.stop_at.items()):
            return replace(self, save_as=self.next_stage, ends_stage_early=True, report=True)
        return self


def kept_steps(steps: Iterable[int], keep_last: int, keep_every: int = 0) -> set[int]:
    """The checkpoint steps the keep policy keeps: the newest ``keep_last`` of ``steps``, and every
    step that is a multiple of ``keep_every`` (0: none beyond the newest)."""
    ordered = sorted(set(steps))
    kept = set(ordered[-keep_last:]) if keep_last > 0 else set()
    if keep_every > 0:
        kept |= {s for s in ordered if s % keep_every == 0}
    return kept
