"""One job over several processes on this machine: what rollout workers and data-parallel learners
cost and give (``execution`` in the job config; docs/guides/distributed.md).

The GRPO stage of the README's main job (``examples/arithmetic.yaml``: 32 prompts x 8 samples, 5
new tokens, the tiny model) from its untrained start, ``--steps`` steps, once per topology:

* ``one-process`` (the default execution; and at 2 torch threads, what a user would pick on two
  cores), ``workers-1``, ``workers-2``, ``learners-2`` and
  ``workers-2-learners-2``, interleaved (A B C D E, A B C D E, ...), each run its own subprocess
  at ``--threads`` torch threads (the job's process and every actor);
* per run: steps/s and samples/s over the steps after the first two (warm-up: the actors load),
  the whole process's wall time (Ray and actor start included), and the load before and after;
* the weight sync: milliseconds per MB of record (full fine-tuning: every weight; and a LoRA r=8
  run's adapter), from ``time/sync_s`` and ``sync/mb``;
* the staleness bound with 2 workers at ``max_staleness`` 0, 1, 2: the staleness of the trained
  groups (a histogram over steps) and the workers' idle fraction (``time/rollout_idle_frac``:
  how much of a step they waited).

Medians (min-max) over ``--repeats``; nothing is asserted. Results: ``results/distributed.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS_DIR, load_snapshot, machine_info  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES: dict[str, dict[str, Any]] = {
    "one-process": {},
    "one-process-2-threads": {"threads": 2},  # what a user would pick instead on 2 cores
    "workers-1": {"rollout_workers": 1},
    "workers-2": {"rollout_workers": 2},
    "learners-2": {"learners": 2},
    "workers-2-learners-2": {"rollout_workers": 2, "learners": 2},
}

RUN = r"""
import json, sys, time
t0 = time.perf_counter()
from tinker_algos.run.job import train
job = json.loads(sys.argv[1])
result = train(job, run_dir=sys.argv[2])
print(json.dumps({"wall_s": time.perf_counter() - t0, "status": result.status}))
"""


def grpo_job(steps: int, threads: int, execution: dict[str, Any], *, max_staleness: int = 0, lora: bool = False) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": "bench-distributed",
        "seed": 0,
        "model": {"name": "tiny", "threads": threads},
        "env": {"id": "math/arithmetic-v0", "kwargs": {"digits": 2, "ops": ["+"]}},
        "algorithm": {"name": "grpo", "steps": steps, "estimator": "grpo", "loss": "ppo" if max_staleness else "importance_sampling",
                      "eval_every": 0, "eval_size": 8},
        "optimizer": {"name": "adamw", "lr": 0.0003},
        "rollout": {"prompts_per_step": 32, "group_size": 8, "max_new_tokens": 5, "stop": ["\n"], "max_staleness": max_staleness},
        "logging": {"tensorboard": False, "plot": False, "trace": False, "rollouts": {"per_step": 0}},
        "checkpoint": {"every": 0, "keep": 1},
        "execution": {**execution, "rollout_worker": {"num_cpus": 0.5}, "learner": {"num_cpus": 0.5}},
    }
    if lora:
        job["lora"] = {"rank": 8, "alpha": 16}
    return job


def run_once(job: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory(prefix="bench-dist-") as tmp:
        before = load_snapshot()
        proc = subprocess.run([sys.executable, "-c", RUN, json.dumps(job), tmp], env=env, capture_output=True, text=True, timeout=3600)
        after = load_snapshot()
        if proc.returncode != 0:
            raise RuntimeError(f"run failed: {proc.stderr[-3000:]}")
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    steady = rows[2:] or rows
    step_s = statistics.median(r["time/step_s"] for r in steady)
    episodes = statistics.median(r["rollout/episodes"] for r in steady)
    return {
        "wall_s": out["wall_s"], "steps_per_s": 1.0 / step_s, "samples_per_s": episodes / step_s,
        "rollout_s": statistics.median(r["time/rollout_s"] for r in steady),
        "sync_s": [r["time/sync_s"] for r in rows if "time/sync_s" in r],
        "sync_mb": [r["sync/mb"] for r in rows if "sync/mb" in r],
        "staleness": [r["staleness/max"] for r in rows if "staleness/max" in r],
        "idle_frac": [r["time/rollout_idle_frac"] for r in rows if "time/rollout_idle_frac" in r],
        "load_before": before, "load_after": after,
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="3 steps, 1 repeat (a smoke run; writes distributed.quick.json)")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    args, _ = parser.parse_known_args()
    steps, repeats = (3, 1) if args.quick else (args.steps, args.repeats)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in TOPOLOGIES}
    for r in range(repeats):
        for name, topology in TOPOLOGIES.items():  # interleaved: every topology once per repeat
            execution = {k: v for k, v in topology.items() if k != "threads"}
            res = run_once(grpo_job(steps, topology.get("threads", args.threads), execution))
            runs[name].append(res)
            print(f"repeat {r} {name:>22}: {res['steps_per_s']:.3f} steps/s, {res['samples_per_s']:.0f} samples/s, "
                  f"wall {res['wall_s']:.1f} s, load {res['load_before']['loadavg_1m']:.2f} -> {res['load_after']['loadavg_1m']:.2f}", flush=True)
    sync = {}
    for kind, lora in (("full", False), ("lora-r8", True)):
        res = run_once(grpo_job(max(steps // 2, 3), args.threads, {"rollout_workers": 1}, lora=lora))
        ms_per_mb = [1000 * s / mb for s, mb in zip(res["sync_s"], res["sync_mb"], strict=True)]
        sync[kind] = {"mb": res["sync_mb"][0], "ms_per_mb": spread(ms_per_mb), "ms": spread([1000 * s for s in res["sync_s"]])}
        print(f"sync {kind}: {res['sync_mb'][0]:.3f} MB, {sync[kind]['ms_per_mb']['median']:.1f} ms/MB", flush=True)
    staleness = {}
    for s in (0, 1, 2):
        res = run_once(grpo_job(steps, args.threads, {"rollout_workers": 2}, max_staleness=s))
        staleness[str(s)] = {
            "histogram": dict(sorted(Counter(int(x) for x in res["staleness"]).items())),
            "idle_frac": spread(res["idle_frac"][2:] or res["idle_frac"]),
            "steps_per_s": res["steps_per_s"],
        }
        print(f"max_staleness {s}: staleness histogram {staleness[str(s)]['histogram']}, idle {staleness[str(s)]['idle_frac']['median']:.2f}, "
              f"{res['steps_per_s']:.3f} steps/s", flush=True)
    summary = {
        name: {
            "steps_per_s": spread([x["steps_per_s"] for x in rs]), "samples_per_s": spread([x["samples_per_s"] for x in rs]),
            "wall_s": spread([x["wall_s"] for x in rs]),
        }
        for name, rs in runs.items()
    }
    base = summary["one-process"]["steps_per_s"]["median"]
    for name, s in summary.items():
        s["vs_one_process"] = s["steps_per_s"]["median"] / base
        print(f"{name:>22}: {s['steps_per_s']['median']:.3f} ({s['steps_per_s']['min']:.3f}-{s['steps_per_s']['max']:.3f}) steps/s, "
              f"{s['vs_one_process']:.2f}x one process", flush=True)
    payload = {
        "machine": machine_info(), "time": time.strftime("%Y-%m-%d %H:%M:%S"), "steps": steps, "repeats": repeats,
        "threads": args.threads, "summary": summary, "runs": runs, "sync": sync, "staleness": staleness,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    out = args.results / ("distributed.quick.json" if args.quick else "distributed.json")
    out.write_text(json.dumps(payload, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
