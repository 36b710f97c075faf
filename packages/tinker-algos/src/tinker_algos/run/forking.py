"""Fork a run: a new run from one of its checkpoints, with overrides, that records its parent.

``fork("runs/arithmetic@200", ["stages.2.optimizer.lr=1e-4"])`` (``opentinker fork`` on the command
line) makes a new run directory (default: ``runs/arithmetic-fork-200`` beside the parent) holding

* ``checkpoints/step-000200/``: the parent's checkpoint (weights, optimizer state, RNG, the data
  position and the algorithm's state), hard-linked where the file system allows, else copied;
* ``metrics.jsonl`` (and ``rollouts.jsonl``): the parent's records up to that step;
* ``live.jsonl``: the parent's live setting changes up to that step (:mod:`tinker_algos.run.live`),
  but those of a setting an override sets;
* ``lineage.json`` (:mod:`tinker_algos.run.lineage`): the parent's run dir, step, checkpoint and config
  hash, the overrides, and the fork's own config hash;

then trains it from there with the parent's config and the overrides (``key.path=value``, as
``opentinker train``'s). The checks of :mod:`tinker_algos.run.continuation` come first, before anything
is copied: a fork keeps the model, the adapter shape and the algorithm of every stage begun.
Without overrides, the fork's metrics after the step are exactly the parent's. Forking a run dir
whose fork already exists (same parent, step and overrides) resumes that fork.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tinker_algos.records.run_dir import make_run_dir
from tinker_algos.run.continuation import config_hash, continuation, read_origin
from tinker_algos.run.lineage import LINEAGE, read_lineage
from tinker_algos.run.live import LIVE_LOG, read_live_log
from tinker_algos.run.plan import Progress
from tinker_core.config import JobConfig, apply_overrides, parse_config
from tinker_core.errors import OpenTinkerError
from tinker_core.run_files import keep_lines

if TYPE_CHECKING:
    from tinker_algos.run.job import TrainResult


class ForkError(OpenTinkerError, ValueError):
    """A fork that cannot be made: no such run or checkpoint, or a run dir already taken."""


def parse_run_spec(spec: str | Path) -> tuple[Path, int | None]:
    """``"runs/x@200"`` -> ``(Path("runs/x"), 200)``; ``"runs/x"`` -> ``(Path("runs/x"), None)``."""
    text = str(spec)
    head, sep, tail = text.rpartition("@")
    if sep and tail.isdigit() and head:
        return Path(head), int(tail)
    return Path(text), None


def fork(
    run: str | Path,
    overrides: Sequence[str] = (),
    *,
    step: int | None = None,
    run_dir: str | Path | None = None,
    callbacks: object = None,
) -> TrainResult:
    """Fork run ``run`` (a run dir, or ``RUN@STEP``) at checkpoint ``step`` (default: its newest)
    with ``overrides`` into ``run_dir`` and train the fork; returns its result (see the module docstring)."""
    from tinker_algos.run.job import train

    job, target = prepare_fork(run, overrides, step=step, run_dir=run_dir)
    return train(job, run_dir=target, callbacks=callbacks)


def prepare_fork(
    run: str | Path, overrides: Sequence[str] = (), *, step: int | None = None, run_dir: str | Path | None = None
) -> tuple[JobConfig, Path]:
    """Check the fork and make its run directory; ``(config, run dir)`` to train."""
    parent, spec_step = parse_run_spec(run)
    step = step if step is not None else spec_step
    if not (parent / "checkpoints").is_dir():
        raise ForkError(f"{parent} is not a run directory with checkpoints (it has no checkpoints/); nothing to fork")
    ckpt, progress = _checkpoint(parent, step)
    origin = read_origin(ckpt, parent / "config.json")
    if origin is None:
        raise ForkError(f"{ckpt}: neither its job.json nor {parent / 'config.json'} holds a readable config to fork")
    job = parse_config(apply_overrides(origin.config.model_dump(mode="json"), overrides), source=f"{parent} with overrides")
    continuation(origin, job, progress, fork=True)  # a ConfigError naming each field a fork cannot change
    record = {
        "parent": {"run_dir": str(parent.resolve()), "step": progress.global_step, "checkpoint": str(ckpt.resolve()),
                   "config_hash": config_hash(origin.config)},
        "overrides": list(overrides),
        "config_hash": config_hash(job),
    }
    target = _target(parent, progress.global_step, record, run_dir)
    if read_lineage(target) is None:
        _populate(target, parent, ckpt, progress, overrides)
        (target / LINEAGE).write_text(json.dumps({**record, "created_unix": time.time()}, indent=1) + "\n", encoding="utf-8")
    return job, target


def _checkpoint(parent: Path, step: int | None) -> tuple[Path, Progress]:
    """The parent's checkpoint at ``step`` (checked against its manifest), or its newest intact one."""
    from tinker_algos.run.resume import newest_intact, run_checkpoints, verified_progress
    from tinker_algos.training.checkpoint import CheckpointError

    if step is None:
        found = newest_intact(parent, lambda line: None)
        if found is None:
            raise ForkError(f"{parent} has no checkpoint to fork")
        return found
    ckpt = parent / "checkpoints" / f"step-{step:06d}"
    if not ckpt.is_dir():
        have = ", ".join(str(int(p.name[5:])) for p in run_checkpoints(parent)) or "none"
        raise ForkError(f"{parent} has no checkpoint at step {step} (it has: {have}); "
                        "checkpoint.keep_every keeps a sparse history to fork from")
    try:
        return ckpt, verified_progress(ckpt)[0]
    except CheckpointError as e:
        raise ForkError(f"checkpoint {ckpt} is damaged: {e}") from e


