"""Sampler throughput on a real chat model: ``sample`` vs ``model.generate`` on SmolLM2-135M-Instruct.

Prompts: ``math/arithmetic-v0`` problems (``arithmetic_problems(n, seed=0, split="train")``)
rendered with the tokenizer's chat template (system prompt, ``<|im_start|>user``, generation
prompt): 36 tokens each, so a batch is left-padded only where lengths differ. Both sides get
the same ``PolicyModel`` module and the same token ids:

* ``sample`` -- ``SamplingParams(max_new_tokens=32, temperature=1, stop_at_eos=False, seed=0)``
  (no stop ids, no stop strings: every row makes 32 tokens);
* ``generate`` -- ``module.generate`` on the same ids left-padded, ``do_sample=True,
  temperature=1, top_k=0, top_p=1, min_new_tokens=max_new_tokens=32`` (EOS suppressed until 32
  tokens, so it also makes exactly 32 per row).

Batches of 16 and 64 prompts, at each ``--threads`` count; the two run interleaved (ours, generate, ours, generate, ...) so
load from other processes on a shared machine hits both; medians and the ratio of medians.

Threads (``--threads-part``): one ``sample`` call (16 x 32) with torch's default intra-op
threads and with 1, alone and beside 1 or 2 busy-loop processes (each a Python ``while True``).

    uv run --no-sync python bench/bench_sampler_real.py [--quick] [--threads-part]
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Any

from _common import load_snapshot, parse_args, print_table, set_threads, write_results

MODEL = "smollm2-135m-instruct"
BATCHES = (16, 64)
MAX_NEW_TOKENS = 32


def chat_prompts(tokenizer: Any, n: int) -> list[list[int]]:
    from tinker_algos.model.tokenizer import encode_prompt
    from tinker_env_math.arithmetic import arithmetic_problems

    return [encode_prompt(tokenizer, p.prompt, chat=True) for p in arithmetic_problems(n, 0, split="train")]


def make_calls(policy: Any, ids_rows: list[list[int]], *, max_new_tokens: int = MAX_NEW_TOKENS) -> dict[str, Any]:
    """``sample`` and ``generate`` on the same left-padded ids (on the policy's device), each
    making exactly ``max_new_tokens`` per row (used by ``scripts/gpu_check_steps.py`` too)."""
    import torch

    from tinker_algos.sampling.sampler import SamplingParams, sample

    B, L, pad = len(ids_rows), max(len(r) for r in ids_rows), policy.pad_token_id
    input_ids = torch.full((B, L), pad, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    for b, r in enumerate(ids_rows):
        input_ids[b, L - len(r) :] = torch.tensor(r)
        attn[b, L - len(r) :] = 1
    input_ids, attn = input_ids.to(policy.device), attn.to(policy.device)
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, stop_at_eos=False, seed=0)

    def ours() -> None:
        n = sum(len(s.tokens) for g in sample(policy, ids_rows, params) for s in g)
        assert n == B * max_new_tokens, n

    def hf() -> None:
        with torch.no_grad():
            out = policy.module.generate(
                input_ids=input_ids, attention_mask=attn, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, pad_token_id=pad,
            )
        assert out.shape == (B, L + max_new_tokens), out.shape

    return {"sample": ours, "generate": hf}


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def versus(policy: Any, repeats: int, batches: tuple[int, ...]) -> list[dict[str, Any]]:
    rows = []
    for B in batches:
        calls = make_calls(policy, chat_prompts(policy.tokenizer, B))
        for fn in calls.values():  # warm-up
            fn()
        load_before = load_snapshot()
        secs: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(repeats):
            for name, fn in calls.items():
                secs[name].append(timed(fn))
        load_after = load_snapshot()
        tps = {k: B * MAX_NEW_TOKENS / statistics.median(v) for k, v in secs.items()}
        r = {
            "batch": B, "max_new_tokens": MAX_NEW_TOKENS, "repeats": repeats,
            "sample_s": secs["sample"], "generate_s": secs["generate"],
            "sample_tok_s": tps["sample"], "generate_tok_s": tps["generate"],
            "ratio": tps["sample"] / tps["generate"],
            "load_before": load_before, "load_after": load_after,
        }
        print(f"batch {B}: sample {tps['sample']:.0f} tok/s, generate {tps['generate']:.0f} tok/s, "
              f"ratio {r['ratio']:.2f}", flush=True)
        rows.append(r)
    return rows


def _busy() -> None:  # pragma: no cover - a child process
    while True:
        pass


def threads_part(policy: Any, repeats: int) -> list[dict[str, Any]]:
    calls = make_calls(policy, chat_prompts(policy.tokenizer, 16))
    calls["sample"]()  # warm-up
    default = os.cpu_count() or 1
    rows = []
    for busy in (0, 1, 2):
        procs = [mp.Process(target=_busy, daemon=True) for _ in range(busy)]
        for p in procs:
            p.start()
        try:
            for threads in sorted({default, 1}, reverse=True):
                set_threads(threads)
                secs = [timed(calls["sample"]) for _ in range(repeats)]
                rows.append({"busy_processes": busy, "threads": threads, "sample_s": secs,
                             "sample_tok_s": 16 * MAX_NEW_TOKENS / statistics.median(secs)})
                print(f"busy={busy} threads={threads}: {rows[-1]['sample_tok_s']:.0f} tok/s", flush=True)
        finally:
            for p in procs:
                p.terminate()
                p.join()
    set_threads(default)
    return rows


def main() -> None:
    want_threads = "--threads-part" in sys.argv
    argv = [a for a in sys.argv[1:] if a != "--threads-part"]
    args = parse_args(__doc__.splitlines()[0], argv)
    from tinker_algos.model.models import PolicyModel

    policy = PolicyModel.load(MODEL, device="cpu", precision="fp32")
    policy.module.eval()
    rows = []
    for n in args.threads:
        threads = set_threads(n)
        rows += [{"threads": threads, **r} for r in versus(policy, 1 if args.quick else 3, (16,) if args.quick else BATCHES)]
    print_table(
        f"{MODEL}, {MAX_NEW_TOKENS} new tokens, T=1 (medians, interleaved)",
        ["threads", "batch", "sample tok/s", "generate tok/s", "ratio", "loadavg before/after"],
        [[r["threads"], r["batch"], r["sample_tok_s"], r["generate_tok_s"], r["ratio"],
          f"{r['load_before']['loadavg_1m']:.2f}/{r['load_after']['loadavg_1m']:.2f}"] for r in rows],
    )
    payload: dict[str, Any] = {"model": MODEL, "runs": rows}
    if want_threads:
        payload["threads_part"] = threads_part(policy, 1 if args.quick else 2)
    write_results(args, "sampler_real", payload)


if __name__ == "__main__":
    main()
