"""``bench/_vs_trl_stats.py``: the presets, run order and aggregation of ``bench/bench_vs_trl.py``,
on made-up run records (no trainer runs, no timing is asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
import _vs_trl_stats as stats  # noqa: E402

sys.path.remove(str(BENCH))


def record(trainer: str, threads: int, seed: int, repeat: int, sps: float, load: float = 1.0) -> dict:
    return {
        "trainer": trainer, "threads": threads, "seed": seed, "repeat": repeat, "steps_per_s": sps, "samples_per_s": 256 * sps,
        "rollout_median_s": 0.1, "update_median_s": 1 / sps - 0.1, "best_accuracy": 0.5 + repeat / 100,
        "final_accuracy": 0.4, "start_accuracy": 0.3, "load_before": {"loadavg_1m": load}, "load_after": {"loadavg_1m": load + 1},
    }


def test_issue31_preset_is_the_default_and_holds_the_issue_settings() -> None:
    p = stats.resolve_preset(stats.DEFAULT_PRESET, {})
    assert stats.DEFAULT_PRESET == "issue31"
    assert (p.threads, p.seeds, p.steps, p.eval_every, p.eval_size, p.stop) == ("1,2", "0,1", 200, 10, 500, "eos")
    assert p.repeats >= 3
    # overrides replace fields, None keeps the preset's
    q = stats.resolve_preset("issue31", {"steps": 40, "threads": None})
    assert (q.steps, q.threads) == (40, "1,2")
    with pytest.raises(SystemExit, match="issue13"):
        stats.resolve_preset("issue-31", {})
    with pytest.raises(SystemExit, match="--stop"):
        stats.resolve_preset("issue31", {"stop": "comma"})


def test_runs_alternate_sides_within_each_configuration() -> None:
    sides = stats.sides(None, [0, 1])
    assert sides == ["trl", "opentinker", "opentinker-staleness1"]
    assert stats.sides("opentinker", [0]) == ["opentinker"] and stats.sides("trl", [0, 1]) == ["trl"]
    assert [stats.staleness_of(s) for s in sides] == [0, 0, 1]
    order = stats.run_order([1, 2], [0, 1], 3, ["trl", "opentinker"])
    assert len(order) == 2 * 2 * 3 * 2
    first = [(o["threads"], o["seed"], o["repeat"], o["trainer"]) for o in order[:6]]
    assert first == [(1, 0, r, t) for r in range(3) for t in ("trl", "opentinker")]  # A B A B A B


def test_aggregate_takes_medians_min_max_and_per_pair_ratios() -> None:
    runs = []
    for rep, (trl, ot) in enumerate([(2.0, 3.0), (1.0, 4.0), (4.0, 4.0)]):
        runs += [record("trl", 2, 0, rep, trl, load=rep), record("opentinker", 2, 0, rep, ot, load=rep)]
    runs.append(record("trl", 1, 0, 0, 3.0))  # another configuration: not mixed in
    rows = stats.aggregate(runs)
    assert [(r["threads"], r["seed"], r["trainer"], r["repeats"]) for r in rows] == [
        (2, 0, "trl", 3), (2, 0, "opentinker", 3), (1, 0, "trl", 1)]
    trl, ot = rows[0], rows[1]
    assert trl["steps_per_s"] == {"median": 2.0, "min": 1.0, "max": 4.0, "n": 3}
    assert ot["steps_per_s"] == {"median": 4.0, "min": 3.0, "max": 4.0, "n": 3}
    # ratios pair each repeat with the TRL run of the same repeat, not medians with medians
    assert ot["ratios"] == [1.5, 4.0, 1.0]
    assert ot["vs_baseline"] == {"median": 1.5, "min": 1.0, "max": 4.0, "n": 3}
    assert trl["vs_baseline"]["median"] == 1.0
    assert ot["best_accuracy"]["max"] == pytest.approx(0.52) and ot["final_accuracy"]["median"] == 0.4
    assert ot["load_1m"] == {"median": 1.5, "min": 0.0, "max": 3.0, "n": 6}
    # a side without a TRL partner has no ratio
    alone = stats.aggregate([record("opentinker", 1, 5, 0, 2.0)])
    assert alone[0]["ratios"] == [None] and alone[0]["vs_baseline"]["median"] is None


def test_markdown_table_shows_median_and_range() -> None:
    runs = [record("trl", 2, 0, 0, 2.0), record("opentinker", 2, 0, 0, 3.0),
            record("trl", 2, 0, 1, 2.0), record("opentinker", 2, 0, 1, 5.0)]
    text = stats.markdown("title", stats.aggregate(runs))
    lines = text.splitlines()
    assert lines[0] == "**title**" and lines[2].startswith("| threads | seed | trainer")
    assert "| 2 | 0 | opentinker | 2 | 4.00 (3.00-5.00) | 2.00x (1.50-2.50) |" in text
    assert "| 2 | 0 | trl | 2 | 2.00 (2.00-2.00) | 1.00x |" in text


def test_pooled_pairs_runs_within_their_seed_and_takes_medians_over_all() -> None:
    runs = [record("trl", 2, 0, 0, 1.0), record("opentinker", 2, 0, 0, 2.0),
            record("trl", 2, 1, 0, 4.0), record("opentinker", 2, 1, 0, 4.0),
            record("trl", 2, 2, 0, 2.0), record("opentinker", 2, 2, 0, 5.0)]
    for r, rss in zip(runs, (1.0, 2.0, 1.5, 2.5, 1.2, 2.2), strict=True):
        r["peak_rss_gib"] = rss
    trl, ot = stats.pooled(runs)
    assert (trl["seed"], trl["trainer"], trl["repeats"]) == ("all", "trl", 3)
    # each seed's OpenTinker run over that seed's TRL run: 2/1, 4/4, 5/2
    assert ot["ratios"] == [2.0, 1.0, 2.5]
    assert ot["vs_baseline"] == {"median": 2.0, "min": 1.0, "max": 2.5, "n": 3}
    assert ot["steps_per_s"]["median"] == 4.0 and trl["steps_per_s"]["median"] == 2.0
    assert ot["peak_rss_gib"] == {"median": 2.2, "min": 2.0, "max": 2.5, "n": 3}
    assert "| 2 | all | opentinker | 3 | 4.00 (2.00-5.00) | 2.00x (1.00-2.50) |" in stats.markdown("t", [trl, ot])
