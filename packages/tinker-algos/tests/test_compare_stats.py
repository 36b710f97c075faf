"""The report math of ``opentinker compare`` (tinker_algos.compare.stats, .summary) against
values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_algos.compare.stats import bootstrap_ci, curve_auc, describe, steps_to_gain
from tinker_algos.compare.summary import (
    eval_curve,
    eval_key,
    job_numbers,
    last_stage_start,
    variant_numbers,
)
from tinker_core.config import JobConfig


def test_bootstrap_of_identical_values_is_a_point():
    assert bootstrap_ci([0.4, 0.4, 0.4]) == (pytest.approx(0.4), pytest.approx(0.4))
    assert bootstrap_ci([0.7]) == (0.7, 0.7)
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_bootstrap_of_one_success_in_four():  # oracles.md: compare reports
    # a resample of [0, 0, 0, 1] has mean k/4 with k ~ Binomial(4, 1/4):
    # P(k = 0) = 81/256 = 0.32 > 2.5%, so the low end is 0;
    # P(k <= 2) = 243/256 = 0.949 < 97.5% < P(k <= 3) = 255/256, so the high end is 3/4.
    assert bootstrap_ci([0, 0, 0, 1]) == (0.0, 0.75)
    # two values: means 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4 -> the interval is [0, 1]
    assert bootstrap_ci([0.0, 1.0]) == (0.0, 1.0)


def test_bootstrap_is_reproducible_and_is_the_documented_resampling():
    values = [0.1, 0.5, 0.2, 0.9, 0.3]
    assert bootstrap_ci(values) == bootstrap_ci(values)
    lo, hi = bootstrap_ci(values)
    assert 0.1 <= lo < np.mean(values) < hi <= 0.9
    # the definition: 10,000 resamples drawn by default_rng(0), 2.5% and 97.5% quantiles of their means
    rng = np.random.default_rng(0)
    means = np.asarray(values)[rng.integers(0, 5, size=(10_000, 5))].mean(axis=1)
    assert (lo, hi) == tuple(np.quantile(means, [0.025, 0.975]))


def test_curve_area_is_the_trapezoid_over_the_step_span():  # oracles.md: compare reports
    # steps 0, 10, 20 with values 0, 1, 1: area 10 * 0.5 + 10 * 1 = 15 over a span of 20
    assert curve_auc([0, 10, 20], [0.0, 1.0, 1.0]) == pytest.approx(0.75)
    assert curve_auc([5, 10], [0.2, 0.4]) == pytest.approx(0.3)
    # uneven spacing: (2 * (0 + 0.6) / 2 + 8 * (0.6 + 0.2) / 2) / 10 = (0.6 + 3.2) / 10
    assert curve_auc([10, 12, 20], [0.0, 0.6, 0.2]) == pytest.approx(0.38)
    assert curve_auc([7], [0.25]) == 0.25
    with pytest.raises(ValueError):
        curve_auc([2, 1], [0.0, 1.0])


def test_steps_to_gain_counts_from_the_first_point():  # oracles.md: compare reports
    steps, values = [10, 20, 30, 40], [0.1, 0.15, 0.2, 0.35]
    assert steps_to_gain(steps, values, 0.10) == 20.0  # 0.2 at step 30 is the first >= 0.1 + 0.1
    assert steps_to_gain(steps, values, 0.20) == 30.0  # 0.35 at step 40
    assert steps_to_gain(steps, values, 0.30) is None  # never 0.4
    assert steps_to_gain([0, 5], [0.5, 0.4], 0.1) is None  # falling


def test_describe_leaves_out_the_seeds_that_never_got_there():
    d = describe([None, 20.0, 40.0])
    assert (d["mean"], d["min"], d["max"], d["n"]) == (30.0, 20.0, 40.0, 2)
    assert describe([None, None]) == {"mean": None, "ci_low": None, "ci_high": None, "min": None, "max": None, "n": 0}


def rows(values_by_step, *, sft_steps=2, step_s=0.5):
    """metrics.jsonl rows: an SFT stage with an eval at its end, then the given eval points."""
    out = [{"step": s, "stage": "sft", "time/step_s": step_s} for s in range(1, sft_steps + 1)]
    out[-1]["eval/accuracy"] = 0.9  # the SFT stage's eval: not part of the last stage's curve
    for s, v in values_by_step.items():
        out.append({"step": s, "stage": "grpo", "time/step_s": step_s, "eval/accuracy": v})
    return out


def test_job_numbers_read_the_last_stage_only():
    r = rows({3: 0.1, 4: 0.15, 5: 0.2, 6: 0.35}) + [{"step": 7, "stage": "grpo", "time/step_s": 1.5}]
    assert eval_curve(r, "eval/accuracy", 2) == ([3, 4, 5, 6], [0.1, 0.15, 0.2, 0.35])
    n = job_numbers(r, "eval/accuracy", 2)
    assert n["final"] == 0.35 and n["best"] == 0.35
    # (1 * 0.125 + 1 * 0.175 + 1 * 0.275) / 3
    assert n["auc"] == pytest.approx(0.575 / 3)
    assert n["steps_to_+10"] == 2.0 and n["steps_to_+20"] == 3.0
    assert n["steps_per_s"] == pytest.approx(7 / (6 * 0.5 + 1.5))


def test_eval_key_falls_back_to_reward_mean():
    assert eval_key([rows({3: 0.1})]) == "eval/accuracy"
    assert eval_key([[{"step": 1, "eval/reward_mean": 0.2}]]) == "eval/reward_mean"
    with pytest.raises(ValueError, match="no held-out metric"):
        eval_key([[{"step": 1, "env/reward_mean": 0.2}]])


def test_variant_numbers_average_the_curves_over_seeds():
    a = job_numbers(rows({3: 0.0, 4: 0.15}), "eval/accuracy", 2)
    b = job_numbers(rows({3: 0.2, 4: 0.6}), "eval/accuracy", 2)
    v = variant_numbers([a, b])
    assert v["curve"] == {"steps": [1, 2], "mean": pytest.approx([0.1, 0.375]), "min": [0.0, 0.15], "max": [0.2, 0.6]}
    assert v["final"]["mean"] == pytest.approx(0.375) and (v["final"]["min"], v["final"]["max"]) == (0.15, 0.6)
    assert v["final"]["ci_low"] == 0.15 and v["final"]["ci_high"] == 0.6  # two values: [min, max]
    assert v["steps_to_+20"]["n"] == 1 and v["steps_to_+20"]["mean"] == 1.0  # only b gains 0.2 (at step 4)


def test_the_last_stage_starts_where_an_earlier_stage_stopped():
    """An SFT stage configured for 10 steps that met its stop_at after 3: the last stage's curve
    starts after step 3, not after the 10 configured (a report then had no point at all)."""
    config = JobConfig.model_validate({
        "model": {"name": "tiny"}, "env": {"id": "echo/echo-v0"},
        "stages": [{"name": "sft", "algorithm": {"name": "sft", "steps": 10, "eval_every": 1, "stop_at": {"eval/accuracy": 0.3}}},
                   {"name": "grpo", "algorithm": {"name": "grpo", "steps": 4}}],
    })
    r = rows({4: 0.4, 5: 0.5, 6: 0.6}, sft_steps=3)
    assert last_stage_start(config) == 10
    assert last_stage_start(config, r) == 3
    assert job_numbers(r, "eval/accuracy", last_stage_start(config, r))["curve"]["steps"] == [1, 2, 3]  # steps into the stage
