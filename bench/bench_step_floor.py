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

``--model smollm2`` (issue 46, item 3) repeats the study for SmolLM2-135M-Instruct with LoRA
r=16: the step ``bench_vs_trl_smollm2.py``'s OpenTinker side runs (``examples/smollm2-arithmetic.yaml``,
4 prompts x 8, 16 new tokens, T=0.7; its ``job_dict``, with no held-out evaluation but one problem
at the end), medians of steps 2..N-1. The shapes come from the model's ``config.json`` (SmolLM2:
hidden 576, intermediate 1536, 3 of 9 KV heads, the 49152 x 576 head), the token counts from the
run (the update's padded batch, the decode's rows); with LoRA the frozen base weights get no
weight gradient, so the update is ~4, not 6, FLOPs per parameter and token.

    uv run --no-sync python bench/bench_step_floor.py [--threads 1,2] [--steps 30] [--quick]
    uv run --no-sync python bench/bench_step_floor.py --model smollm2 --threads 2 --steps 6
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

from _common import (
    load_snapshot,
    matmul_flops,
    parse_args,
    print_table,
    set_threads,
    wait_for_idle,
    write_results,
)


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


def model_shapes(model_dir: Path) -> dict[str, Any]:
    """The linear shapes of a Llama-style model, from its ``config.json``."""
    import json

    c = json.loads((Path(model_dir) / "config.json").read_text())
    return {"hidden": c["hidden_size"], "inner": c["intermediate_size"], "layers": c["num_hidden_layers"],
            "kv_share": c.get("num_key_value_heads", c["num_attention_heads"]) / c["num_attention_heads"],
            "vocab": c["vocab_size"]}


def model_shaped_rate(update_tokens: int, decode_rows: int, shapes: dict[str, Any], *, head: bool = False) -> dict[str, float]:
    """The matmul rate at the model's shapes: attention projections and the MLP (and with ``head``
    the vocabulary head), at the update's token count and at one decode step's rows. The two
    ``mean`` rows weigh each shape by its share of the model's weights (q and o hidden x hidden, k
    and v ``kv_share`` of that, the MLP's three hidden x inner, the head vocab x hidden)."""
    h, inner, vocab = shapes["hidden"], shapes["inner"], shapes["vocab"]
    weights = [shapes["layers"] * (2 + 2 * shapes["kv_share"]) * h * h, shapes["layers"] * 3.0 * h * inner]
    dims = [h, inner] + ([vocab] if head else [])
    if head:
        weights.append(float(vocab * h))
    rates: dict[str, float] = {}
    for phase, rows in (("update", update_tokens), ("decode", decode_rows)):
        got = [linear_rate(rows, h, d, repeats=5 if d == vocab else 30) for d in dims]
        rates.update({f"{phase} {rows}x{h}x{d}": r for d, r in zip(dims, got, strict=True)})
        rates[f"mean (FLOP-weighted, {phase} shapes)"] = sum(weights) / sum(w / r for w, r in zip(weights, got, strict=True))
    return rates


def run(threads: int, job: dict[str, Any], *, count: bool) -> list[dict[str, float]]:
    """``job``'s GRPO steps; per step the wall time, the update's batch tokens, the sampled tokens
    and (with ``count``) the FLOPs of each phase."""
    from torch.utils.flop_counter import FlopCounterMode

    import tinker_algos.training.trainer as trainer_mod
    from tinker_algos.run.job import train

    set_threads(threads)
    counter = FlopCounterMode(display=False) if count else None
    spent = {"update_s": 0.0, "update_flops": 0.0, "update_tokens": 0.0}
    originals = {k: getattr(trainer_mod.Trainer, k) for k in ("forward_backward", "optim_step")}

    def wrap(fn: Any) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            if len(a) > 1 and hasattr(a[1], "tokens_B_T"):  # forward_backward(self, batch, ...)
                spent["update_tokens"] += float(a[1].tokens_B_T.size)
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
    seen = {"update_s": 0.0, "update_flops": 0.0, "update_tokens": 0.0, "flops": 0.0}

    class Callbacks:
        def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
            total = float(counter.get_total_flops()) if counter else 0.0
            row = {
                "step_s": float(metrics["time/step_s"]), "rollout_s": float(metrics.get("time/rollout_s", 0.0)),
                "update_s": spent["update_s"] - seen["update_s"],
                "flops": total - seen["flops"], "update_flops": spent["update_flops"] - seen["update_flops"],
                "update_tokens": spent["update_tokens"] - seen["update_tokens"],
                "new_tokens": float(metrics.get("rollout/new_tokens", 0.0)),
            }
            row["rollout_flops"] = row["flops"] - row["update_flops"]
            seen.update(update_s=spent["update_s"], update_flops=spent["update_flops"], update_tokens=spent["update_tokens"], flops=total)
            per_step.append(row)

    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp, counter or contextlib.nullcontext():
        try:
            status = train(job, run_dir=Path(tmp) / "run", callbacks=Callbacks()).status
        finally:
            for k, fn in originals.items():
                setattr(trainer_mod.Trainer, k, fn)
    if status != "completed":
        raise RuntimeError(f"the run ended {status!r}")
    return per_step


