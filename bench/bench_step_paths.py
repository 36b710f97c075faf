"""The SmolLM2 GRPO step with and without the re-scoring pass, interleaved.

``rescore``: before each update a no-grad ``Trainer.forward`` at the sampling temperature scores
the batch again (the trainer's logprobs for ``kl/sample_train``), as GRPO did before the loss's
own pass divided the logits by the sampling temperature. ``reuse``: the loss's pass gives them
(no second forward). Each repeat runs both, alternating which goes first, in fresh child
processes of :mod:`bench_step_real` (4 prompts x 8 samples, LoRA r=16, 16 new tokens,
temperature 0.7, through the chat template); the report is the median step time of each path,
its min-max, and the per-pair ratio.

    uv run --no-sync python bench/bench_step_paths.py [--quick] [--threads 2]
"""

from __future__ import annotations

import os
import statistics

from _common import parse_args, print_table, write_results
from bench_step_real import PHASES, run_case

REPEATS = 3


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    threads = max(args.threads) if args.threads else (os.cpu_count() or 1)
    repeats = 1 if args.quick else REPEATS
    runs: dict[str, list[dict]] = {"rescore": [], "reuse": []}
    for i in range(repeats):
        order = ("rescore", "reuse") if i % 2 == 0 else ("reuse", "rescore")
        for path in order:
            row = run_case(threads, None, 0, path)
            runs[path].append(row)
            m = row["mean"]
            print(f"repeat {i} {path}: {m['wall_s']:.2f} s/step " + ", ".join(f"{p} {m[p]:.2f}" for p in PHASES), flush=True)
    med = {p: statistics.median(r["mean"]["wall_s"] for r in rows) for p, rows in runs.items()}
    ratios = [a["mean"]["wall_s"] / b["mean"]["wall_s"] for a, b in zip(runs["rescore"], runs["reuse"], strict=True)]
    print_table(
        f"GRPO step on smollm2-135m-instruct at {threads} threads, {repeats} interleaved repeats",
        ["path", "median s/step", "min", "max", *(f"{p} (median)" for p in PHASES)],
        [[p, med[p], min(r["mean"]["wall_s"] for r in rows), max(r["mean"]["wall_s"] for r in rows),
          *(statistics.median(r["mean"][ph] for r in rows) for ph in PHASES)] for p, rows in runs.items()],
    )
    print(f"speed-up (rescore / reuse): median {statistics.median(ratios):.2f}x, pairs {', '.join(f'{r:.2f}' for r in ratios)}")
    write_results(args, "step_paths", {"model": "smollm2-135m-instruct", "threads": threads, "runs": runs,
                                       "median_s": med, "ratios": ratios})


if __name__ == "__main__":
    main()