def _target(parent: Path, step: int, record: dict[str, object], run_dir: str | Path | None) -> Path:
    """The fork's run dir: ``run_dir``, or ``PARENT-fork-STEP`` beside the parent (``-2``, ``-3`` ... when
    taken). An existing dir is used only when it is this very fork (same parent, step and overrides)."""
    candidates = [Path(run_dir)] if run_dir is not None else [
        parent.parent / f"{parent.name}-fork-{step}{'' if i == 1 else f'-{i}'}" for i in range(1, 1000)
    ]
    for target in candidates:
        if not target.exists() or not any(target.iterdir()):
            return target
        lineage = read_lineage(target)
        if lineage is not None and {k: lineage.get(k) for k in ("parent", "overrides")} == {
            "parent": {**lineage["parent"], **record["parent"]}, "overrides": record["overrides"]}:  # type: ignore[dict-item]
            return target  # this fork already: it resumes
    raise ForkError(f"run dir {candidates[-1]} already holds another run; choose another --run-dir")


def _populate(target: Path, parent: Path, ckpt: Path, progress: Progress, overrides: Sequence[str]) -> None:
    """The parent's checkpoint, config and records up to its step, in the new run dir, and the
    live setting changes in effect at that step (but those the overrides set anew)."""
    make_run_dir(target)
    shutil.copytree(ckpt, target / "checkpoints" / ckpt.name, copy_function=_link_or_copy, dirs_exist_ok=True)
    if (parent / "config.json").is_file():
        shutil.copy2(parent / "config.json", target / "config.json")
    if (parent / "metrics.jsonl").is_file():
        _copy_rows(parent / "metrics.jsonl", target / "metrics.jsonl", progress.global_step)
    overridden = {text.split("=", 1)[0].strip() for text in overrides}
    live = [(step, text) for step, text in read_live_log(parent / LIVE_LOG)
            if step <= progress.global_step and text.split("=", 1)[0] not in overridden]
    if live:
        (target / LIVE_LOG).write_text("".join(json.dumps({"step": s, "set": t}) + "\n" for s, t in live), encoding="utf-8")
    if (parent / "rollouts.jsonl").is_file():  # the resumed run keeps the records up to its step
        shutil.copy2(parent / "rollouts.jsonl", target / "rollouts.jsonl")


def _link_or_copy(src: str, dst: str) -> str:
    """A hard link (checkpoint files are never changed in place, only replaced), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _copy_rows(src: Path, dst: Path, step: int) -> None:
    """The JSON lines of ``src`` whose ``step`` is at most ``step`` (a cut line ends the copy)."""
    keep_lines(src, lambda row: isinstance(row.get("step"), int | float) and row["step"] <= step, dst, stop_at_bad=True)
