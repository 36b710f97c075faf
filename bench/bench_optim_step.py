"""``Trainer.optim_step`` with torch's fused AdamW kernel against the per-parameter loop, interleaved.

One call = the gradient norm, clipping at 1.0 and the AdamW update (lr 5e-4, betas (0.9, 0.99),
eps 1e-8, no weight decay: the GRPO-vs-TRL settings) over the ``tiny`` preset's 38 parameter
tensors, with fixed gradients. ``fused``: :func:`tinker_algos.builtins.optimizers.adamw` with ``fused: true`` (the
fused kernel on the CPU); ``loop``: the default (torch's per-parameter path: about ten small ops
per tensor). Per round, both are timed (10 calls each,
the median), alternating; the report is the median over rounds with its min-max, and the ratio,
at each ``--threads`` count, with the load before and after (issue 31).

    uv run --no-sync python bench/bench_optim_step.py [--threads 1,2] [--quick]
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from _common import load_snapshot, parse_args, print_table, set_threads, write_results

CALLS = 10


def measure(threads: int, rounds: int) -> dict[str, Any]:
    import torch

    from tinker_algos.model.models import PolicyModel
    from tinker_algos.training.trainer import Trainer, TrainerConfig

    set_threads(threads)
    policy = PolicyModel.load("tiny", device="cpu", precision="fp32")
    config = TrainerConfig(optimizer="adamw", lr=5e-4, weight_decay=0.0, max_grad_norm=1.0,
                           optimizer_config={"betas": (0.9, 0.99), "eps": 1e-8})
    fused = TrainerConfig(optimizer="adamw", lr=5e-4, weight_decay=0.0, max_grad_norm=1.0,
                          optimizer_config={"betas": (0.9, 0.99), "eps": 1e-8, "fused": True})
    trainers = {"fused": Trainer(policy, fused), "loop": Trainer(policy, config)}
    torch.manual_seed(0)
    grads = [torch.randn_like(p) * 1e-3 for p in trainers["fused"].params]
    seconds: dict[str, list[float]] = {k: [] for k in trainers}
    before = load_snapshot()
    for r in range(rounds):
        for name in (list(trainers) if r % 2 == 0 else list(reversed(trainers))):
            t = trainers[name]
            calls = []
            for _ in range(CALLS):
                for p, g in zip(t.params, grads, strict=True):
                    p.grad = g.clone()
                t._pending_calls = 1  # gradients "accumulated" (set directly above)
                t0 = time.perf_counter()
                t.optim_step()
                calls.append(time.perf_counter() - t0)
            seconds[name].append(statistics.median(calls))
    out: dict[str, Any] = {"threads": threads, "load_before": before, "load_after": load_snapshot(),
                           "fused_kernel": bool(trainers["fused"].optimizer.param_groups[0]["fused"])}
    for name, xs in seconds.items():
        out[name] = {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs), "rounds": len(xs)}
    out["loop_over_fused"] = out["loop"]["median_s"] / out["fused"]["median_s"]
    return out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    rounds = 4 if args.quick else 15
    cases = [measure(t, rounds) for t in args.threads]
    print_table(
        f"Trainer.optim_step (norm, clip, AdamW) on tiny: median (min-max) ms of {rounds} interleaved rounds",
        ["threads", "fused", "loop", "loop / fused", "load 1m before/after"],
        [[c["threads"], f"{c['fused']['median_s'] * 1e3:.2f} ({c['fused']['min_s'] * 1e3:.2f}-{c['fused']['max_s'] * 1e3:.2f})",
          f"{c['loop']['median_s'] * 1e3:.2f} ({c['loop']['min_s'] * 1e3:.2f}-{c['loop']['max_s'] * 1e3:.2f})",
          f"{c['loop_over_fused']:.2f}x", f"{c['load_before']['loadavg_1m']:.2f} / {c['load_after']['loadavg_1m']:.2f}"]
         for c in cases],
    )
    write_results(args, "optim_step", {"calls_per_round": CALLS, "rounds": rounds, "cases": cases})


if __name__ == "__main__":
    main()
