"""The report math of ``opentinker compare``: numpy and scipy, no torch.

Intervals that hold at the number of seeds given (rliable's point: few runs need intervals made
for few runs, and a comparison is a difference with its interval):

* :func:`t_interval`: Student's t interval of the mean over seeds (``n - 1`` degrees of freedom);
* :func:`difference`: the mean difference ``variant - baseline`` with its t interval, **paired by
  seed** when both have the same seeds (a t interval of the per-seed differences), else
  **Welch's** unequal-variance interval (Welch-Satterthwaite degrees of freedom);
* :func:`iqm` / :func:`iqm_interval`: the interquartile mean (the mean of the middle 50%,
  ``scipy.stats.trim_mean(x, 0.25)``) and its percentile bootstrap interval, from
  :data:`MIN_SEEDS_ROBUST` seeds up;
* :func:`probability_of_improvement`: P(variant > baseline) + P(tie) / 2 over all pairs of their
  seeds (the Mann-Whitney U statistic over ``n * m``) and a percentile bootstrap interval that
  resamples each side on its own (rliable's stratified bootstrap), from :data:`MIN_SEEDS_ROBUST`
  seeds up;
* :func:`curve_auc`, :func:`steps_to_gain`, :func:`largest_dip`: per-curve numbers;
* :func:`describe`: mean, t interval, min, max (and IQM from 5 seeds) of one number over seeds.

Names carry their dimension: ``values_S`` (one per seed), ``steps_E`` / ``values_E`` (one per
eval point).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

CONFIDENCE = 0.95
MIN_SEEDS_TO_CONCLUDE = 3
"""Below this many seeds a difference is reported with the note that it cannot be concluded."""
MIN_SEEDS_ROBUST = 5
"""IQM and probability of improvement are reported from this many seeds per variant up."""
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
METHOD = (
    "mean over seeds with Student's t interval (n-1 degrees of freedom); differences from the baseline: "
    "paired t over the per-seed differences when both variants have the same seeds, else Welch's t; "
    f"IQM and probability of improvement from {MIN_SEEDS_ROBUST} seeds up, with percentile bootstrap intervals "
    f"({BOOTSTRAP_RESAMPLES:,} resamples, each variant resampled on its own, numpy rng seed {BOOTSTRAP_SEED})"
)


def _values(values_S: Sequence[float], what: str) -> np.ndarray:
    x_S = np.asarray(values_S, dtype=np.float64)
    if x_S.ndim != 1 or x_S.size == 0:
        raise ValueError(f"{what} needs at least one value")
    return x_S


def t_interval(values_S: Sequence[float], *, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """``mean -/+ t_{(1+confidence)/2, n-1} * sd / sqrt(n)`` (``sd`` with ``ddof=1``); None for
    one value (no spread to estimate); a point when every value is the same."""
    from scipy import stats

    x_S = _values(values_S, "t_interval")
    n = x_S.size
    if n < 2:
        return None
    mean = float(x_S.mean())
    half = float(stats.t.ppf((1.0 + confidence) / 2.0, n - 1)) * float(x_S.std(ddof=1)) / np.sqrt(n)
    return mean - half, mean + half


def difference(
    variant_S: Sequence[float],
    baseline_S: Sequence[float],
    *,
    paired: bool,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """``variant - baseline``: ``mean`` (the difference of the means), ``ci_low`` / ``ci_high``
    (None when it cannot be computed), ``df``, ``method`` (``paired t`` or ``Welch t``) and ``n``
    (per-seed pairs, or ``[n_variant, n_baseline]``). Paired: the t interval of the per-seed
    differences (same order, same length). Welch: ``sqrt(v_a / n_a + v_b / n_b)`` as the standard
    error and the Welch-Satterthwaite degrees of freedom."""
    from scipy import stats

    a_S = _values(variant_S, "difference")
    b_S = _values(baseline_S, "difference")
    q = (1.0 + confidence) / 2.0
    if paired:
        if a_S.shape != b_S.shape:
            raise ValueError("a paired difference needs one value per seed on both sides")
        d_S = a_S - b_S
        ci = t_interval(d_S, confidence=confidence)
        return {"mean": float(d_S.mean()), "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None,
                "df": d_S.size - 1 if ci else None, "method": "paired t", "n": int(d_S.size)}
    mean = float(a_S.mean() - b_S.mean())
    out: dict[str, Any] = {"mean": mean, "ci_low": None, "ci_high": None, "df": None, "method": "Welch t",
                           "n": [int(a_S.size), int(b_S.size)]}
    if a_S.size < 2 or b_S.size < 2:
        return out
    va, vb = a_S.var(ddof=1) / a_S.size, b_S.var(ddof=1) / b_S.size
    se = float(np.sqrt(va + vb))
    if se == 0.0:
        out.update(ci_low=mean, ci_high=mean)
        return out
    df = float((va + vb) ** 2 / (va**2 / (a_S.size - 1) + vb**2 / (b_S.size - 1)))
    half = float(stats.t.ppf(q, df)) * se
    out.update(ci_low=mean - half, ci_high=mean + half, df=df)
    return out


def iqm(values_S: Sequence[float]) -> float:
    """The interquartile mean: the mean of the values left after cutting 25% from each end
    (``scipy.stats.trim_mean(values, 0.25)``; rliable's IQM over runs of one task)."""
    from scipy import stats

    return float(stats.trim_mean(_values(values_S, "iqm"), 0.25))


def _bootstrap(data: tuple[np.ndarray, ...], statistic: Any, confidence: float) -> tuple[float, float]:
    from scipy import stats

    res = stats.bootstrap(data, statistic, n_resamples=BOOTSTRAP_RESAMPLES, confidence_level=confidence,
                          method="percentile", vectorized=False, paired=False,
                          rng=np.random.default_rng(BOOTSTRAP_SEED))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def iqm_interval(values_S: Sequence[float], *, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile bootstrap interval of :func:`iqm` (:data:`BOOTSTRAP_RESAMPLES` resamples of
    the seeds with replacement, ``numpy.random.default_rng(BOOTSTRAP_SEED)``)."""
    x_S = _values(values_S, "iqm_interval")
    return _bootstrap((x_S,), iqm, confidence)


def probability_of_improvement(variant_S: Sequence[float], baseline_S: Sequence[float]) -> float:
    """P(X > Y) + P(X = Y) / 2 for X a seed of the variant and Y one of the baseline, over all
    ``n * m`` pairs (rliable's probability of improvement on one task)."""
    a_S = _values(variant_S, "probability_of_improvement")
    b_S = _values(baseline_S, "probability_of_improvement")
    greater = (a_S[:, None] > b_S[None, :]).mean()
    ties = (a_S[:, None] == b_S[None, :]).mean()
    return float(greater + 0.5 * ties)


def probability_of_improvement_interval(
    variant_S: Sequence[float], baseline_S: Sequence[float], *, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """The percentile bootstrap interval of :func:`probability_of_improvement`, each side's seeds
    resampled on their own."""
    return _bootstrap((_values(variant_S, "poi"), _values(baseline_S, "poi")), probability_of_improvement, confidence)


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


def steps_to_gain(
    steps_E: Sequence[float], values_E: Sequence[float], gain: float, *, level: float | None = None, origin: float = 0.0
) -> float | None:
    """Steps from ``origin`` to the first point whose value is at least ``level + gain``
    (``level``: the warm start's value, the level the stage starts from; without one, the first
    point's value); None when no point reaches it ("not reached")."""
    if len(steps_E) == 0 or len(steps_E) != len(values_E):
        raise ValueError("steps_to_gain needs as many values as steps, at least one")
    target = (values_E[0] if level is None else level) + gain
    for s, v in zip(steps_E, values_E, strict=True):
        if v >= target - 1e-12:  # 0.1 + 0.2 must reach 0.3
            return float(s - origin)
    return None


def largest_dip(steps_E: Sequence[float], values_E: Sequence[float], level: float) -> tuple[float, float | None]:
    """How far the curve falls below ``level`` at its lowest (0 when it never does) and the step
    of that lowest point (None when it never falls below)."""
    if len(steps_E) == 0 or len(steps_E) != len(values_E):
        raise ValueError("largest_dip needs as many values as steps, at least one")
    i = int(np.argmin(values_E))
    dip = level - float(values_E[i])
    return (dip, float(steps_E[i])) if dip > 1e-12 else (0.0, None)


def describe(values_S: Sequence[float | None], *, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """``mean``, ``ci_low`` / ``ci_high`` (:func:`t_interval`; None with one seed), ``min``,
    ``max`` over the seeds whose value is not None, ``n`` (how many), and from
    :data:`MIN_SEEDS_ROBUST` seeds ``iqm`` with ``iqm_low`` / ``iqm_high``; all None when no seed
    has one."""
    present = [float(v) for v in values_S if v is not None]
    out: dict[str, Any] = {"mean": None, "ci_low": None, "ci_high": None, "min": None, "max": None, "n": len(present),
                           "iqm": None, "iqm_low": None, "iqm_high": None}
    if not present:
        return out
    ci = t_interval(present, confidence=confidence)
    out.update(mean=float(np.mean(present)), min=min(present), max=max(present))
    if ci is not None:
        out.update(ci_low=ci[0], ci_high=ci[1])
    if len(present) >= MIN_SEEDS_ROBUST:
        lo, hi = iqm_interval(present, confidence=confidence)
        out.update(iqm=iqm(present), iqm_low=lo, iqm_high=hi)
    return out


def compare_to_baseline(
    variant: dict[int, float | None], baseline: dict[int, float | None], *, confidence: float = CONFIDENCE
) -> dict[str, Any] | None:
    """The variant's difference from the baseline (``{seed: value}`` each, None: no value): paired
    by seed when both have values for the same seeds, else Welch; ``note`` says in plain words
    whether these seeds can conclude; probability of improvement from :data:`MIN_SEEDS_ROBUST`
    seeds a side. None when either side has no value."""
    a = {s: float(v) for s, v in variant.items() if v is not None}
    b = {s: float(v) for s, v in baseline.items() if v is not None}
    if not a or not b:
        return None
    paired = set(a) == set(b)
    seeds = sorted(a) if paired else None
    a_S = [a[s] for s in seeds] if seeds else list(a.values())
    b_S = [b[s] for s in seeds] if seeds else list(b.values())
    d = difference(a_S, b_S, paired=paired, confidence=confidence)
    n_min = min(len(a_S), len(b_S))
    if n_min < MIN_SEEDS_TO_CONCLUDE:
        d["note"] = f"too few seeds to conclude ({n_min} < {MIN_SEEDS_TO_CONCLUDE})"
    elif d["ci_low"] is None:
        d["note"] = "no interval: too few seeds to conclude"
    elif d["ci_low"] <= 0.0 <= d["ci_high"]:
        d["note"] = "the interval crosses 0: these seeds do not show a difference"
    else:
        d["note"] = "higher than the baseline" if d["ci_low"] > 0 else "lower than the baseline"
    d.update(poi=None, poi_low=None, poi_high=None)
    if n_min >= MIN_SEEDS_ROBUST:
        lo, hi = probability_of_improvement_interval(a_S, b_S, confidence=confidence)
        d.update(poi=probability_of_improvement(a_S, b_S), poi_low=lo, poi_high=hi)
    return d
