"""``bench/bench_learning.py --quick``: the plumbing of the learning benchmark (a warm start, a
compare of the six estimator variants and one of DPO, on the warm start's model directory, and
one report of all seven), on a seconds-long run. It checks what the files say, never a number
of learning or of time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo_gae", "dpo"]


def test_quick_run_writes_one_report_of_every_variant_from_one_warm_start(tmp_path: Path) -> None:
    out, results = tmp_path / "runs", tmp_path / "results"
    figure = ROOT / "docs" / "images" / "learning-estimators.png"
    before = figure.stat().st_mtime_ns if figure.exists() else None
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_learning.py"), "--quick", "--seeds", "1", "--steps", "2",
         "--output", str(out), "--results", str(results)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((results / "learning.quick.json").read_text())
    report = doc["report"]
    assert list(report["variants"]) == VARIANTS
    assert [(j["variant"], j["seed"]) for j in report["jobs"]] == [(v, 0) for v in VARIANTS]
    # every job started from the warm start's final model directory, with one torch thread
    model = Path(doc["warm_start"]["model"])
    assert model.parts[-2:] == ("trainer", "model") and (model / "config.json").is_file()
    for j in report["jobs"]:
        config = json.loads((Path(j["run_dir"]) / "config.json").read_text())
        assert config["model"]["name"] == str(model) and config["model"]["threads"] == 1
        algo = config["stages"][0]["algorithm"]
        expected = {"ppo_gae": ("ppo", "gae", "ppo"), "dpo": ("dpo", None, "dpo")}.get(j["variant"], ("grpo", j["variant"], "importance_sampling"))
        assert (algo["name"], algo["estimator"], algo["loss"]) == expected
        # the report's final number is the run dir's last held-out accuracy
        rows = [json.loads(line) for line in (Path(j["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
        assert j["final"] == [r["eval/accuracy"] for r in rows if "eval/accuracy" in r][-1]
    assert doc["dpo_preference"]["metric"] == "eval/preference_accuracy"
    assert {"getloadavg_before", "getloadavg_after", "cpu_count"} <= set(doc) and doc["machine"]["cpu_model"]
    md = (results / "learning.quick.md").read_text()
    metric_tables = md.count("\n## ") - 2  # every "## " section but the differences and the jobs list
    # the overrides table, one row per metric table, and one difference row per compared metric (final, gain, best, auc)
    assert md.count("| ppo_gae |") == 1 + metric_tables + 4, md
    assert (out / "report" / "curves.png").is_file()
    assert (figure.stat().st_mtime_ns if figure.exists() else None) == before  # --quick leaves the docs' figure alone
