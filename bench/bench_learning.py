"""Learning benchmark: every built-in advantage estimator from one warm start, and SFT -> DPO.

Built on ``opentinker compare`` (``tinker_algos.compare``: spec, embedded runner, report); the
statistics (bootstrap intervals, curve area, steps to a gain) are that module's, not redone here.

1. **Warm start, once**: the ``sft-mixed`` and ``sft-warmup`` stages of ``examples/arithmetic.yaml`` (seed 0,
   ``model.threads: 1``) into ``OUTPUT/warm-start``; its final checkpoint's model directory
   (``checkpoints/step-N/trainer/model``) is every later job's ``model.name``.
2. **Estimators**: a compare file whose base is the example's ``grpo`` stage alone (same rollout,
   optimizer and evaluation settings) on the warm start, one variant per built-in estimator with
   its natural loss: ``grpo``, ``dr_grpo`` (with the constant normaliser
   ``seq-mean-token-sum-norm`` its docs pair it with), ``rloo``, ``reinforce_pp``,
   ``reinforce_pp_baseline`` (algorithm ``grpo``, loss ``importance_sampling``) and ``gae``
   (algorithm ``ppo``: critic head, loss ``ppo``, one update per step like the others, critic
   lr 1e-3 as in docs/algorithms/ppo.md); run embedded, one job after another.
3. **DPO**: a second compare file: on-policy DPO from the same warm start (pairs: the best and
   worst of each group of the model's own samples, ranked by the env's reward), the same steps,
   rollout, optimizer and evaluation, beta 0.5 (docs/algorithms/dpo.md), and held-out preference
   pairs (correct answer vs a near miss on test-split sums) for ``eval/preference_accuracy``.
4. One report of all the variants (``build_report`` over both compares' jobs):
   ``bench/results/learning.json`` (with the machine and the load before/after),
   ``bench/results/learning.md`` (compare's report) and ``docs/images/learning-estimators.png``
   (compare's curves figure).

Jobs already completed under ``OUTPUT`` are skipped (compare's resume), so a rerun continues.

    uv run --no-sync python bench/bench_learning.py                 # 5 seeds (about an hour on 2 cores)
    uv run --no-sync python bench/bench_learning.py --quick         # seconds-long smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from _common import BENCH_DIR, RESULTS_DIR, BenchArgs, load_snapshot, print_table, write_results

ROOT = BENCH_DIR.parent
EXAMPLE = ROOT / "examples" / "arithmetic.yaml"
FIGURE = ROOT / "docs" / "images" / "learning-estimators.png"
NAME = "learning"
DPO_BETA = 0.5
PPO_CRITIC_LR = 1e-3
HELDOUT_PAIRS = 200


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, BenchArgs]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=None, help="seeds per variant (default 5; --quick: 2)")
    p.add_argument("--steps", type=int, default=None, help="steps of the GRPO/PPO/DPO stage (default: the example's grpo stage)")
    p.add_argument("--output", type=Path, default=None, help="run dirs (default runs/bench-learning[-quick])")
    p.add_argument("--quick", action="store_true", help="a seconds-long smoke run (tiny stages; numbers not for the docs)")
    p.add_argument("--threads", default="1", help="torch threads of every job (model.threads; the first of a list; default 1)")
    p.add_argument("--results", type=Path, default=RESULTS_DIR, help="directory for learning.json / learning.md")
    p.add_argument("--wait-idle", type=float, default=0.0, help="accepted for the nox bench session; not used")
    ns = p.parse_args(argv)
    if ns.seeds is None:
        ns.seeds = 2 if ns.quick else 5
    if ns.seeds < 1:
        p.error("--seeds needs at least 1")
    ns.threads = int(str(ns.threads).split(",")[0])
    if ns.output is None:
        ns.output = ROOT / "runs" / ("bench-learning-quick" if ns.quick else "bench-learning")
    load = load_snapshot()
    print(f"load before the run: loadavg {load['loadavg_1m']:.2f} (1 min), {100 * load['cpu_busy_1s']:.0f}% of the CPUs busy over 1 s", flush=True)
    return ns, BenchArgs(threads=[ns.threads], quick=ns.quick, results=ns.results, load_at_start=load, wait_idle=ns.wait_idle)


# ---- configs ------------------------------------------------------------------------------------


def example() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))


def stage_of(job: dict[str, Any], name: str) -> dict[str, Any]:
    return json.loads(json.dumps(next(s for s in job["stages"] if s.get("name") == name)))


def common(job: dict[str, Any], ns: argparse.Namespace, model: str) -> dict[str, Any]:
    """The job sections every benchmark job shares (model, env, rollout, checkpoints)."""
    out = {
        "seed": 0,
        "model": {**job["model"], "name": model, "threads": ns.threads},
        "env": job["env"],
        "rollout": dict(job["rollout"]),
        "checkpoint": job.get("checkpoint", {}),
    }
    if ns.quick:
        out["rollout"].update(prompts_per_step=4, group_size=4)
    return out


def warm_start_job(job: dict[str, Any], ns: argparse.Namespace) -> dict[str, Any]:
    stages = [stage_of(job, "sft-mixed"), stage_of(job, "sft-warmup")]
    if ns.quick:
        for sft in stages:
            sft["algorithm"].update(steps=10, batch_size=32, eval_size=32)
            sft["optimizer"]["warmup_steps"] = 5
    return {**common(job, ns, job["model"]["name"]), "name": "bench-learning-warm-start", "stages": stages}


def rl_stage(job: dict[str, Any], ns: argparse.Namespace) -> dict[str, Any]:
    grpo = stage_of(job, "grpo")
    if ns.steps is not None:
        grpo["algorithm"]["steps"] = ns.steps
    if ns.quick:
        grpo["algorithm"].update(steps=ns.steps or 4, eval_every=2, eval_size=32)
    return grpo


def estimator_variants(grpo_algo: dict[str, Any]) -> list[dict[str, Any]]:
    """One variant per built-in estimator, each with its natural loss (the base is grpo's)."""
    assert grpo_algo["estimator"] == "grpo" and grpo_algo["loss"] == "importance_sampling", grpo_algo
    ppo = {
        "name": "ppo",
        "steps": grpo_algo["steps"],
        "estimator": "gae",
        "loss": "ppo",
        "eval_every": grpo_algo["eval_every"],
        "eval_size": grpo_algo["eval_size"],
        # one update per step (epochs_per_step 1, the whole batch), as the GRPO variants make
        "params": {"critic": "head", "critic_lr": PPO_CRITIC_LR},
    }
    return [
        {"name": "grpo", "set": {}},
        {"name": "dr_grpo", "set": {"stages.0.algorithm.estimator": "dr_grpo", "stages.0.algorithm.aggregation": "seq-mean-token-sum-norm"}},
        {"name": "rloo", "set": {"stages.0.algorithm.estimator": "rloo"}},
        {"name": "reinforce_pp", "set": {"stages.0.algorithm.estimator": "reinforce_pp"}},
        {"name": "reinforce_pp_baseline", "set": {"stages.0.algorithm.estimator": "reinforce_pp_baseline"}},
        {"name": "ppo_gae", "set": {"stages.0.algorithm": ppo}},
    ]


def heldout_pairs(path: Path, env: dict[str, Any], n: int) -> Path:
    """Correct answer (chosen) against a near miss (rejected) on ``n`` held-out (test-split) problems."""
    import numpy as np

    from tinker_env_math.arithmetic import arithmetic_problems

    kw = env["eval_kwargs"]
    rng = np.random.default_rng(0)
    lines = []
    for prob in arithmetic_problems(n, 0, digits=kw["digits"], ops="".join(kw["ops"]), split="test"):
        answer = int(prob.answer)
        wrong = answer + int(rng.choice([d for d in range(-10, 11) if d != 0 and answer + d >= 0]))
        lines.append(json.dumps({"prompt": prob.prompt, "chosen": prob.target, "rejected": f"{wrong}\n"}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def dpo_stage(rl: dict[str, Any], pairs: Path) -> dict[str, Any]:
    a = rl["algorithm"]
    return {
        "name": "dpo",
        "algorithm": {
            "name": "dpo", "steps": a["steps"], "eval_every": a["eval_every"], "eval_size": a["eval_size"],
            "loss": "dpo", "loss_config": {"beta": DPO_BETA}, "params": {"eval_data": str(pairs)},
        },
        "optimizer": dict(rl["optimizer"]),
    }


# ---- running ------------------------------------------------------------------------------------


def train_warm_start(job: dict[str, Any], run_dir: Path) -> tuple[Path, dict[str, Any]]:
    """Train (or reuse) the warm start; its final model directory and result.json."""
    from tinker_algos import train
    from tinker_algos.compare.runner import completed_embedded

    if not completed_embedded(run_dir):
        t0 = time.perf_counter()
        print(f"warm start: {sum(s['algorithm']['steps'] for s in job['stages'])} SFT steps at most into {run_dir}", flush=True)
        result = train(job, run_dir=run_dir)
        if result.status != "completed":
            sys.exit(f"warm start ended {result.status} at step {result.step}")
        print(f"warm start: completed in {time.perf_counter() - t0:.1f} s; held-out {result.eval}", flush=True)
    result = json.loads((run_dir / "result.json").read_text())
    model = Path(result["checkpoint"]) / "trainer" / "model"
    if not (model / "config.json").is_file():
        sys.exit(f"warm start: no model directory at {model}")
    return model, result


def run_compare(spec_doc: dict[str, Any], path: Path) -> tuple[Any, list[Any]]:
    """Write the compare file, check it and run its jobs embedded (compare's own runner)."""
    from tinker_algos.compare.runner import check_not_stale, run_embedded
    from tinker_algos.compare.spec import expand, load_spec

    path.write_text(yaml.safe_dump(spec_doc, sort_keys=False), encoding="utf-8")
    spec = load_spec(path)
    jobs = expand(spec)
    check_not_stale(spec.output, jobs)
    print(f"compare {path}: {len(spec.variants)} variant(s) x {len(spec.seeds)} seed(s) = {len(jobs)} jobs", flush=True)
    outcomes = run_embedded(jobs, spec.output, lambda line: print(line, flush=True))
    failed = [o for o in outcomes if o.status != "completed"]
    if failed:
        sys.exit("failed: " + "; ".join(f"{o.job.key}: {o.error}" for o in failed))
    return spec, outcomes


def job_reports(spec: Any, outcomes: list[Any], warm_start: float | None) -> list[dict[str, Any]]:
    """compare's per-job numbers, counted from the warm start's held-out level (trained once,
    outside these jobs)."""
    from tinker_algos.compare.report import report_of

    return report_of(spec, outcomes, warm_start=warm_start)["jobs"]


def preference_numbers(spec: Any, outcomes: list[Any]) -> dict[str, Any]:
    """DPO's held-out preference accuracy over seeds, with compare's per-job and per-variant numbers."""
    from tinker_algos.compare.summary import job_numbers, last_stage_start, variant_numbers

    key = "eval/preference_accuracy"
    jobs = []
    for o in outcomes:
        n = job_numbers(o.rows, key, last_stage_start(spec.configs[o.job.variant], o.rows))
        jobs.append({"variant": o.job.variant, "seed": o.job.seed, **n})
    return {"metric": key, "variant": variant_numbers(jobs), "jobs": jobs}


SUMMARY = (("final", "final acc."), ("gain", "gain over warm start"), ("best", "best acc."), ("auc", "AUC"),
           ("steps_to_+10", "steps to +10"), ("steps_to_+20", "steps to +20"), ("steps_per_s", "steps/s"))


def cell(d: dict[str, Any], metric: str, n_seeds: int) -> str:
    if d["n"] == 0:
        return f"not reached (0/{n_seeds})"
    if metric.startswith("steps_to"):
        f = lambda v: f"{v:.1f}".removesuffix(".0")  # noqa: E731
    elif metric == "steps_per_s":
        f = lambda v: f"{v:.2f}"  # noqa: E731
    else:
        f = lambda v: f"{100 * v:.1f}"  # noqa: E731
    ci = "" if d["ci_low"] is None else f" [{f(d['ci_low'])}, {f(d['ci_high'])}]"
    out = f"{f(d['mean'])}{ci} ({f(d['min'])}-{f(d['max'])})"
    return out + (f" {d['n']}/{n_seeds}" if d["n"] < n_seeds else "")


def summary_table(report: dict[str, Any]) -> str:
    """One row per variant: mean [95% CI] (min-max) of each number; accuracies in points."""
    n = len(report["seeds"])
    rows = [[name, *(cell(v[m], m, n) for m, _ in SUMMARY)] for name, v in report["variants"].items()]
    return print_table(
        f"held-out accuracy (%) over {n} seeds: mean [95% CI] (min-max)", ["variant", *(t for _, t in SUMMARY)], rows
    )


def main(argv: list[str] | None = None) -> None:
    ns, args = parse(argv)
    from tinker_algos.compare.report import build_report, render_markdown, write_report

    out = ns.output.resolve()
    out.mkdir(parents=True, exist_ok=True)
    job = example()
    t0 = time.perf_counter()
    model, warm = train_warm_start(warm_start_job(job, ns), out / "warm-start")
    t_warm = time.perf_counter() - t0
    rl = rl_stage(job, ns)
    seeds = list(range(ns.seeds))
    base = {**common(job, ns, str(model)), "name": "bench-learning", "stages": [rl]}

    t1 = time.perf_counter()
    est_spec, est_outcomes = run_compare(
        {"base": base, "variants": estimator_variants(rl["algorithm"]), "seeds": seeds, "output": str(out / "estimators")},
        out / "compare-estimators.yaml",
    )
    t_est = time.perf_counter() - t1
    pairs = heldout_pairs(out / "dpo-heldout-pairs.jsonl", job["env"], 32 if ns.quick else HELDOUT_PAIRS)
    dpo_base = {**base, "name": "bench-learning-dpo", "stages": [dpo_stage(rl, pairs)]}
    t2 = time.perf_counter()
    dpo_spec, dpo_outcomes = run_compare(
        {"base": dpo_base, "variants": [{"name": "dpo", "set": {}}], "seeds": seeds, "output": str(out / "dpo")},
        out / "compare-dpo.yaml",
    )
    t_dpo = time.perf_counter() - t2

    level = (warm.get("eval") or {}).get("eval/accuracy")
    jobs = job_reports(est_spec, est_outcomes, level) + job_reports(dpo_spec, dpo_outcomes, level)
    variants = {v.name: v.override_texts for v in est_spec.variants}
    variants["dpo"] = [f"algorithm: dpo (on-policy pairs), loss dpo, beta {DPO_BETA}; held-out pairs: {pairs.name}"]
    report = build_report(
        compare_file=f"{est_spec.path.name} + {dpo_spec.path.name}", base=f"the grpo stage of {EXAMPLE.relative_to(ROOT)} on the warm start",
        key="eval/accuracy", seeds=seeds, variants=variants, jobs=jobs,
    )
    written = write_report(report, out / "report")
    table = summary_table(report)
    prefs = preference_numbers(dpo_spec, dpo_outcomes)
    pv = prefs["variant"]["final"]
    # a t-interval needs 2 seeds or more (None with one: the quick run)
    interval = "no interval (1 seed)" if pv["ci_low"] is None else f"[{pv['ci_low']:.3f}, {pv['ci_high']:.3f}]"
    print(f"DPO held-out preference accuracy (final): mean {pv['mean']:.3f} {interval} "
          f"min {pv['min']:.3f} max {pv['max']:.3f}", flush=True)

    args.results.mkdir(parents=True, exist_ok=True)
    md = args.results / (f"{NAME}.quick.md" if ns.quick else f"{NAME}.md")
    md.write_text(render_markdown(report), encoding="utf-8")
    if "png" in written and not ns.quick:
        FIGURE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(written["png"], FIGURE)
    write_results(args, NAME, {
        "seeds": seeds,
        "threads": ns.threads,
        "output": str(out),
        "cpu_count": os.cpu_count(),
        "getloadavg_before": list(args.load_at_start.values())[:3],
        "getloadavg_after": list(os.getloadavg()),
        "seconds": {"warm_start": t_warm, "estimators": t_est, "dpo": t_dpo},
        "warm_start": {"run_dir": str(out / "warm-start"), "model": str(model), "eval": warm.get("eval"),
                       "steps": warm.get("step"), "seconds": warm.get("seconds")},
        "estimators_compare_file": yaml.safe_load((out / "compare-estimators.yaml").read_text()),
        "dpo_compare_file": yaml.safe_load((out / "compare-dpo.yaml").read_text()),
        "summary_table_md": table,
        "report": report,
        "dpo_preference": prefs,
        "figure": str(FIGURE.relative_to(ROOT)) if not ns.quick else str(written.get("png")),
    })
    print(f"wrote {md}" + ("" if ns.quick else f" and {FIGURE}"), flush=True)


if __name__ == "__main__":
    main()
