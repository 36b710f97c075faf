"""Where a run goes on from a checkpoint, and whether the config it is given lets it.

Every run checkpoint holds ``job.json`` (:data:`JOB_RECORD`): the config that wrote it, that
config's hash, and the steps each finished stage ran. Against it, :func:`continuation` decides:

* an unfinished run resumes where the checkpoint stopped (as it always did);
* a **finished** run (its checkpoint is past the last stage) given the same config -- or one that
  differs only in ``logging``, ``checkpoint``, ``resources`` or ``priority`` -- has nothing to run:
  its stored ``result.json`` stands, untouched;
* a finished run whose last stage's ``algorithm.steps`` was raised is **extended**: it goes on from
  its last checkpoint (weights, optimizer, RNG and algorithm state) with the new step count, as
  TRL's resume with a larger ``max_steps`` does (a ``linear``/``cosine`` LR schedule is stretched
  over the new count);
* any other change to a finished run is a :class:`~tinker_core.errors.ConfigError` naming each
  changed field (fork the run to change it: ``opentinker fork RUN@STEP KEY=VALUE``);
* a **fork**'s first start (``fork=True``: the checkpoint copied from its parent) accepts
  overrides, but keeps what the checkpoint's weights and state need: the model, the LoRA shape and
  the algorithm of every stage begun; a fork of a finished run raises the last stage's steps or
  adds stages.

Torch-free: the fork command checks a fork with it before it copies anything.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_algos.run.plan import Progress
from tinker_core.config import JobConfig, parse_config
from tinker_core.errors import ConfigError

JOB_RECORD = "job.json"
"""A run checkpoint's record of the config that wrote it (``checkpoints/step-N/job.json``)."""
HARMLESS = ("logging", "checkpoint", "resources", "priority")
"""Top-level sections a re-run of a finished run may change: they change no trained number."""
IDENTITY = ("model.name", "model.revision", "model.tokenizer", "lora.rank", "lora.target_modules")
"""What a fork cannot change: the checkpoint's weights are of that model and that adapter shape."""


def config_hash(config: JobConfig | Mapping[str, Any]) -> str:
    """A short SHA-256 of the config (canonical JSON of its validated form): two runs with equal
    hashes were given the same settings."""
    data = config.model_dump(mode="json") if isinstance(config, JobConfig) else dict(config)
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def job_record(job: JobConfig, stage_steps: list[int] | None) -> dict[str, Any]:
    """What a checkpoint's ``job.json`` holds: the config, its hash, the steps each finished stage ran."""
    return {"config": job.model_dump(mode="json"), "config_hash": config_hash(job), "stage_steps": stage_steps}


@dataclass(frozen=True)
class Origin:
    """The config a checkpoint was written with, and the steps each stage before it ran (None:
    not recorded, a checkpoint from an older version whose count cannot be told)."""

    config: JobConfig
    stage_steps: list[int] | None


def read_origin(ckpt: Path, fallback: Path) -> Origin | None:
    """The origin of checkpoint ``ckpt``: its ``job.json``, or -- a checkpoint from before it had
    one -- the config file ``fallback`` (the run's ``config.json``); None when neither is readable."""
    try:
        if (ckpt / JOB_RECORD).is_file():
            data = json.loads((ckpt / JOB_RECORD).read_text(encoding="utf-8"))
            steps = data.get("stage_steps")
            return Origin(parse_config(data["config"], check_plugins=False), list(steps) if steps is not None else None)
        if fallback.is_file():
            return Origin(parse_config(json.loads(fallback.read_text(encoding="utf-8")), check_plugins=False), None)
    except (OSError, ValueError, KeyError, TypeError, ConfigError):
        return None
    return None


@dataclass(frozen=True)
class Continuation:
    """Where the run goes on: ``progress`` (None: it is finished and nothing changed, its stored
    result stands), the steps each stage before it ran, and a line saying so when it extends."""

    progress: Progress | None
    stage_steps: list[int] | None
    note: str | None = None


def continuation(origin: Origin | None, job: JobConfig, progress: Progress, *, fork: bool = False) -> Continuation:
    """Where a run with config ``job`` continues from a checkpoint at ``progress`` written with
    ``origin`` (see the module docstring); a :class:`ConfigError` naming each field that forbids it."""
    if origin is None:  # nothing to compare with: resume as before, a finished run stands
        done = progress.stage_index >= len(job.resolved_stages())
        return Continuation(None if done else progress, None)
    old_stages = origin.config.resolved_stages()
    stage_steps = _stage_steps(origin, progress)
    finished = progress.stage_index >= len(old_stages)
    if fork:
        _check_fork(origin.config, job, progress)
    if not finished:
        return Continuation(progress, stage_steps)
    steps_path = _last_steps_path(origin.config)
    if not fork:
        changes = [c for c in changed(origin.config.model_dump(mode="json"), job.model_dump(mode="json"))
                   if c[0].split(".")[0] not in HARMLESS]
        others = [c for c in changes if c[0] != steps_path]
        if others:
            raise ConfigError([
                f"{path}: {old!r} -> {new!r}: this run is finished, and its only setting that can change is {steps_path} "
                f"(raised, it extends the run); fork it to change {path}: opentinker fork RUN_DIR {path}=..."
                for path, old, new in others
            ])
        if not changes:
            return Continuation(None, stage_steps)
    return _extend(origin, job, progress, stage_steps, steps_path, fork=fork)


