"""From each job's logged metrics to the numbers ``opentinker compare`` reports (numpy; the statistics in stats).

A job's *eval curve* is its held-out metric at the eval points of its last stage: the steps of
``metrics.jsonl`` after the earlier stages' steps (read from the job config, so metrics that
came over the wire without stage names split the same way) that hold the metric. The metric is
``eval/accuracy`` when every job logged it, else ``eval/reward_mean``. Per job:

* ``warm_start``: the level the last stage starts from: the metric's last value logged at or
  before the stage's start (the earlier stage's final evaluation, e.g. the SFT warm start's);
  without one (a single-stage job, or a warm start given as ``model.name``), the curve's first
  point, and ``warm_start_from`` says which (``before the stage`` / ``first eval of the stage``);
* ``final``: the curve's last value; ``best``: its largest;
* ``gain``: ``final - warm_start``, what the last stage added;
* ``auc``: :func:`~tinker_algos.compare.stats.curve_auc` of the curve;
* ``steps_to_+10`` / ``steps_to_+20``: :func:`~tinker_algos.compare.stats.steps_to_gain`: steps
  into the last stage until the metric first stands 0.10 / 0.20 (10 / 20 points of accuracy)
  above the warm start's level; None: not reached;
* ``dip``: :func:`~tinker_algos.compare.stats.largest_dip`: how far the curve fell below the warm
  start's level at its lowest (0: never), and ``dip_step`` where;
* ``steps_per_s``: logged training steps over the seconds they took (``time/step_s``, which
  leaves evaluation out).

Per variant, each number is :func:`~tinker_algos.compare.stats.describe`\\ d over its seeds, and
the mean curve is the mean over seeds at each eval step (with the min and max); and
:func:`differences` gives each variant's difference from the baseline variant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tinker_algos.compare.stats import (
    compare_to_baseline,
    curve_auc,
    describe,
    largest_dip,
    steps_to_gain,
)
from tinker_core.config import JobConfig

EVAL_KEYS = ("eval/accuracy", "eval/reward_mean")
GAINS = (("steps_to_+10", 0.10), ("steps_to_+20", 0.20))
METRICS = ("warm_start", "final", "gain", "best", "auc", "steps_to_+10", "steps_to_+20", "dip", "steps_per_s")
"""The per-job numbers, in the report's order."""
DIFFERENCE_METRICS = ("final", "gain", "best", "auc")
"""The numbers whose difference from the baseline variant the report gives with an interval."""


def last_stage_start(config: JobConfig, rows: Sequence[Mapping[str, Any]] = ()) -> int:
    """The global steps done before the last stage starts (its steps are the ones after): from the
    job's metrics ``rows``, the last step an earlier stage logged (a stage that met its
    ``stop_at`` ran fewer steps than configured); without such rows, the earlier stages'
    configured steps."""
    if rows and "stage" in rows[-1]:
        last = rows[-1]["stage"]
        earlier = [int(r["step"]) for r in rows if "stage" in r and r["stage"] != last]
        if earlier:
            return max(earlier)
    return sum(s.algorithm.steps for s in config.resolved_stages()[:-1])


def eval_key(rows_by_job: list[list[dict[str, Any]]]) -> str:
    """``eval/accuracy`` when every job logged it, else ``eval/reward_mean`` (if every job did)."""
    for key in EVAL_KEYS:
        if rows_by_job and all(any(key in r for r in rows) for rows in rows_by_job):
            return key
    raise ValueError("the jobs logged no held-out metric (eval/accuracy or eval/reward_mean) to compare")


def eval_curve(rows: list[dict[str, Any]], key: str, start: int) -> tuple[list[int], list[float]]:
    """``(steps_E, values_E)``: the ``key`` values of rows after step ``start``, by step."""
    points = sorted((int(r["step"]), float(r[key])) for r in rows if int(r["step"]) > start and key in r)
    return [s for s, _ in points], [v for _, v in points]


def warm_start_level(rows: list[dict[str, Any]], key: str, start: int) -> float | None:
    """The ``key`` value of the last row at or before step ``start`` that holds it (None: none)."""
    before = sorted((int(r["step"]), float(r[key])) for r in rows if int(r["step"]) <= start and key in r)
    return before[-1][1] if before else None


def curve_numbers(steps_E: list[int], values_E: list[float], warm: float | None) -> dict[str, Any]:
    """The numbers of one eval curve (``steps_E``: steps into the last stage) given the warm
    start's level (None: unknown, the first point stands for it)."""
    level = values_E[0] if warm is None else warm
    dip, dip_step = largest_dip(steps_E, values_E, level)
    out: dict[str, Any] = {
        "warm_start": level,
        "warm_start_from": "first eval of the stage" if warm is None else "before the stage",
        "final": values_E[-1],
        "gain": values_E[-1] - level,
        "best": max(values_E),
        "auc": curve_auc(steps_E, values_E),
        "dip": dip,
        "dip_step": dip_step,
    }
    for name, gain in GAINS:
        out[name] = steps_to_gain(steps_E, values_E, gain, level=level, origin=0)
    return out


def job_numbers(rows: list[dict[str, Any]], key: str, start: int, *, warm: float | None = None) -> dict[str, Any]:
    """The numbers of one job (see the module docstring), and its curve; ``warm``: the warm
    start's level when the caller knows it (a warm start trained in another run), else it is read
    from the rows."""
    steps_E, values_E = eval_curve(rows, key, start)
    if not steps_E:
        raise ValueError(f"no {key} point in the last stage (after step {start})")
    # steps into the last stage: seeds whose warm start stopped at different steps share an axis
    out = curve_numbers([s - start for s in steps_E], values_E, warm if warm is not None else warm_start_level(rows, key, start))
    times = [float(r["time/step_s"]) for r in rows if "time/step_s" in r]
    out["steps_per_s"] = len(times) / sum(times) if times and sum(times) > 0 else None
    out["curve"] = {"steps": [s - start for s in steps_E], "values": values_E}
    return out


def variant_numbers(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each metric described over the variant's jobs (:func:`job_numbers` results), and the mean
    curve over the eval steps every job has."""
    out: dict[str, Any] = {m: describe([j[m] for j in jobs]) for m in METRICS}
    common = sorted(set.intersection(*(set(j["curve"]["steps"]) for j in jobs))) if jobs else []
    values_J_E = np.array([[dict(zip(j["curve"]["steps"], j["curve"]["values"], strict=True))[s] for s in common] for j in jobs])
    out["curve"] = {
        "steps": common,
        "mean": values_J_E.mean(axis=0).tolist() if common else [],
        "min": values_J_E.min(axis=0).tolist() if common else [],
        "max": values_J_E.max(axis=0).tolist() if common else [],
    }
    return out


def differences(jobs: list[dict[str, Any]], baseline: str) -> dict[str, dict[str, Any]]:
    """``{variant: {metric: compare_to_baseline(...)}}`` for every variant but ``baseline`` and
    each of :data:`DIFFERENCE_METRICS` (jobs: ``variant``, ``seed`` and the numbers)."""
    by_variant: dict[str, dict[int, dict[str, Any]]] = {}
    for j in jobs:
        by_variant.setdefault(j["variant"], {})[int(j["seed"])] = j
    if baseline not in by_variant:
        raise ValueError(f"baseline variant {baseline!r} has no jobs; the variants are {', '.join(by_variant)}")
    base = by_variant[baseline]
    return {
        name: {m: compare_to_baseline({s: j[m] for s, j in seeds.items()}, {s: j[m] for s, j in base.items()}) for m in DIFFERENCE_METRICS}
        for name, seeds in by_variant.items() if name != baseline
    }
