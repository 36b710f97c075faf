"""The report math of ``opentinker compare`` (tinker_algos.compare.stats, .summary) against
values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_algos.compare.stats import (
    compare_to_baseline,
    curve_auc,
    describe,
    difference,
    iqm,
    iqm_interval,
    largest_dip,
    probability_of_improvement,
    probability_of_improvement_interval,
    steps_to_gain,
    t_interval,
)
from tinker_algos.compare.summary import (
    eval_curve,
    eval_key,
    job_numbers,
    last_stage_start,
    variant_numbers,
)
from tinker_core.config import JobConfig


def test_t_interval_is_scipys_on_fixed_numbers():  # oracles.md: compare reports
    from scipy import stats

    # three seeds: mean 0.5, sd 0.1, t_{0.975, 2} = 4.302652729911275 -> 0.5 -/+ 4.3027 * 0.1 / sqrt(3)
    lo, hi = t_interval([0.4, 0.5, 0.6])
    assert (lo, hi) == (pytest.approx(0.5 - 4.302652729911275 * 0.1 / np.sqrt(3)), pytest.approx(0.5 + 4.302652729911275 * 0.1 / np.sqrt(3)))
    for values in ([0.378, 0.302, 0.340], [0.1, 0.5, 0.2, 0.9, 0.3], [0.764, 0.726, 0.654, 0.752, 0.756, 0.66]):
        ref = stats.ttest_1samp(values, 0.0).confidence_interval(0.95)
        assert t_interval(values) == (pytest.approx(ref.low, abs=1e-12), pytest.approx(ref.high, abs=1e-12))
    assert t_interval([0.4, 0.4, 0.4]) == (pytest.approx(0.4), pytest.approx(0.4))
    assert t_interval([0.7]) is None  # one seed: no spread to estimate
    with pytest.raises(ValueError):
        t_interval([])


def test_three_seeds_cover_more_than_their_min_max():
    """The percentile bootstrap of 3 values stayed inside [min, max]; the t interval at n=3 is
    wider than the range whenever the values are not all equal."""
    values = [0.3, 0.5, 0.4]
    lo, hi = t_interval(values)
    assert lo < min(values) and hi > max(values)


def test_differences_paired_and_welch_are_scipys():  # oracles.md: compare reports
    from scipy import stats

    a, b = [0.726, 0.532, 0.846], [0.378, 0.302, 0.340]
    d = difference(a, b, paired=True)
    ref = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert d["method"] == "paired t" and d["n"] == 3 and d["df"] == 2
    assert d["mean"] == pytest.approx(np.mean(a) - np.mean(b))
    assert (d["ci_low"], d["ci_high"]) == (pytest.approx(ref.low, abs=1e-12), pytest.approx(ref.high, abs=1e-12))
    w = difference(a, [0.378, 0.302, 0.340, 0.52], paired=False)
    ref = stats.ttest_ind(a, [0.378, 0.302, 0.340, 0.52], equal_var=False).confidence_interval(0.95)
    assert w["method"] == "Welch t" and w["n"] == [3, 4]
    assert (w["ci_low"], w["ci_high"]) == (pytest.approx(ref.low, abs=1e-12), pytest.approx(ref.high, abs=1e-12))
    # hand: Welch df for equal n and equal variances is 2(n-1)
    w = difference([1.0, 2.0, 3.0], [2.0, 3.0, 4.0], paired=False)
    assert w["df"] == pytest.approx(4.0) and w["mean"] == -1.0
    with pytest.raises(ValueError, match="one value per seed"):
        difference([1.0, 2.0], [1.0], paired=True)


def test_iqm_and_probability_of_improvement_by_hand():  # oracles.md: compare reports
    # 8 values: the middle 4 (25% cut from each end) are 3, 4, 5, 6
    assert iqm([1, 2, 3, 4, 5, 6, 7, 100]) == pytest.approx(4.5)
    # 2 x 2 pairs: 3>1, 3>2, 2>1, 2=2 -> (3 + 0.5) / 4
    assert probability_of_improvement([3, 2], [1, 2]) == pytest.approx(0.875)
    assert probability_of_improvement([1, 1], [1, 1]) == 0.5
    lo, hi = iqm_interval([0.1, 0.2, 0.3, 0.4, 0.5])
    assert 0.1 <= lo <= iqm([0.1, 0.2, 0.3, 0.4, 0.5]) <= hi <= 0.5
    lo, hi = probability_of_improvement_interval([0.6, 0.7, 0.8, 0.9, 1.0], [0.1, 0.2, 0.3, 0.4, 0.5])
    assert (lo, hi) == (1.0, 1.0)  # every resample: every variant seed beats every baseline seed


def test_compare_to_baseline_says_when_seeds_cannot_conclude():
    base = {0: 0.30, 1: 0.34, 2: 0.38}
    clear = compare_to_baseline({0: 0.70, 1: 0.75, 2: 0.80}, base)
    assert clear["method"] == "paired t" and clear["note"] == "higher than the baseline"
    noisy = compare_to_baseline({0: 0.20, 1: 0.50, 2: 0.36}, base)
    assert noisy["ci_low"] < 0 < noisy["ci_high"] and "crosses 0" in noisy["note"]
    two = compare_to_baseline({0: 0.9, 1: 0.95}, {0: 0.1, 1: 0.15})
    assert two["note"].startswith("too few seeds to conclude")
    # different seeds on the two sides (a seed that never reached a gain): Welch
    assert compare_to_baseline({0: 0.7, 1: None, 2: 0.8}, base)["method"] == "Welch t"
    assert compare_to_baseline({0: None}, base) is None
    assert clear["poi"] is None  # 3 seeds: no probability of improvement
    # 5 seeds a side: P(improvement); by hand, a=3 beats 2 and ties 1 of [1..5] (2.5), a=4: 3.5,
    # a=5: 4.5, a=6: 5, a=7: 5 -> 20.5 / 25
    five = compare_to_baseline({s: float(s + 3) for s in range(5)}, {s: float(s + 1) for s in range(5)})
    assert five["poi"] == pytest.approx(0.82) and five["poi_low"] <= 0.82 <= five["poi_high"]


def test_curve_area_is_the_trapezoid_over_the_step_span():  # oracles.md: compare reports
    # steps 0, 10, 20 with values 0, 1, 1: area 10 * 0.5 + 10 * 1 = 15 over a span of 20
    assert curve_auc([0, 10, 20], [0.0, 1.0, 1.0]) == pytest.approx(0.75)
    assert curve_auc([5, 10], [0.2, 0.4]) == pytest.approx(0.3)
    # uneven spacing: (2 * (0 + 0.6) / 2 + 8 * (0.6 + 0.2) / 2) / 10 = (0.6 + 3.2) / 10
    assert curve_auc([10, 12, 20], [0.0, 0.6, 0.2]) == pytest.approx(0.38)
    assert curve_auc([7], [0.25]) == 0.25
    with pytest.raises(ValueError):
        curve_auc([2, 1], [0.0, 1.0])


def test_steps_to_gain_counts_from_the_warm_start():  # oracles.md: compare reports
    steps, values = [10, 20, 30, 40], [0.1, 0.15, 0.2, 0.35]
    # no warm start level: the first point's (0.1) stands for it; steps from the stage's start
    assert steps_to_gain(steps, values, 0.10) == 30.0  # 0.2 at step 30 is the first >= 0.1 + 0.1
    assert steps_to_gain(steps, values, 0.20) == 40.0  # 0.35 at step 40
    assert steps_to_gain(steps, values, 0.30) is None  # never 0.4
    assert steps_to_gain([0, 5], [0.5, 0.4], 0.1) is None  # falling
    # a warm start at 0.2 that the first eval falls below: +10 is 0.3, first reached at step 40;
    # counted from the first eval (0.1) it would have looked like +10 at step 30
    assert steps_to_gain(steps, values, 0.10, level=0.2) == 40.0
    assert largest_dip(steps, values, 0.2) == (pytest.approx(0.1), 10.0)
    assert largest_dip(steps, values, 0.05) == (0.0, None)


def test_describe_leaves_out_the_seeds_that_never_got_there():
    d = describe([None, 20.0, 40.0])
    assert (d["mean"], d["min"], d["max"], d["n"]) == (30.0, 20.0, 40.0, 2)
    assert describe([None, None])["mean"] is None and describe([None, None])["n"] == 0
    assert describe([0.5])["ci_low"] is None  # one seed: no interval
    assert describe([0.1, 0.2, 0.3, 0.4])["iqm"] is None  # IQM from 5 seeds up
    assert describe([0.1, 0.2, 0.3, 0.4, 0.5])["iqm"] == pytest.approx(0.3)


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
    # from the SFT stage's final eval (0.9, step 2): the GRPO stage never gets back to it
    assert n["warm_start"] == 0.9 and n["warm_start_from"] == "before the stage"
    assert n["gain"] == pytest.approx(0.35 - 0.9) and n["dip"] == pytest.approx(0.8) and n["dip_step"] == 1
    assert n["steps_to_+10"] is None and n["steps_to_+20"] is None
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
    half = 12.706204736174707 * np.std([0.15, 0.6], ddof=1) / np.sqrt(2)  # t_{0.975, 1}
    assert (v["final"]["ci_low"], v["final"]["ci_high"]) == (pytest.approx(0.375 - half), pytest.approx(0.375 + half))


def test_steps_to_gain_of_a_job_from_its_warm_start():
    r = rows({3: 0.0, 4: 0.15, 5: 0.95, 6: 1.0})  # SFT ends at 0.9 (step 2): +10 is 1.0
    n = job_numbers(r, "eval/accuracy", 2)
    assert n["steps_to_+10"] == 4.0 and n["dip"] == pytest.approx(0.9) and n["dip_step"] == 1
    single = job_numbers([{"step": s, "eval/accuracy": v} for s, v in ((10, 0.2), (20, 0.35))], "eval/accuracy", 0)
    assert single["warm_start_from"] == "first eval of the stage" and single["steps_to_+10"] == 20.0


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


VS_ALICE, VS_BOB = "eval/vs/conceder/alice/reward_mean", "eval/vs/boulware/bob/reward_mean"


def two_metric_rows(warm: tuple[float, float], finals: tuple[float, float]) -> list[dict]:
    """A warm start (steps 1-2) evaluated on both metrics at its end, then a learning stage
    evaluated at steps 3 and 4 (the first metric halfway, the finals at step 4)."""
    out: list[dict] = [{"step": 1, "stage": "0-sft"}, {"step": 2, "stage": "0-sft", VS_ALICE: warm[0], VS_BOB: warm[1]}]
    out.append({"step": 3, "stage": "1-grpo", VS_ALICE: (warm[0] + finals[0]) / 2, VS_BOB: warm[1]})
    out.append({"step": 4, "stage": "1-grpo", VS_ALICE: finals[0], VS_BOB: finals[1]})
    return out


def two_metric_compare(tmp_path, rows_by_job: dict[tuple[str, int], list[dict]], metrics: tuple[str, ...]):
    from tinker_algos.compare.runner import Outcome
    from tinker_algos.compare.spec import CompareSpec, JobSpec, Variant

    config = JobConfig.model_validate({
        "model": {"name": "tiny"}, "env": {"id": "echo/echo-v0"},
        "stages": [{"algorithm": {"name": "sft", "steps": 2}}, {"algorithm": {"name": "grpo", "steps": 2}}],
    })
    variants = tuple(dict.fromkeys(v for v, _ in rows_by_job))
    spec = CompareSpec(tmp_path / "cmp.yaml", {}, "base.yaml", tuple(Variant(v, ()) for v in variants), (0, 1, 2), tmp_path / "out",
                       dict.fromkeys(variants, config), variants[0], metrics)
    return spec, [Outcome(JobSpec(v, s, {}), "completed", f"jobs/{v}/seed-{s}", rows) for (v, s), rows in rows_by_job.items()]


def test_a_report_of_several_metrics_gives_each_its_numbers_and_differences(tmp_path):  # oracles.md: compare reports
    from scipy import stats

    from tinker_algos.compare.report import plot_report, render_markdown, report_of

    base_finals = {0: (0.30, 0.20), 1: (0.34, 0.25), 2: (0.38, 0.21)}
    rl_finals = {0: (0.52, 0.40), 1: (0.61, 0.33), 2: (0.50, 0.45)}
    warm = {0: (0.31, 0.22), 1: (0.30, 0.24), 2: (0.33, 0.20)}
    rows_by_job = {("warm-only", s): two_metric_rows(warm[s], base_finals[s]) for s in range(3)}
    rows_by_job |= {("rl", s): two_metric_rows(warm[s], rl_finals[s]) for s in range(3)}
    spec, outcomes = two_metric_compare(tmp_path, rows_by_job, (VS_ALICE, VS_BOB))
    report = report_of(spec, outcomes)
    assert report["metric"] == VS_ALICE and report["metrics"] == [VS_ALICE, VS_BOB] and list(report["more_metrics"]) == [VS_BOB]
    for i, (key, section) in enumerate([(VS_ALICE, report), (VS_BOB, report["more_metrics"][VS_BOB])]):
        rl, base = [rl_finals[s][i] for s in range(3)], [base_finals[s][i] for s in range(3)]
        finals = section["variants"]["rl"]["final"]
        ref = stats.ttest_1samp(rl, 0.0).confidence_interval(0.95)
        assert (finals["mean"], finals["ci_low"], finals["ci_high"]) == (pytest.approx(np.mean(rl)), pytest.approx(ref.low), pytest.approx(ref.high))
        gains = [rl_finals[s][i] - warm[s][i] for s in range(3)]  # the warm start: the SFT stage's last eval of this metric
        assert [j["gain"] for j in section["jobs"] if j["variant"] == "rl"] == pytest.approx(gains), key
        d = section["differences"]["rl"]["final"]
        ref = stats.ttest_rel(rl, base).confidence_interval(0.95)
        assert d["method"] == "paired t" and (d["mean"], d["ci_low"], d["ci_high"]) == (
            pytest.approx(np.mean(rl) - np.mean(base)), pytest.approx(ref.low), pytest.approx(ref.high))
        g = section["differences"]["rl"]["gain"]
        ref = stats.ttest_rel(gains, [base_finals[s][i] - warm[s][i] for s in range(3)]).confidence_interval(0.95)
        assert (g["ci_low"], g["ci_high"]) == (pytest.approx(ref.low), pytest.approx(ref.high))
    md = render_markdown(report)
    assert f"## `{VS_ALICE}`" in md and f"## `{VS_BOB}`" in md and md.index(f"## `{VS_ALICE}`") < md.index(f"## `{VS_BOB}`")
    assert md.count("### differences from the baseline `warm-only`") == 2 and md.count(f"### final {VS_BOB}") == 1
    pytest.importorskip("matplotlib")
    assert plot_report(report, tmp_path / "curves.png").stat().st_size > 0


def test_one_metric_reports_as_before_and_a_metric_a_job_never_logged_is_named(tmp_path):
    from tinker_algos.compare.report import render_markdown, report_of

    rows_by_job = {(v, s): two_metric_rows((0.3, 0.2), (0.4 + s / 10, 0.3)) for v in ("a", "b") for s in range(3)}
    spec, outcomes = two_metric_compare(tmp_path, rows_by_job, (VS_BOB,))
    report = report_of(spec, outcomes)
    assert report["metrics"] == [VS_BOB] and report["more_metrics"] == {}
    md = render_markdown(report)
    assert "## differences from the baseline `a`" in md and "###" not in md and f"held-out metric: `{VS_BOB}`" in md
    del rows_by_job[("b", 1)][-1][VS_BOB], rows_by_job[("b", 1)][-2][VS_BOB]
    spec, outcomes = two_metric_compare(tmp_path, rows_by_job, (VS_ALICE, VS_BOB))
    with pytest.raises(ValueError, match=rf"metric '{VS_BOB}': job b/seed-1 \(jobs/b/seed-1\): no {VS_BOB} point in the last stage"):
        report_of(spec, outcomes)
