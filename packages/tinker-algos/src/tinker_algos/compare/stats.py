"""The report math of ``opentinker compare``: pure numpy functions, no torch.

* :func:`bootstrap_ci`: a percentile bootstrap confidence interval of the mean over seeds;
* :func:`curve_auc`: the area under an eval curve (trapezoid), divided by the step span it covers;
* :func:`steps_to_gain`: steps from a curve's first point until it first gains ``gain`` over it;
* :func:`describe`: mean, interval, min and max of one number over seeds.

Names carry their dimension: ``values_S`` (one per seed), ``steps_E`` / ``values_E`` (one per
eval point).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95


def bootstrap_ci(
    values_S: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of ``values_S``: ``resamples`` draws of
    ``len(values_S)`` values with replacement (``numpy.random.default_rng(seed)``), the mean of
    each, and their ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles (numpy's
    default linear interpolation). One value gives ``(v, v)``; none is a ValueError."""
    x_S = np.asarray(values_S, dtype=np.float64)
    if x_S.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if x_S.size == 1:
        return float(x_S[0]), float(x_S[0])
    rng = np.random.default_rng(seed)
    idx_R_S = rng.integers(0, x_S.size, size=(resamples, x_S.size))
    means_R = x_S[idx_R_S].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means_R, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def curve_auc(steps_E: Sequence[float], values_E: Sequence[float]) -> float:
    """The trapezoid area under the curve ``(steps_E, values_E)`` divided by its step span
    ``steps_E[-1] - steps_E[0]``: the curve's mean height, on the metric's own scale. One point
    gives its value; steps must increase."""
    s_E = np.asarray(steps_E, dtype=np.float64)
    v_E = np.asarray(values_E, dtype=np.float64)
    if s_E.size == 0 or s_E.shape != v_E.shape:
        raise ValueError("curve_auc needs as many values as steps, at least one")
    if s_E.size == 1:
        return float(v_E[0])
    if np.any(np.diff(s_E) <= 0):
        raise ValueError("curve_auc needs increasing steps")
    area = float(np.sum((s_E[1:] - s_E[:-1]) * (v_E[1:] + v_E[:-1]) / 2.0))
    return area / float(s_E[-1] - s_E[0])


def steps_to_gain(steps_E: Sequence[float], values_E: Sequence[float], gain: float) -> float | None:
    """Steps from the curve's first point to the first point whose value is at least
    ``values_E[0] + gain``; None when no point reaches it ("not reached")."""
    if len(steps_E) == 0 or len(steps_E) != len(values_E):
        raise ValueError("steps_to_gain needs as many values as steps, at least one")
    target = values_E[0] + gain
    for s, v in zip(steps_E, values_E, strict=True):
        if v >= target - 1e-12:  # 0.1 + 0.2 must reach 0.3
            return float(s - steps_E[0])
    return None


def describe(values_S: Sequence[float | None]) -> dict[str, float | int | None]:
    """``mean``, ``ci_low``, ``ci_high`` (:func:`bootstrap_ci`), ``min``, ``max`` over the seeds
    whose value is not None, and ``n`` (how many); all None when no seed has one."""
    present = [float(v) for v in values_S if v is not None]
    if not present:
        return {"mean": None, "ci_low": None, "ci_high": None, "min": None, "max": None, "n": 0}
    lo, hi = bootstrap_ci(present)
    return {"mean": float(np.mean(present)), "ci_low": lo, "ci_high": hi, "min": min(present), "max": max(present), "n": len(present)}