def _extend(origin: Origin, job: JobConfig, progress: Progress, stage_steps: list[int] | None, steps_path: str, *, fork: bool) -> Continuation:
    """A finished run going on: into a stage a fork added, or further in its last stage."""
    old_stages, new_stages = origin.config.resolved_stages(), job.resolved_stages()
    n = len(old_stages)
    if fork and len(new_stages) > n:
        return Continuation(progress, stage_steps)
    if len(new_stages) < n:
        raise ConfigError([f"stages: the run ran {n} stages; going on from its end needs them all ({len(new_stages)} given)"])
    if stage_steps is None or len(stage_steps) != n:
        raise ConfigError([f"{steps_path}: this run's checkpoint does not record how many steps its last stage ran "
                           "(written by an older version), so it cannot be extended; start a new run"])
    done, planned = stage_steps[-1], old_stages[-1].algorithm.steps
    wanted = new_stages[-1].algorithm.steps
    if done < planned and not fork:
        raise ConfigError([f"{steps_path}: the last stage '{old_stages[-1].name}' ended at its stop_at after {done} of "
                           f"{planned} steps; more steps do not continue it: fork it with another stop_at"])
    if wanted <= done:
        raise ConfigError([f"{steps_path}: {wanted} is not more than the {done} steps the last stage ran, so there is "
                           "nothing to run; raise it (or add a stage to a fork), or fork an earlier step: opentinker fork RUN@STEP"])
    note = f"extending stage {n - 1} '{new_stages[-1].name}' from {done} to {wanted} steps from its last checkpoint"
    return Continuation(Progress(n - 1, done, progress.global_step), stage_steps[:-1], note)


def _check_fork(old: JobConfig, new: JobConfig, progress: Progress) -> None:
    """What a fork cannot change: the weights' model and adapter shape, the algorithm of each
    stage begun; the stage it starts in must have steps left."""
    problems = []
    old_data, new_data = old.model_dump(mode="json"), new.model_dump(mode="json")
    for path in IDENTITY:
        a, b = _get(old_data, path), _get(new_data, path)
        if a != b:
            problems.append(f"{path}: {a!r} -> {b!r}: a fork goes on from the parent's weights, so it keeps {path}")
    if (old.lora is None) != (new.lora is None):
        problems.append("lora: a fork keeps the parent's kind of training (LoRA adapter or full fine-tuning)")
    old_stages, new_stages = old.resolved_stages(), new.resolved_stages()
    begun = min(progress.stage_index + 1, len(old_stages))
    for i in range(begun):
        if i >= len(new_stages):
            problems.append(f"stages: the parent began {begun} stage(s) by this checkpoint; a fork keeps them ({len(new_stages)} given)")
            break
        if old_stages[i].algorithm.name != new_stages[i].algorithm.name:
            problems.append(f"{_stage_path(new, i)}algorithm.name: {old_stages[i].algorithm.name!r} -> "
                            f"{new_stages[i].algorithm.name!r}: stage {i} had begun; a fork keeps its algorithm")
    si = progress.stage_index
    if not problems and si < len(old_stages) and new_stages[si].algorithm.steps <= progress.stage_step:
        problems.append(f"{_stage_path(new, si)}algorithm.steps: {new_stages[si].algorithm.steps} is not more than the "
                        f"{progress.stage_step} steps of stage {si} this checkpoint is after")
    if problems:
        raise ConfigError(problems)


def _stage_steps(origin: Origin, progress: Progress) -> list[int] | None:
    """The steps each stage before ``progress`` ran: recorded, or (an older checkpoint) the
    configured counts when they add up to the steps done."""
    if origin.stage_steps is not None and len(origin.stage_steps) == progress.stage_index:
        return list(origin.stage_steps)
    planned = [s.algorithm.steps for s in origin.config.resolved_stages()[: progress.stage_index]]
    return planned if sum(planned) + progress.stage_step == progress.global_step else None


def _stage_path(job: JobConfig, i: int) -> str:
    """Where stage ``i``'s sections are in ``job``: ``stages.i.`` (a job with stages) or nothing."""
    return f"stages.{i}." if job.stages else ""


def _last_steps_path(job: JobConfig) -> str:
    return f"stages.{len(job.stages) - 1}.algorithm.steps" if job.stages else "algorithm.steps"


def changed(old: Any, new: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """``(dotted path, old, new)`` of every value that differs between two JSON-like trees (a
    list of another length, or a key only one side has, is one change at its path)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(old.keys() | new.keys()):
            yield from changed(old.get(key), new.get(key), f"{path}.{key}" if path else key)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from changed(a, b, f"{path}.{i}")
    elif old != new:
        yield path, old, new


def _get(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def stored_result(run_dir: Path, ckpt: Path, step: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A finished run's ``result.json`` as it is, and its metrics rows. A result.json that is
    missing, unreadable or not of this finish (killed after its last checkpoint) is rebuilt from
    metrics.jsonl -- the last row's metrics, the last evaluation -- and written."""
    from tinker_core.run_files import read_metrics

    rows = read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").is_file() else []
    try:
        data = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("status") == "completed" and data.get("step") == step:
            return data, rows
    except (OSError, ValueError):
        pass
    evals = [r for r in rows if any(k.startswith("eval/") for k in r)]
    plot = run_dir / "curve.png"
    data = {
        "status": "completed", "step": step,
        "metrics": {k: v for k, v in rows[-1].items() if k not in ("step", "stage")} if rows else {},
        "run_dir": str(run_dir), "checkpoint": str(ckpt), "plot": str(plot) if plot.is_file() else None,
        "eval": {k: v for k, v in evals[-1].items() if k.startswith("eval/")} if evals else {},
    }
    (run_dir / "result.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    return data, rows
