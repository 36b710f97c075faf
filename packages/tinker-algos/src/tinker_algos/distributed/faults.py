"""Faults injected on purpose, to test that a distributed job survives them or catches them.

The operator's environment variable ``OPENTINKER_FAULTS`` (read by the job's own process, never
from a job config: a tenant cannot set it) lists faults as ``ACTOR:KIND@STEP`` separated by
commas, e.g. ``rollout-1:exit@3,learner-1:exit@4``:

* ``exit`` -- the actor's process ends (``os._exit``) when it gets work of that step, as a killed
  machine would;
* ``keep-weights`` -- from that step on, the rollout worker acknowledges weight records but keeps
  its old weights (a sampler that silently never got the update; the sync check must catch it);
* ``lag`` -- at that step the rollout worker samples with the weights it held before (a weight
  sync that arrived late; ``staleness_strategy: drop`` must drop and refill the groups).

Each fault fires once per run directory (a marker under ``<run_dir>/.faults/``), so a restarted
actor does not fail again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

ENV = "OPENTINKER_FAULTS"
KINDS = ("exit", "keep-weights", "lag")


def from_environment() -> str:
    """The fault list of this process's environment ('' without one)."""
    return os.environ.get(ENV, "")


@dataclass
class Faults:
    """The faults of one actor (by name) of one run."""

    name: str
    run_dir: Path | None
    at: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str, name: str, run_dir: str | Path | None) -> Faults:
        at: dict[str, int] = {}
        for item in filter(None, (s.strip() for s in spec.split(","))):
            actor, _, rest = item.partition(":")
            kind, _, step = rest.partition("@")
            if kind not in KINDS or not step.isdigit():
                raise ValueError(f"{ENV}: {item!r} is not ACTOR:KIND@STEP with KIND one of {', '.join(KINDS)}")
            if actor == name:
                at[kind] = int(step)
        return cls(name, Path(run_dir) if run_dir else None, at)

    def due(self, kind: str, step: int) -> bool:
        """Whether ``kind`` fires at ``step`` (at or after its step, once per run directory)."""
        if kind not in self.at or step < self.at[kind]:
            return False
        if self.run_dir is None:
            return True
        marker = self.run_dir / ".faults" / f"{self.name}-{kind}"
        if marker.exists():
            return False
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(step), encoding="utf-8")
        return True

    def active(self, kind: str, step: int) -> bool:
        """Whether a lasting fault (``keep-weights``) is on at ``step``."""
        return kind in self.at and step >= self.at[kind]

    def maybe_exit(self, kind: str, step: int) -> None:
        if self.due(kind, step):
            os._exit(17)
