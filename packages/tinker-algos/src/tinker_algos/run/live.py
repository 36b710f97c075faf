"""Live settings inside a run: taken at step boundaries, applied, logged, replayed on resume.

At each step boundary (before step ``s``) the run takes the requests waiting in its
``control/`` folder (:mod:`tinker_core.config.live`: ``opentinker job set RUN_DIR KEY=VALUE``),
checks each like a config and against the run, and applies it to the settings the next step
reads: the stage's optimizer LR (the trainer's base LR; the schedule still multiplies it), its
rollout temperature, its KL coefficient, its evaluation cadence. Each change is

* logged in ``metrics.jsonl``: step ``s``'s row gets ``live/<key.path>`` with the new value (that
  step is logged whatever ``logging.every``), and the run's log says so;
* recorded in ``live.jsonl`` (``{"step": s, "set": "key.path=value"}``), so a resumed run replays
  every change at the step it took effect and goes on exactly as the run that never stopped (a
  fork keeps those before its step).

A request that cannot apply is refused -- a setting that is not live, a stage that is over, a
section the stage does not have, a KL coefficient in a stage that started without a reference
policy -- with a log line and the reason in ``control/rejected/``; the run goes on unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinker_core.config import JobConfig, OverrideError, StageConfig
from tinker_core.config.live import check_live, reject, take_requests
from tinker_core.config.overrides import Override
from tinker_core.errors import ConfigError

LIVE_LOG = "live.jsonl"
"""The live changes a run applied, each with the step it took effect at."""


class LiveSettings:
    """The live settings of one run: ``job`` and ``stages`` are the run's own (changed in place);
    ``given`` is the config as started (what a stage was configured with)."""

    def __init__(self, run_dir: Path, job: JobConfig, stages: list[StageConfig], given: JobConfig, on_log: Callable[[str], object]) -> None:
        self.dir, self.job, self.stages, self.given, self.on_log = run_dir, job, stages, given, on_log
        self.path = run_dir / LIVE_LOG
        self.pending: dict[int, list[str]] = {}

    @classmethod
    def for_run(cls, run_dir: Path, job: JobConfig, stages: list[StageConfig], given: JobConfig,
                on_log: Callable[[str], object], *, resume_step: int | None) -> LiveSettings:
        """A fresh run starts with no changes; a resumed one applies those of its steps up to
        ``resume_step`` now and replays the later ones at their steps."""
        live = cls(run_dir, job, stages, given, on_log)
        if resume_step is None:
            live.path.unlink(missing_ok=True)
            return live
        for step, text in read_live_log(live.path):
            if step <= resume_step:
                live.apply_text(text, None)
            else:
                live.pending.setdefault(step, []).append(text)
        return live

    def boundary(self, step: int, si: int, set_lr: Callable[[float], None]) -> dict[str, float]:
        """Before step ``step`` of stage ``si``: replay the changes recorded for it, take the
        waiting requests; ``{"live/<key.path>": value}`` of every change applied."""
        applied: dict[str, float] = {}
        for text in self.pending.pop(step, []):
            self.apply_text(text, applied)
        for name, changes in take_requests(self.dir):
            try:
                if changes is None:
                    raise OverrideError('not a request: a JSON object {"set": ["key.path=value", ...]} was expected')
                new_job, overrides = check_live(self.job, changes, source=f"control/{name}")
                for ov in overrides:
                    self.check_stage(ov, new_job, si)
            except (OverrideError, ConfigError) as e:
                reason = " ".join(str(e).split())
                reject(self.dir, name, changes, reason)
                self.on_log(f"live settings: refused {name}: {reason}")
                continue
            with self.path.open("a", encoding="utf-8") as f:
                for ov in overrides:
                    f.write(json.dumps({"step": step, "set": ov.text}) + "\n")
                    self.apply(ov, new_job, applied)
        if applied:
            set_lr(float(self.stages[si].optimizer.lr))  # type: ignore[union-attr]
            self.on_log(f"step {step}: live settings " + ", ".join(f"{k[5:]}={v:g}" for k, v in applied.items()))
        return applied

    def apply_text(self, text: str, applied: dict[str, float] | None) -> None:
        """Apply a recorded change (checked when it was taken)."""
        new_job, (ov,) = check_live(self.job, [text])
        self.apply(ov, new_job, applied)

    def check_stage(self, ov: Override, new_job: JobConfig, si: int) -> None:
        """Refuse a change that no stage from ``si`` on would see, and a KL coefficient change in a
        stage configured without a KL penalty (it has no reference policy)."""
        stages = self.affected(ov, si)
        if not stages:
            raise OverrideError(f"{ov.dotted}: no stage from the running one ({si}) on uses it; "
                                f"the running stage's is {'stages.' + str(si) + '.' if self.job.stages else ''}{_tail(ov)}")
        if _tail(ov) == "algorithm.kl.coef":
            given = self.given.resolved_stages()
            if any(given[i].algorithm.kl.coef <= 0 for i in stages) or not _section(new_job, ov.path) > 0:
                raise OverrideError(f"{ov.dotted}: a live KL coefficient stays above 0, in stages configured with one "
                                    "(they hold a reference policy); fork the run to add or remove a KL penalty")

    def affected(self, ov: Override, si: int) -> list[int]:
        """The stages from ``si`` on whose setting ``ov`` changes."""
        target = _section(self.job, ov.path[:-1])
        return [i for i in range(si, len(self.stages)) if _section(self.stages[i], _stage_part(ov)[:-1]) is target]

    def apply(self, ov: Override, new_job: JobConfig, applied: dict[str, float] | None) -> None:
        """Set ``ov``'s validated value (from ``new_job``) in the run's own config objects."""
        value = _section(new_job, ov.path)
        setattr(_section(self.job, ov.path[:-1]), str(ov.path[-1]), value)
        if applied is not None:
            applied[f"live/{ov.dotted}"] = float(value)


def read_live_log(path: Path) -> list[tuple[int, str]]:
    """``(step, "key.path=value")`` of each change in a run's ``live.jsonl``, in order."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            out.append((int(row["step"]), str(row["set"])))
        except (ValueError, KeyError, TypeError):
            break
    return out


def _stage_part(ov: Override) -> tuple[Any, ...]:
    return ov.path[2:] if ov.path[0] == "stages" else ov.path


def _tail(ov: Override) -> str:
    return ".".join(str(p) for p in _stage_part(ov))


def _section(obj: Any, path: tuple[Any, ...]) -> Any:
    """The object at ``path`` in a config (attributes; ints index lists)."""
    for part in path:
        obj = obj[part] if isinstance(part, int) else getattr(obj, part, None)
        if obj is None:
            return None
    return obj
