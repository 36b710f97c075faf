"""Trainer throughput: tokens/s of ``forward_backward`` + ``optim_step`` and the FLOP/s achieved.

One training step = ``Trainer.forward_backward(batch, "cross_entropy")`` then
``Trainer.optim_step()`` (AdamW, gradient clipping at 1.0, fp32 on the CPU) on a batch of
32 sequences x 64 tokens (every token real, every token but the first trained). Measured for
full fine-tuning and for LoRA (r=8, alpha=16, all linear layers), on the ``tiny`` preset and on
wider variants of it built locally (``mid-256``, ``mid-512``), at each ``--threads`` count.

FLOPs are counted per step from the model's shapes (see :func:`step_flops`) and compared with
this machine's fp32 matmul rate, measured here with the same thread count.

    uv run --no-sync python bench/bench_trainer.py [--threads 1,2] [--quick]
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from _common import (
    MID_CONFIGS,
    BenchArgs,
    build_variant,
    matmul_flops,
    model_shape,
    parse_args,
    print_table,
    set_threads,
    time_calls,
    wait_for_idle,
    write_results,
)

BATCH = 32
SEQ_LEN = 64
LORA_RANK = 8
# 7 linear maps per layer: q, k, v, o (attention) and gate, up, down (MLP)
LORA_TARGETS = "all-linear"


def step_flops(shape: dict[str, Any], *, batch: int, seq_len: int, lora_rank: int | None) -> dict[str, float]:
    """FLOPs of one training step on ``batch x seq_len`` tokens (multiply-add = 2 FLOPs).

    Forward FLOPs per token:

    * linear maps: ``2 * (L * P_layer + V * d)`` -- ``P_layer`` the weights of q, k, v, o,
      gate, up, down; ``V * d`` the output head (tied to the embedding, still a matmul; the
      embedding lookup itself costs no FLOPs);
    * attention scores and the weighted sum: ``4 * L * H * head_dim * c`` with ``c`` the mean
      causal context, ``(T + 1) / 2`` (only what a causal model needs; kernels that compute the
      masked half too do more work than is counted here).

    Training: full fine-tuning = 3x forward (forward, gradients of activations, gradients of
    weights). LoRA = 2x the base forward (no weight gradients for frozen weights) + 3x the
    adapters' own ``2 * r * (in + out)`` per adapted map per token.

    Also returned: the usual ``6 * N * tokens`` estimate with ``N`` all parameters (for
    comparison; it ignores attention and over-counts LoRA).
    """
    d, L = shape["hidden_size"], shape["num_layers"]
    H, KV, hd = shape["num_heads"], shape["num_kv_heads"], shape["head_dim"]
    inter, V = shape["intermediate_size"], shape["vocab_size"]
    tokens = batch * seq_len
    shapes_layer = [  # (in, out) of each linear map in one layer
        (d, H * hd), (d, KV * hd), (d, KV * hd), (H * hd, d),
        (d, inter), (d, inter), (inter, d),
    ]
    p_layer = sum(i * o for i, o in shapes_layer)
    fwd_linear = 2.0 * (L * p_layer + V * d) * tokens
    mean_ctx = (seq_len + 1) / 2
    fwd_attn = 4.0 * L * H * hd * mean_ctx * tokens
    fwd = fwd_linear + fwd_attn
    if lora_rank is None:
        train = 3.0 * fwd
    else:
        lora_fwd = 2.0 * lora_rank * L * sum(i + o for i, o in shapes_layer) * tokens
        train = 2.0 * fwd + 3.0 * lora_fwd
    return {
        "tokens": float(tokens),
        "forward_flops": fwd,
        "forward_attention_flops": fwd_attn,
        "train_flops": train,
        "six_n_flops": 6.0 * shape["params_total"] * tokens,
    }


def make_batch(vocab_size: int, seed: int = 0) -> Any:
    """32 x 64 random token ids (special ids excluded), all real, loss on every token."""
    import numpy as np

    from tinker_core.contracts import Batch

    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, vocab_size, size=(BATCH, SEQ_LEN), dtype=np.int64)
    ones = np.ones((BATCH, SEQ_LEN), dtype=np.float32)
    return Batch(
        tokens_B_T=tokens,
        attention_mask_B_T=ones,
        loss_mask_B_T=ones.copy(),
        sampler_logprobs_B_T=np.zeros_like(ones),
        rewards_B=np.zeros(BATCH, dtype=np.float32),
        group_ids_B=np.arange(BATCH),
    )


def bench_one(path: str, mode: str, *, warmup: int, repeats: int) -> dict[str, Any]:
    """Time training steps of a freshly loaded model (``mode``: ``full`` or ``lora``)."""
    from tinker_algos.model.models import LoraSpec, PolicyModel
    from tinker_algos.training.trainer import Trainer, TrainerConfig

    policy = PolicyModel.load(path, device="cpu", precision="fp32")
    shape = model_shape(policy.module)
    config = TrainerConfig(optimizer="adamw", lr=1e-4, max_grad_norm=1.0)
    if mode == "lora":
        trainer = Trainer(
            policy, config, adapter="bench", lora=LoraSpec(rank=LORA_RANK, target_modules=LORA_TARGETS), adapter_seed=0
        )
    else:
        trainer = Trainer(policy, config)
    batch = make_batch(shape["vocab_size"])

    def step() -> None:
        trainer.forward_backward(batch, "cross_entropy")
        trainer.optim_step()

    timing = time_calls(step, warmup=warmup, repeats=repeats)
    flops = step_flops(shape, batch=BATCH, seq_len=SEQ_LEN, lora_rank=LORA_RANK if mode == "lora" else None)
    med = timing.median
    return {
        "mode": mode,
        "shape": shape,
        "trainable_params": sum(p.numel() for p in trainer.params),
        "step": timing.summary(),
        "tokens_per_s": flops["tokens"] / med,
        "flops": flops,
        "achieved_gflops": flops["train_flops"] / med / 1e9,
        "achieved_gflops_6n": flops["six_n_flops"] / med / 1e9,
    }


def main(args: BenchArgs) -> None:
    models: dict[str, str] = {"tiny": "tiny"}
    tmp = tempfile.TemporaryDirectory(prefix="opentinker-bench-")
    if not args.quick:
        for name, overrides in MID_CONFIGS.items():
            models[name] = str(build_variant(Path(tmp.name) / name, **overrides))
    runs: list[dict[str, Any]] = []
    peaks: dict[int, dict[str, Any]] = {}
    sizes = (1024,) if args.quick else (1024, 2048)

    def matmuls(when: str) -> list[dict[str, Any]]:
        wait_for_idle(args)
        return [{**matmul_flops(n, repeats=3 if args.quick else 5), "when": when} for n in sizes]

    for threads in args.threads:
        got = set_threads(threads)
        mm = matmuls("before")
        block: list[dict[str, Any]] = []
        for name, path in models.items():
            big = name == "mid-512"
            for mode in ("full", "lora"):
                busy = wait_for_idle(args)
                r = bench_one(
                    path, mode,
                    warmup=1 if big or args.quick else 2,
                    repeats=2 if args.quick else (3 if big else 7),
                )
                r.update(model=name, threads=got, cpu_busy_before=busy)
                block.append(r)
                print(
                    f"threads={got} {name:8s} {mode:4s} {r['tokens_per_s']:9,.0f} tok/s "
                    f"step {r['step']['median_s'] * 1e3:7.1f} ms  {r['achieved_gflops']:6.1f} GFLOP/s  "
                    f"CPU/wall {r['step']['cpu_per_wall']:.2f}",
                    flush=True,
                )
        mm += matmuls("after")
        # the machine's rate: the best of the matmul runs before and after the training runs
        # (a disturbed matmul run can only be slower)
        peaks[threads] = {"threads": got, "matmul": mm, "peak_gflops": max(m["gflops"] for m in mm)}
        for r in block:
            r["fraction_of_matmul"] = r["achieved_gflops"] / peaks[threads]["peak_gflops"]
        runs += block
    tmp.cleanup()

    print_table(
        "fp32 matmul (torch.matmul, n x n, 2n^3 FLOPs)",
        ["threads", "n", "when", "GFLOP/s (median)", "ms/call", "CPU/wall"],
        [
            [t, m["n"], m["when"], m["gflops"], m["median_s"] * 1e3, m["cpu_per_wall"]]
            for t, p in peaks.items() for m in p["matmul"]
        ],
    )
    print_table(
        f"Trainer step, batch {BATCH} x {SEQ_LEN} tokens, AdamW (median)",
        ["model", "params", "mode", "trainable", "threads", "step ms", "tokens/s", "GFLOP/s", "of matmul", "CPU/wall"],
        [
            [
                r["model"], r["shape"]["params_total"], r["mode"], r["trainable_params"], r["threads"],
                r["step"]["median_s"] * 1e3, r["tokens_per_s"], r["achieved_gflops"],
                f"{100 * r['fraction_of_matmul']:.0f}%", r["step"]["cpu_per_wall"],
            ]
            for r in runs
        ],
    )
    write_results(
        args,
        "trainer",
        {
            "batch": BATCH,
            "seq_len": SEQ_LEN,
            "optimizer": "adamw",
            "lora": {"rank": LORA_RANK, "alpha": 16, "target_modules": LORA_TARGETS},
            "flop_count": (
                "per step: full = 3 x forward, LoRA = 2 x base forward + 3 x adapter forward; forward = "
                "2 x (linear weights incl. output head) x tokens + 4 x L x H x head_dim x mean causal "
                "context x tokens (see step_flops in bench_trainer.py); 6N given for comparison"
            ),
            "matmul_peak": {str(k): v for k, v in peaks.items()},
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main(parse_args(__doc__.splitlines()[0]))
