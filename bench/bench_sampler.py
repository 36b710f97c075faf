"""Sampler throughput: new tokens/s of ``tinker_algos.sampling.sampler.sample`` vs ``model.generate``.

The same 32 arithmetic prompts (``"12+35="`` and the like, 4-6 characters plus ``<bos>``, so
the batch is left-padded) go to:

* ``sample`` -- our decode loop with a ``DynamicCache`` (``SamplingParams(stop_at_eos=False)``);
* ``generate`` -- ``model.generate`` of transformers on the same left-padded ids
  (``min_new_tokens = max_new_tokens`` so neither side stops early);
* ``sample, no cache`` -- ``sample(use_cache=False)``, the reference path that re-reads the
  whole sequence every step (tiny model only).

each greedy (temperature 0) and sampled (temperature 1, no top-k/top-p), 64 new tokens per row.
Every row produces exactly 64 tokens, so new tokens/s = 32 * 64 / wall time of the call.
The check ``greedy_identical`` records whether greedy ``sample`` and greedy ``generate`` chose
the same tokens.

    uv run --no-sync python bench/bench_sampler.py [--threads 1,2] [--quick]
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

from _common import (
    MID_CONFIGS,
    BenchArgs,
    build_variant,
    model_shape,
    parse_args,
    print_table,
    set_threads,
    time_calls,
    wait_for_idle,
    write_results,
)

BATCH = 32
MAX_NEW_TOKENS = 64


def make_prompts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.randint(0, 99)}+{rng.randint(0, 99)}=" for _ in range(n)]


def bench_model(name: str, path: str, args: BenchArgs, *, threads: int, no_cache: bool) -> list[dict[str, Any]]:
    import torch

    from tinker_algos.model.models import PolicyModel
    from tinker_algos.model.tokenizer import encode_prompt
    from tinker_algos.sampling.sampler import SamplingParams, sample

    policy = PolicyModel.load(path, device="cpu", precision="fp32")
    module = policy.module
    module.eval()
    ids_rows = [encode_prompt(policy.tokenizer, p, chat=False) for p in make_prompts(BATCH)]
    L = max(len(r) for r in ids_rows)
    pad = policy.pad_token_id
    input_ids = torch.full((BATCH, L), pad, dtype=torch.long)
    attn = torch.zeros((BATCH, L), dtype=torch.long)
    for b, r in enumerate(ids_rows):  # left padding, as sample() does
        input_ids[b, L - len(r):] = torch.tensor(r)
        attn[b, L - len(r):] = 1

    outputs: dict[str, Any] = {}

    def ours(temperature: float, use_cache: bool = True) -> Any:
        def call() -> None:
            params = SamplingParams(
                max_new_tokens=MAX_NEW_TOKENS, temperature=temperature, stop_at_eos=False, seed=0
            )
            out = sample(policy, ids_rows, params, use_cache=use_cache)
            n = sum(len(s.tokens) for group in out for s in group)
            if n != BATCH * MAX_NEW_TOKENS:
                raise RuntimeError(f"sample produced {n} tokens, expected {BATCH * MAX_NEW_TOKENS}")
            outputs[f"ours-{temperature}-{use_cache}"] = [s.tokens for group in out for s in group]
        return call

    def hf(temperature: float) -> Any:
        def call() -> None:
            kwargs: dict[str, Any] = (
                {"do_sample": False} if temperature == 0 else
                {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
            )
            with torch.no_grad():
                out = module.generate(
                    input_ids=input_ids, attention_mask=attn, max_new_tokens=MAX_NEW_TOKENS,
                    min_new_tokens=MAX_NEW_TOKENS, pad_token_id=pad, **kwargs,
                )
            if out.shape != (BATCH, L + MAX_NEW_TOKENS):
                raise RuntimeError(f"generate returned shape {tuple(out.shape)}")
            outputs[f"hf-{temperature}"] = out[:, L:].tolist()
        return call

    # the mid-size model takes ~1.5 s per call: 3 repeats keep the script near 2 minutes
    reps = 2 if args.quick else (5 if name == "tiny" else 3)
    cases: list[tuple[str, str, Any, int]] = [
        ("sample (KV cache)", "greedy", ours(0.0), reps),
        ("generate", "greedy", hf(0.0), reps),
        ("sample (KV cache)", "T=1", ours(1.0), reps),
        ("generate", "T=1", hf(1.0), reps),
    ]
    if no_cache:
        cases.append(("sample, no cache", "greedy", ours(0.0, use_cache=False), 1 if args.quick else 3))
    results = []
    for impl, decoding, call, repeats in cases:
        busy = wait_for_idle(args)
        timing = time_calls(call, warmup=1, repeats=repeats)
        r = {
            "model": name,
            "params": model_shape(module)["params_total"],
            "threads": threads,
            "impl": impl,
            "decoding": decoding,
            "batch": BATCH,
            "max_new_tokens": MAX_NEW_TOKENS,
            "prompt_len_max": L,
            "call": timing.summary(),
            "new_tokens_per_s": BATCH * MAX_NEW_TOKENS / timing.median,
            "cpu_busy_before": busy,
        }
        results.append(r)
        print(
            f"threads={threads} {name:8s} {impl:18s} {decoding:6s} {r['new_tokens_per_s']:9,.0f} new tok/s "
            f"({timing.median * 1e3:.0f} ms per call, CPU/wall {timing.summary()['cpu_per_wall']:.2f})",
            flush=True,
        )
    same = outputs["ours-0.0-True"] == outputs["hf-0.0"]
    for r in results:
        r["greedy_identical"] = same
    if no_cache:
        for r in results:
            r["no_cache_greedy_identical"] = outputs["ours-0.0-False"] == outputs["ours-0.0-True"]
    return results


def main(args: BenchArgs) -> None:
    models: dict[str, str] = {"tiny": "tiny"}
    tmp = tempfile.TemporaryDirectory(prefix="opentinker-bench-")
    if not args.quick:
        models["mid-512"] = str(build_variant(Path(tmp.name) / "mid-512", **MID_CONFIGS["mid-512"]))
    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        got = set_threads(threads)
        for name, path in models.items():
            rows += bench_model(name, path, args, threads=got, no_cache=name == "tiny")
    tmp.cleanup()
    print_table(
        f"Sampling, batch {BATCH}, {MAX_NEW_TOKENS} new tokens per row (median)",
        ["model", "threads", "implementation", "decoding", "ms per call", "new tokens/s", "CPU/wall"],
        [
            [r["model"], r["threads"], r["impl"], r["decoding"], r["call"]["median_s"] * 1e3,
             r["new_tokens_per_s"], r["call"]["cpu_per_wall"]]
            for r in rows
        ],
    )
    for name in models:
        same = next(r["greedy_identical"] for r in rows if r["model"] == name)
        print(f"{name}: greedy sample() and greedy generate() chose identical tokens: {same}")
    write_results(args, "sampler", {"batch": BATCH, "max_new_tokens": MAX_NEW_TOKENS, "runs": rows})


if __name__ == "__main__":
    main(parse_args(__doc__.splitlines()[0]))
