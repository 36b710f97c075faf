"""Rebuild the stored ``opentinker compare`` reports with compare's current statistics, from the
numbers the runs stored (no job is re-run).

Each stored report keeps every job's eval curve and steps/s; its other numbers, the per-variant
intervals and the differences between variants are recomputed from them by
``tinker_algos.compare`` (``summary.curve_numbers``, ``report.build_report``). The warm start's
held-out level, which the old reports did not keep, comes from where it was measured:

* ``bench/results/learning.json``: the one warm start every job started from
  (``warm_start.eval['eval/accuracy']`` in the same file);
* ``bench/results/arithmetic_seeds.machine2.json``: each seed's accuracy after SFT, from the
  per-run table in docs/performance.md ("Another machine, the same recipe"; the same at 1 and
  2 threads), copied into :data:`MACHINE2_AFTER_SFT`.

    python bench/regenerate_compare_reports.py      # rewrites the .json reports and their .md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(Path(__file__).resolve().parent))

MACHINE2_AFTER_SFT = {0: 0.352, 1: 0.388, 2: 0.378, 3: 0.328, 4: 0.520, 5: 0.338, 6: 0.446, 7: 0.396, 8: 0.352, 9: 0.306}
"""Seed -> held-out accuracy after the SFT warm start (docs/performance.md, machine 2)."""


def rebuilt(report: dict[str, Any], warm_of: Any, baseline: str | None = None) -> dict[str, Any]:
    """``report`` with every job's numbers recomputed from its stored curve and the new statistics."""
    from tinker_algos.compare.report import build_report
    from tinker_algos.compare.summary import curve_numbers

    jobs = []
    for j in report["jobs"]:
        numbers = curve_numbers(j["curve"]["steps"], j["curve"]["values"], warm_of(j))
        kept = {k: j[k] for k in ("variant", "seed", "run_dir", "job_id", "steps_per_s", "curve") if k in j}
        jobs.append({**kept, **numbers})
    variants = {name: v["overrides"] for name, v in report["variants"].items()}
    return build_report(compare_file=report["compare_file"], base=report["base"], key=report["metric"], seeds=report["seeds"],
                        variants=variants, jobs=jobs, baseline=baseline)


def main() -> None:
    from bench_learning import summary_table

    from tinker_algos.compare.report import render_markdown
    from tinker_algos.compare.summary import curve_numbers, variant_numbers

    path = RESULTS / "learning.json"
    doc = json.loads(path.read_text())
    level = doc["warm_start"]["eval"]["eval/accuracy"]
    doc["report"] = rebuilt(doc["report"], lambda j: level, baseline="grpo")
    doc["summary_table_md"] = summary_table(doc["report"])
    prefs = doc["dpo_preference"]  # DPO's preference accuracy: no warm start level (0 where the policy is its reference)
    prefs["jobs"] = [{**{k: j[k] for k in ("variant", "seed", "steps_per_s", "curve") if k in j},
                      **curve_numbers(j["curve"]["steps"], j["curve"]["values"], None)} for j in prefs["jobs"]]
    prefs["variant"] = variant_numbers(prefs["jobs"])
    doc["report_regenerated_by"] = "bench/regenerate_compare_reports.py (stored curves, t intervals, warm start level)"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    (RESULTS / "learning.md").write_text(render_markdown(doc["report"]))

    path = RESULTS / "arithmetic_seeds.machine2.json"
    report = json.loads(path.read_text())
    report = rebuilt(report, lambda j: MACHINE2_AFTER_SFT[int(j["seed"])], baseline="threads-1")
    path.write_text(json.dumps(report, indent=1) + "\n")
    (RESULTS / "arithmetic_seeds.machine2.md").write_text(render_markdown(report))
    print("rewrote bench/results/learning.{json,md} and bench/results/arithmetic_seeds.machine2.{json,md}")


if __name__ == "__main__":
    main()