def tiny_job(model_dir: Path, steps: int, threads: int) -> dict[str, Any]:
    """The ``issue31`` preset's job (``bench_vs_trl.py``), no held-out evaluation."""
    from bench_vs_trl import opentinker_job

    job = opentinker_job(model_dir, 0, steps, 0, 0, 0, stop="eos")
    for key in ("eval_every", "eval_size"):
        job["algorithm"].pop(key)
    return job


def smollm2_job(steps: int, threads: int) -> dict[str, Any]:
    """``bench_vs_trl_smollm2.py``'s OpenTinker job, seed 0; one held-out problem at the end only."""
    from bench_vs_trl_smollm2 import job_dict

    return job_dict(0, steps, 0, 1, threads)


def median_of(rows: list[dict[str, float]], key: str, skip: int = 2) -> float:
    steady = rows[skip:-1] or rows
    return statistics.median(r[key] for r in steady)


def main() -> None:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--model", choices=("tiny", "smollm2"), default="tiny",
                       help="tiny: the issue31 preset (default); smollm2: SmolLM2-135M-Instruct, LoRA r=16 (issue 46)")
    extra.add_argument("--steps", type=int, default=None, help="GRPO steps per run (default 30; 8 with --quick)")
    extra.add_argument("--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "opentinker-bench-sft")
    ns, rest = extra.parse_known_args()
    args = parse_args(__doc__.splitlines()[0], rest)
    steps = ns.steps or (8 if args.quick else 30)
    small = ns.model == "tiny"
    skip = 2 if small else 1  # the first steps warm up; the last is not timed either way
    if steps < skip + 2:
        raise SystemExit(f"--steps {steps}: at least {skip + 2} (the first {skip} warm up, the last is left out)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sft_steps = 0
    if small:
        from bench_vs_trl import sft_warm_start

        sft_steps = 20 if args.quick else 250
        model_dir = ns.model_dir / f"sft{sft_steps}"
        if not (model_dir / "config.json").is_file():
            sft_warm_start(model_dir, sft_steps)
    else:
        from tinker_algos.model.model_files import resolve_model

        model_dir = Path(resolve_model(smollm2_job(steps, 1)["model"]["name"]))
    shapes = model_shapes(model_dir)
    cases = []
    for threads in args.threads:
        set_threads(threads)
        job = tiny_job(model_dir, steps, threads) if small else smollm2_job(steps, threads)
        busy = wait_for_idle(args)
        before = load_snapshot()
        peaks = [matmul_flops(2048, repeats=3 if args.quick else 5, warmup=1)["gflops"]]
        counted = run(threads, job, count=True)
        keys = ("flops", "rollout_flops", "update_flops", "update_tokens", "new_tokens")
        flops = {k: median_of(counted, k, skip) for k in keys}
        decode_rows = int(job["rollout"]["prompts_per_step"] * job["rollout"]["group_size"])
        update_tokens = int(flops["update_tokens"]) if not small else int(flops["update_flops"] / 6 / 1e6) or 1
        shaped_runs = [model_shaped_rate(update_tokens, decode_rows, shapes, head=not small)]
        timed = run(threads, job, count=False)
        if not small:  # on a shared machine one measurement can land on a busy second: measure again, keep the best
            peaks.append(matmul_flops(2048, repeats=5, warmup=1)["gflops"])
            shaped_runs.append(model_shaped_rate(update_tokens, decode_rows, shapes, head=True))
        peak = max(peaks)
        shaped = {k: max(r[k] for r in shaped_runs) for k in shaped_runs[0]}
        # the same step of both runs did the same work (the seed): its time over its own FLOPs at the peak
        paired = [t["step_s"] / (c["flops"] / peak / 1e9) for t, c in zip(timed, counted, strict=True)][skip:-1]
        wall = {k: median_of(timed, k, skip) for k in ("step_s", "rollout_s", "update_s")}
        rate, decode_rate = shaped["mean (FLOP-weighted, update shapes)"], shaped["mean (FLOP-weighted, decode shapes)"]
        cases.append({
            "model": ns.model, "threads": threads, "steps": steps, "shapes": shapes, "peak_gflops": peak, "model_shaped_gflops": shaped,
            "peak_gflops_measured": peaks, "model_shaped_gflops_measured": shaped_runs, "cpu_busy_waited": busy,
            "step_over_peak_floor_paired": {"min": min(paired), "median": statistics.median(paired), "max": max(paired)},
            "flops_per_step": flops, "seconds_per_step": wall,
            "achieved_gflops": flops["flops"] / wall["step_s"] / 1e9,
            "rollout_achieved_gflops": flops["rollout_flops"] / wall["rollout_s"] / 1e9,
            "update_achieved_gflops": flops["update_flops"] / wall["update_s"] / 1e9,
            "floor_at_peak_s": flops["flops"] / peak / 1e9, "floor_at_model_shapes_s": flops["flops"] / rate / 1e9,
            # each phase at its own shapes' rate: the rollout's FLOPs at the decode rows', the update's at its tokens'
            "floor_at_phase_shapes_s": flops["rollout_flops"] / decode_rate / 1e9 + flops["update_flops"] / rate / 1e9,
            "per_step_timed": timed, "per_step_counted": counted, "load_before": before, "load_after": load_snapshot(),
        })
    rows = []
    for c in cases:
        f, w = c["flops_per_step"], c["seconds_per_step"]
        rows.append([
            c["threads"], f"{w['step_s'] * 1e3:.0f}", f"{w['rollout_s'] * 1e3:.0f} / {w['update_s'] * 1e3:.0f}",
            f"{f['flops'] / 1e9:.2f} ({f['rollout_flops'] / 1e9:.2f} / {f['update_flops'] / 1e9:.2f})",
            f"{c['achieved_gflops']:.1f} ({c['rollout_achieved_gflops']:.1f} / {c['update_achieved_gflops']:.1f})",
            f"{c['peak_gflops']:.1f}",
            f"{c['model_shaped_gflops']['mean (FLOP-weighted, update shapes)']:.1f} / {c['model_shaped_gflops']['mean (FLOP-weighted, decode shapes)']:.1f}",
            f"{c['floor_at_peak_s'] * 1e3:.1f} ({w['step_s'] / c['floor_at_peak_s']:.1f}x)",
            f"{c['floor_at_model_shapes_s'] * 1e3:.1f} ({w['step_s'] / c['floor_at_model_shapes_s']:.1f}x)",
            f"{c['floor_at_phase_shapes_s'] * 1e3:.1f} ({w['step_s'] / c['floor_at_phase_shapes_s']:.1f}x)",
            f"{c['load_before']['loadavg_1m']:.2f} / {c['load_after']['loadavg_1m']:.2f}",
        ])
    print_table(f"GRPO step against the floor ({ns.model}), medians of steps {skip + 1}..{steps - 1}",
                ["threads", "step ms", "rollout / update ms", "GFLOP per step (rollout / update)",
                 "achieved GFLOP/s (rollout / update)", "matmul 2048 GFLOP/s", "matmul at model shapes (update / decode)",
                 "floor at peak ms (step over it)", "floor at update shapes ms (step over it)",
                 "floor, each phase at its shapes ms (step over it)", "load 1m before/after"], rows)
    name = "step_floor" if small else "step_floor_smollm2"
    write_results(args, name, {"model": ns.model, "steps": steps, "sft_steps": sft_steps, "cases": cases})


if __name__ == "__main__":
    main()
