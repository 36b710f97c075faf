"""Where OpenTinker's GRPO step goes at each thread count: rollout, forward+backward, optimizer, rest.

The settings of ``bench_vs_trl.py``'s ``issue31`` preset (32 prompts x 8, 4 new tokens, eos
only, AdamW 5e-4, clip 1.0, token-mean PPO loss) on its SFT start (``--sft-steps``, default
250, 20 with ``--quick``, built once into ``--model-dir``), no evaluation, ``--steps`` steps (default 20; 6 with
``--quick``). Per step: ``time/step_s`` and ``time/rollout_s`` from the metrics, and the wall
time inside ``Trainer.forward_backward`` and ``Trainer.optim_step`` (a ``PhaseTimer`` around
them); the report is the median of each over steps 3..N-1, with the load before and after,
for each ``--threads`` count (issue 31, part 2). ``--share-prefix on,off`` runs each thread count
with the shared-prefix training pass (``algorithm.share_prefix``, the default) and without it,
alternating, ``--repeats`` times (default 1).

    uv run --no-sync python bench/bench_grpo_phases.py [--threads 1,2] [--steps 20] [--quick] [--share-prefix on,off] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import PhaseTimer, load_snapshot, parse_args, print_table, set_threads, write_results

PHASES = ("step", "rollout", "forward_backward", "optim_step", "rest")


def run(threads: int, model_dir: Path, steps: int, share_prefix: bool = True) -> dict[str, Any]:
    from bench_vs_trl import opentinker_job

    import tinker_algos.training.trainer as trainer_mod
    from tinker_algos.run.job import train

    set_threads(threads)
    timer = PhaseTimer("forward_backward", "optim_step")
    originals = {k: getattr(trainer_mod.Trainer, k) for k in timer.spent}
    for k, fn in originals.items():
        setattr(trainer_mod.Trainer, k, timer.wrap(k, fn, group="trainer"))
    per_step: list[dict[str, float]] = []
    seen = dict.fromkeys(timer.spent, 0.0)

    class Callbacks:
        def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
            row = {k: timer.spent[k] - seen[k] for k in timer.spent}
            seen.update(timer.spent)
            row.update(step=float(metrics["time/step_s"]), rollout=float(metrics.get("time/rollout_s", 0.0)))
            row["rest"] = row["step"] - row["rollout"] - row["forward_backward"] - row["optim_step"]
            per_step.append(row)

    job = opentinker_job(model_dir, 0, steps, 0, 0, 0, stop="eos")
    for key in ("eval_every", "eval_size"):
        job["algorithm"].pop(key)
    job["algorithm"]["share_prefix"] = share_prefix
    before = load_snapshot()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-phases-") as tmp:
            result = train(job, run_dir=Path(tmp) / "run", callbacks=Callbacks())
    finally:
        for k, fn in originals.items():
            setattr(trainer_mod.Trainer, k, fn)
    if result.status != "completed":
        raise RuntimeError(f"the run ended {result.status!r}")
    steady = per_step[2:-1] or per_step
    return {"threads": threads, "share_prefix": share_prefix, "steps": len(per_step), "median_s": {k: statistics.median(r[k] for r in steady) for k in PHASES},
            "per_step": per_step, "load_before": before, "load_after": load_snapshot()}


def main() -> None:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--steps", type=int, default=None)
    extra.add_argument("--sft-steps", type=int, default=None, help="SFT warm-start steps (default 250; 20 with --quick)")
    extra.add_argument("--share-prefix", default="on", help="comma-separated on/off: with and without the shared-prefix pass")
    extra.add_argument("--repeats", type=int, default=1, help="runs of each (threads, share-prefix) case, interleaved")
    extra.add_argument("--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "opentinker-bench-sft")
    ns, rest = extra.parse_known_args()
    args = parse_args(__doc__.splitlines()[0], rest)
    steps = ns.steps or (6 if args.quick else 20)
    ns.sft_steps = ns.sft_steps or (20 if args.quick else 250)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_vs_trl import sft_warm_start

    model_dir = ns.model_dir / f"sft{ns.sft_steps}"
    if not (model_dir / "config.json").is_file():
        sft_warm_start(model_dir, ns.sft_steps)
    shares = [{"on": True, "off": False}[v.strip()] for v in ns.share_prefix.split(",")]
    cases = [run(t, model_dir, steps, sh) | {"repeat": r} for t in args.threads for r in range(ns.repeats) for sh in shares]
    rows = []
    for c in cases:
        m = c["median_s"]
        rows.append([c["threads"], "on" if c["share_prefix"] else "off", c["repeat"], *[f"{m[k] * 1e3:.0f} ({100 * m[k] / m['step']:.0f}%)" for k in PHASES],
                     f"{c['load_before']['loadavg_1m']:.2f} / {c['load_after']['loadavg_1m']:.2f}"])
    print_table(f"GRPO step phases, ms (share of the step), medians of steps 3..{steps - 1}",
                ["threads", "share prefix", "repeat", *PHASES, "load 1m before/after"], rows)
    write_results(args, "grpo_phases", {"steps": steps, "sft_steps": ns.sft_steps, "cases": cases})


if __name__ == "__main__":
    main()
