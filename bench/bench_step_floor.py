"""How far OpenTinker's GRPO step is from this machine's floor (issue 31, part 3).

The step of ``bench_vs_trl.py``'s ``issue31`` preset (32 prompts x 8, 4 new tokens, eos only,
AdamW 5e-4, clip 1.0, token-mean PPO loss, the 250-step SFT start of ``--model-dir``), run twice
from the same seed: once timed, once under ``torch.utils.flop_counter.FlopCounterMode``, which
counts the FLOPs of every matmul, attention and convolution op the step dispatches (both runs do
the same work: a seed fixes it). Per step, medians of steps 3..N-1:

* **time**: the step, the rollout and the update (``Trainer.forward_backward`` + ``optim_step``);
* **FLOPs**: the same phases, counted;
* **rates**: the machine's fp32 matmul rate at the same thread count, for square 2048 x 2048
  matrices (its peak) and for the shapes the tiny model's linear layers run at here (tokens x
  128 by 128 x 128 and 128 x 512, at the update's and the decode's token counts), measured in
  this process just before the steps;
* **floor**: the step's FLOPs at the peak rate, and at the model-shaped rate; the step over each.

What the rest of the step is made of is then the step's time less its FLOPs at the model-shaped
rate: kernel launch and framework overhead between the small ops, the sampler's and env's
Python, the optimizer.

    uv run --no-sync python bench/bench_step_floor.py [--threads 1,2] [--steps 30] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import load_snapshot, matmul_flops, parse_args, print_table, set_threads, write_results


def linear_rate(tokens: int, d_in: int, d_out: int, *, repeats: int = 30) -> float:
    """GFLOP/s of ``F.linear`` on ``[tokens, d_in] x [d_out, d_in]^T`` (fp32), median of ``repeats``."""
    import torch

    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(tokens, d_in, generator=gen), torch.randn(d_out, d_in, generator=gen)
    for _ in range(5):
        torch.nn.functional.linear(x, w)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.nn.functional.linear(x, w)
        times.append(time.perf_counter() - t0)
    return 2.0 * tokens * d_in * d_out / statistics.median(times) / 1e9


def model_shaped_rate(update_tokens: int, decode_rows: int, hidden: int, inner: int) -> dict[str, float]:
    """The matmul rate at the tiny model's shapes: attention projections and the MLP, at the
    update's token count (its FLOPs over 6 x the model's ~1M parameters) and at one decode step's
    rows; ``mean`` weighs the update's two by their share of a layer's weights."""
    rates = {
        f"update {update_tokens}x{hidden}x{hidden}": linear_rate(update_tokens, hidden, hidden),
        f"update {update_tokens}x{hidden}x{inner}": linear_rate(update_tokens, hidden, inner),
        f"decode {decode_rows}x{hidden}x{hidden}": linear_rate(decode_rows, hidden, hidden),
        f"decode {decode_rows}x{hidden}x{inner}": linear_rate(decode_rows, hidden, inner),
    }
    # a layer's weights: q and o hidden x hidden, k and v half that (2 KV heads of 4); the MLP's three hidden x inner
    weights = [3.0 * hidden * hidden, 3.0 * hidden * inner]
    upd = list(rates.values())[:2]
    rates["mean (FLOP-weighted, update shapes)"] = sum(weights) / sum(w / r for w, r in zip(weights, upd, strict=True))
    return rates


def run(threads: int, model_dir: Path, steps: int, *, count: bool) -> list[dict[str, float]]:
    """``steps`` GRPO steps; per step the wall time and (with ``count``) the FLOPs of each phase."""
    from bench_vs_trl import opentinker_job
    from torch.utils.flop_counter import FlopCounterMode

    import tinker_algos.training.trainer as trainer_mod
    from tinker_algos.run.job import train

    set_threads(threads)
    counter = FlopCounterMode(display=False) if count else None
    spent = {"update_s": 0.0, "update_flops": 0.0}
    originals = {k: getattr(trainer_mod.Trainer, k) for k in ("forward_backward", "optim_step")}

    def wrap(fn: Any) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            f0, t0 = counter.get_total_flops() if counter else 0, time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent["update_s"] += time.perf_counter() - t0
                spent["update_flops"] += (counter.get_total_flops() - f0) if counter else 0

        return wrapper

    for k, fn in originals.items():
        setattr(trainer_mod.Trainer, k, wrap(fn))
    per_step: list[dict[str, float]] = []
    seen = {"update_s": 0.0, "update_flops": 0.0, "flops": 0.0}

    class Callbacks:
        def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
            total = float(counter.get_total_flops()) if counter else 0.0
            row = {
                "step_s": float(metrics["time/step_s"]), "rollout_s": float(metrics.get("time/rollout_s", 0.0)),
                "update_s": spent["update_s"] - seen["update_s"],
                "flops": total - seen["flops"], "update_flops": spent["update_flops"] - seen["update_flops"],
            }
            row["rollout_flops"] = row["flops"] - row["update_flops"]
            seen.update(update_s=spent["update_s"], update_flops=spent["update_flops"], flops=total)
            per_step.append(row)

    job = opentinker_job(model_dir, 0, steps, 0, 0, 0, stop="eos")
    for key in ("eval_every", "eval_size"):
        job["algorithm"].pop(key)
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp, counter or contextlib.nullcontext():
        try:
            status = train(job, run_dir=Path(tmp) / "run", callbacks=Callbacks()).status
        finally:
            for k, fn in originals.items():
                setattr(trainer_mod.Trainer, k, fn)
    if status != "completed":
        raise RuntimeError(f"the run ended {status!r}")
    return per_step


def median_of(rows: list[dict[str, float]], key: str) -> float:
    steady = rows[2:-1] or rows
    return statistics.median(r[key] for r in steady)


def main() -> None:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--steps", type=int, default=None, help="GRPO steps per run (default 30; 8 with --quick)")
    extra.add_argument("--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "opentinker-bench-sft")
    ns, rest = extra.parse_known_args()
    args = parse_args(__doc__.splitlines()[0], rest)
    steps = ns.steps or (8 if args.quick else 30)
    sft_steps = 20 if args.quick else 250
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_vs_trl import sft_warm_start

    model_dir = ns.model_dir / f"sft{sft_steps}"
    if not (model_dir / "config.json").is_file():
        sft_warm_start(model_dir, sft_steps)
    cases = []
    for threads in args.threads:
        set_threads(threads)
        before = load_snapshot()
        peak = matmul_flops(2048, repeats=3 if args.quick else 5, warmup=1)["gflops"]
        counted = run(threads, model_dir, steps, count=True)
        flops = {k: median_of(counted, k) for k in ("flops", "rollout_flops", "update_flops")}
        shaped = model_shaped_rate(int(flops["update_flops"] / 6 / 1e6) or 1, 256, 128, 512)
        timed = run(threads, model_dir, steps, count=False)
        wall = {k: median_of(timed, k) for k in ("step_s", "rollout_s", "update_s")}
        rate = shaped["mean (FLOP-weighted, update shapes)"]
        cases.append({
            "threads": threads, "steps": steps, "peak_gflops": peak, "model_shaped_gflops": shaped,
            "flops_per_step": flops, "seconds_per_step": wall,
            "achieved_gflops": flops["flops"] / wall["step_s"] / 1e9,
            "update_achieved_gflops": flops["update_flops"] / wall["update_s"] / 1e9,
            "floor_at_peak_s": flops["flops"] / peak / 1e9, "floor_at_model_shapes_s": flops["flops"] / rate / 1e9,
            "per_step_timed": timed, "per_step_counted": counted, "load_before": before, "load_after": load_snapshot(),
        })
    rows = []
    for c in cases:
        f, w = c["flops_per_step"], c["seconds_per_step"]
        rows.append([
            c["threads"], f"{w['step_s'] * 1e3:.0f}", f"{w['rollout_s'] * 1e3:.0f} / {w['update_s'] * 1e3:.0f}",
            f"{f['flops'] / 1e9:.2f} ({f['rollout_flops'] / 1e9:.2f} / {f['update_flops'] / 1e9:.2f})",
            f"{c['achieved_gflops']:.1f}", f"{c['peak_gflops']:.1f}", f"{c['model_shaped_gflops']['mean (FLOP-weighted, update shapes)']:.1f}",
            f"{c['floor_at_peak_s'] * 1e3:.1f} ({w['step_s'] / c['floor_at_peak_s']:.1f}x)",
            f"{c['floor_at_model_shapes_s'] * 1e3:.1f} ({w['step_s'] / c['floor_at_model_shapes_s']:.1f}x)",
            f"{c['load_before']['loadavg_1m']:.2f} / {c['load_after']['loadavg_1m']:.2f}",
        ])
    print_table(f"GRPO step against the floor, medians of steps 3..{steps - 1}",
                ["threads", "step ms", "rollout / update ms", "GFLOP per step (rollout / update)", "achieved GFLOP/s",
                 "matmul 2048 GFLOP/s", "matmul at model shapes", "floor at peak ms (step over it)",
                 "floor at model shapes ms (step over it)", "load 1m before/after"], rows)
    write_results(args, "step_floor", {"steps": steps, "sft_steps": sft_steps, "cases": cases})


if __name__ == "__main__":
    main()
