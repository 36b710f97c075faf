"""``opentinker compare`` as a user runs it: 3 variants x 3 seeds of a tiny SFT-then-GRPO job,
embedded and on a scheduler; the report's numbers are recomputed here from each run dir's
``metrics.jsonl`` (with numpy, independently of tinker_algos.compare); a rerun skips what finished."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BASE = """
name: cmp
model: {name: tiny, threads: 1}
env: {id: echo/echo-v0, kwargs: {words: [ab, cd, ef]}}
stages:
  - {algorithm: {name: sft, steps: 2, batch_size: 4, eval_size: 2}, optimizer: {lr: 0.01}}
  - {algorithm: {name: grpo, steps: 3, estimator: grpo, eval_every: 1, eval_size: 2}}
rollout: {prompts_per_step: 2, group_size: 2, max_new_tokens: 3}
checkpoint: {every: 0}
logging: {tensorboard: false, plot: false}
"""

COMPARE = """
base: base.yaml
variants:
  - {name: grpo, set: {}}
  - {name: dr_grpo, set: {stages.1.algorithm.estimator: dr_grpo}}
  - {name: rloo, set: ["stages.1.algorithm.estimator=rloo"]}
seeds: 3
"""
VARIANTS = {"grpo": "grpo", "dr_grpo": "dr_grpo", "rloo": "rloo"}


def opentinker(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = env or {**os.environ, "HF_HUB_OFFLINE": "1", "OPENTINKER_CACHE": str(cwd / "cache")}
    return subprocess.run([sys.executable, "-m", "tinker_client.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=1200)


def write_files(where: Path) -> Path:
    (where / "base.yaml").write_text(BASE)
    (where / "cmp.yaml").write_text(COMPARE)
    return where / "cmp.yaml"


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def recomputed(rows: list[dict]) -> dict:
    """A job's numbers from its metrics.jsonl rows: the grpo stage's eval/accuracy points."""
    pts = [(r["step"], r["eval/accuracy"]) for r in rows if r["stage"] == "1-grpo" and "eval/accuracy" in r]
    warm = [r["eval/accuracy"] for r in rows if r["stage"] == "0-sft" and "eval/accuracy" in r][-1]  # the SFT stage's last eval
    start = max(r["step"] for r in rows if r["stage"] == "0-sft")
    steps, values = np.array([s for s, _ in pts], float), np.array([v for _, v in pts], float)
    span = steps[-1] - steps[0]
    out = {"final": values[-1], "best": values.max(), "auc": np.trapezoid(values, steps) / span if span else values[0],
           "warm_start": warm, "gain": values[-1] - warm, "dip": max(0.0, warm - values.min())}
    for name, gain in (("steps_to_+10", 0.1), ("steps_to_+20", 0.2)):
        hit = np.nonzero(values >= warm + gain - 1e-12)[0]
        out[name] = float(steps[hit[0]] - start) if hit.size else None
    times = [r["time/step_s"] for r in rows if "time/step_s" in r]
    out["steps_per_s"] = len(times) / sum(times)
    return out


def t_interval(values: list[float]) -> tuple[float, float]:
    from scipy import stats

    ci = stats.ttest_1samp(values, 0.0).confidence_interval(0.95)
    return float(ci.low), float(ci.high)


def check_report(out: Path, run_dir_of) -> None:
    """report.json equals what the run dirs' metrics.jsonl give; report.md and curves.png exist."""
    report = json.loads((out / "report.json").read_text())
    assert report["metric"] == "eval/accuracy" and report["seeds"] == [0, 1, 2]
    assert set(report["variants"]) == set(VARIANTS) and len(report["jobs"]) == 9
    by_variant: dict[str, list[dict]] = {}
    for job in report["jobs"]:
        rows = read_rows(run_dir_of(job) / "metrics.jsonl")
        mine = recomputed(rows)
        for k, v in mine.items():
            assert job[k] == (pytest.approx(v, rel=1e-12, abs=1e-12) if v is not None else None), (job["variant"], job["seed"], k)
        by_variant.setdefault(job["variant"], []).append(mine)
        config = json.loads((run_dir_of(job) / "config.json").read_text())
        assert config["seed"] == job["seed"] and config["stages"][1]["algorithm"]["estimator"] == VARIANTS[job["variant"]]
    for name, jobs in by_variant.items():
        for metric in ("final", "best", "auc", "steps_per_s"):
            values = [j[metric] for j in jobs]
            d = report["variants"][name][metric]
            assert d["mean"] == pytest.approx(np.mean(values), rel=1e-12, abs=1e-12)
            assert (d["min"], d["max"]) == (pytest.approx(min(values)), pytest.approx(max(values)))
            if np.std(values) > 0:
                assert (d["ci_low"], d["ci_high"]) == pytest.approx(t_interval(values), rel=1e-9, abs=1e-12)
    # each variant's final against the baseline (the first variant), paired by seed
    for name in ("dr_grpo", "rloo"):
        d = report["differences"][name]["final"]
        assert d["method"] == "paired t" and d["n"] == 3
        assert d["mean"] == pytest.approx(np.mean([j["final"] for j in by_variant[name]]) - np.mean([j["final"] for j in by_variant["grpo"]]))
    md = (out / "report.md").read_text()
    assert "## final eval/accuracy" in md and "## steps into the last stage to +20 points of eval/accuracy over the warm start" in md
    assert "## differences from the baseline `grpo`" in md
    assert "## training steps per second" in md and "| rloo |" in md
    assert all(f"{j['variant']} seed {j['seed']}: {j['run_dir']}" in md for j in report["jobs"])
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_embedded_writes_a_report_the_run_dirs_reproduce_and_a_rerun_skips_finished_jobs(tmp_path):
    write_files(tmp_path)
    first = opentinker("compare", "cmp.yaml", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    out = tmp_path / "runs" / "compare-cmp"
    assert "3 variant(s) x 3 seed(s) = 9 jobs" in first.stdout
    assert "jobs: 0 done, 1 running, 8 queued" in first.stdout and "jobs: 9 done, 0 running, 0 queued" in first.stdout
    assert "rloo/seed-2: completed; run dir: runs/compare-cmp/jobs/rloo/seed-2" in first.stdout
    check_report(out, lambda job: tmp_path / job["run_dir"])
    # a rerun after one job's run dir is lost runs that one only
    import shutil

    shutil.rmtree(out / "jobs" / "dr_grpo" / "seed-1")
    report_before = json.loads((out / "report.json").read_text())
    again = opentinker("compare", "cmp.yaml", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "jobs: 8 done, 0 running, 1 queued  (8 already completed)" in again.stdout
    assert again.stdout.count(": running)") == 1 and "dr_grpo/seed-1: running" in again.stdout
    check_report(out, lambda job: tmp_path / job["run_dir"])
    after = json.loads((out / "report.json").read_text())
    same = lambda r: [(j["variant"], j["seed"], j["final"], j["auc"]) for j in r["jobs"]]  # noqa: E731
    assert same(after) == same(report_before)  # deterministic: the rerun job's metrics are the same
    done = opentinker("compare", "cmp.yaml", cwd=tmp_path)
    assert done.returncode == 0 and "jobs: 9 done, 0 running, 0 queued  (9 already completed)" in done.stdout


def test_compare_bad_input_is_one_line_exit_2_and_starts_no_job(tmp_path):
    write_files(tmp_path)
    (tmp_path / "typo.yaml").write_text(COMPARE.replace("stages.1.algorithm.estimator: dr_grpo", "stages.1.algorithm.estimatr: dr_grpo"))
    result = opentinker("compare", "typo.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: typo.yaml: variant 'dr_grpo': override 'stages.1.algorithm.estimatr=dr_grpo': unknown key "
        "stages.1.algorithm.estimatr; did you mean 'stages.1.algorithm.estimator'?"
    ]
    assert not (tmp_path / "runs").exists()


def test_compare_jobs_at_once_runs_embedded_jobs_in_processes_with_the_same_numbers(tmp_path):
    write_files(tmp_path)
    (tmp_path / "two.yaml").write_text(COMPARE.replace("seeds: 3", "seeds: 2").replace('  - {name: rloo, set: ["stages.1.algorithm.estimator=rloo"]}\n', ""))
    one = opentinker("compare", "two.yaml", "-o", "one", cwd=tmp_path)
    two = opentinker("compare", "two.yaml", "-o", "two", "--jobs", "2", cwd=tmp_path)
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    assert "jobs: 0 done, 1 running, 3 queued" in one.stdout and "2 running" not in one.stdout
    assert "jobs: 0 done, 2 running, 2 queued" in two.stdout and "jobs: 4 done, 0 running, 0 queued" in two.stdout
    numbers = lambda out: [  # noqa: E731  (everything but the times)
        (j["variant"], j["seed"], j["final"], j["best"], j["auc"], j["steps_to_+10"])
        for j in json.loads((tmp_path / out / "report.json").read_text())["jobs"]
    ]
    assert len(numbers("two")) == 4 and numbers("two") == numbers("one")
    for bad, message in (
        (["--jobs", "0"], "error: --jobs must be at least 1, got 0"),
        (["--jobs", "2", "--scheduler", "127.0.0.1:1"], "error: --jobs runs embedded jobs in parallel; with --scheduler"),
    ):
        result = opentinker("compare", "two.yaml", "-o", "bad", *bad, cwd=tmp_path)
        assert result.returncode == 2 and result.stderr.startswith(message), result.stderr
    assert not (tmp_path / "bad").exists()


def test_compare_on_a_scheduler_runs_the_jobs_in_parallel_and_resumes(scheduler):
    address, env, tmp = scheduler
    work = tmp / "work"
    work.mkdir()
    write_files(work)
    first = opentinker("compare", "cmp.yaml", "--scheduler", address, cwd=work, env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "jobs: 0 done, 0 running, 9 queued  (9 submitted)" in first.stdout
    assert "jobs: 9 done, 0 running, 0 queued" in first.stdout
    out = work / "runs" / "compare-cmp"
    report = json.loads((out / "report.json").read_text())
    assert all(Path(j["run_dir"]).is_relative_to(tmp / "runs") and j["job_id"] for j in report["jobs"])
    check_report(out, lambda job: Path(job["run_dir"]))  # the scheduler's run dirs
    # what the watch stream gave equals the scheduler's metrics.jsonl, row for row (stage names aside)
    job = report["jobs"][4]
    streamed = read_rows(out / "jobs" / job["variant"] / f"seed-{job['seed']}" / "metrics.jsonl")
    assert streamed == [{k: v for k, v in r.items() if k != "stage"} for r in read_rows(Path(job["run_dir"]) / "metrics.jsonl")]
    again = opentinker("compare", "cmp.yaml", "--scheduler", address, cwd=work, env=env)
    assert again.returncode == 0 and "(9 already completed)" in again.stdout, again.stdout + again.stderr
