"""Peak memory of one GRPO training pass (``Trainer.forward_backward`` + ``optim_step``), case by case.

Each case is a fresh child process that loads the model, builds a batch of the shape named below
(random token ids: memory does not depend on them), and runs one ``forward_backward``
(``importance_sampling``, token-mean, temperature 0.7, advantages of +-1 on every trained token,
so no row is skipped) and one ``optim_step``. It reports the process's peak resident set over
the pass (:class:`tinker_algos.records.memory.PeakWatch`: the kernel's ``VmHWM``, reset as the
pass starts) and the resident set just before it (model loaded, batch built). The parent polls the
child's resident set and stops it past ``--limit`` GiB (the machine is shared): such a case is
reported as ``> limit``.

Shapes (rows x tokens, trained tokens per row):

* ``tiny``: the README's GRPO step, 32 prompts x 8 = 256 rows x 14 tokens (9 prompt, 4 answer +
  eos), the tiny preset (101-word vocabulary).
* ``smollm2-single``: ``examples/smollm2-arithmetic.yaml``'s step, 4 prompts x 8 = 32 rows x 56
  tokens (40 of chat-template prompt, 16 new), SmolLM2-135M-Instruct (49,152 words).
* ``smollm2-calculator``: ``examples/smollm2-calculator.yaml``'s GRPO step at its longest, 4
  prompts x 8 = 32 rows x 400 tokens: a 160-token prompt (system message with the tool, the
  question) shared by each group's 8 rows, then 3 turns of 40 sampled tokens (trained) and a
  40-token reply (not trained): 120 trained tokens a row.

Each shape with LoRA r=16 (alpha 32, all linear layers, as the examples) and full fine-tuning,
with the head route (``chunked_logprobs``, the default) and the full logits, and for the
calculator with ``micro_batch_size`` 8 and unset; ``--cases`` adds activation checkpointing
(``algorithm.activation_checkpointing``) with a field ``ckpt`` and glibc's fixed mmap threshold
(``model.release_memory``) with a field ``release``.

    uv run --no-sync python bench/bench_memory.py [--quick] [--limit 12] [--only smollm2-calculator]
    uv run --no-sync python bench/bench_memory.py --cases smollm2-calculator:lora:head:0,smollm2-calculator:lora:logits:8

``--saved JSON`` instead lists what autograd keeps for backward in one micro-batch's pass, by
the saved tensors' last dimension (``{"shape": ..., "lora": true, "chunked": true, "rows": 8,
"threads": 1}``): where the memory of the pass goes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _common import BENCH_DIR, load_snapshot, machine_info, print_table

SHAPES = {
    # name: (model, prompts, group, prompt tokens, [(sampled, reply), ...] turns)
    "tiny": ("tiny", 32, 8, 9, [(5, 0)]),
    "smollm2-single": ("smollm2-135m-instruct", 4, 8, 40, [(16, 0)]),
    "smollm2-calculator": ("smollm2-135m-instruct", 4, 8, 160, [(40, 40), (40, 40), (40, 40)]),
}


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch

    from tinker_algos.model.allocator import release_freed_memory
    from tinker_algos.model.models import LoraSpec, PolicyModel, resolve_model
    from tinker_algos.records.memory import GIB, PeakWatch
    from tinker_algos.training.trainer import Trainer, TrainerConfig
    from tinker_core.contracts import Batch

    torch.set_num_threads(spec["threads"])
    if spec.get("release"):
        release_freed_memory()
    model, prompts, group, prompt_len, turns = SHAPES[spec["shape"]]
    policy = PolicyModel.load(resolve_model(model), device="cpu", precision="fp32")
    vocab = policy.model.get_input_embeddings().weight.shape[0]
    g = np.random.default_rng(0)
    rows, trained = [], []
    for _ in range(prompts):
        prompt = g.integers(3, vocab, size=prompt_len).tolist()
        for _ in range(group):
            toks, mask = list(prompt), [0] * prompt_len
            for sampled, reply in turns:
                toks += g.integers(3, vocab, size=sampled + reply).tolist()
                mask += [1] * sampled + [0] * reply
            rows.append(toks)
            trained.append(mask)
    B, T = len(rows), len(rows[0])
    tokens = np.asarray(rows, dtype=np.int64)
    loss_mask = np.asarray(trained, dtype=np.float32)
    batch = Batch(
        tokens_B_T=tokens, attention_mask_B_T=np.ones((B, T), dtype=np.float32), loss_mask_B_T=loss_mask,
        sampler_logprobs_B_T=np.zeros((B, T), dtype=np.float32) - 1.0, rewards_B=np.zeros(B, dtype=np.float32),
        group_ids_B=np.arange(B) // group,
        advantages_B_T=(loss_mask * np.where(np.arange(B) % 2, 1.0, -1.0)[:, None]).astype(np.float32),
    )
    config = TrainerConfig(lr=1e-4, micro_batch_size=spec["micro_batch_size"], chunked_logprobs=spec["chunked"],
                           activation_checkpointing=spec.get("checkpointing", False))
    lora = spec["lora"]
    trainer = Trainer(
        policy, config, adapter="policy" if lora else None,
        lora=LoraSpec(rank=16, alpha=32) if lora else None, adapter_seed=0 if lora else None,
    )
    watch = PeakWatch()
    if not watch.rss:
        raise SystemExit("needs Linux's VmHWM and a writable /proc/self/clear_refs")
    i = watch.begin()
    before = watch.peek(i).bytes["rss"]
    t0 = time.perf_counter()
    trainer.forward_backward(batch, "importance_sampling", temperature=0.7)
    trainer.optim_step()
    seconds = time.perf_counter() - t0
    peak = watch.end(i).bytes["rss"]
    return {"rows": B, "tokens": T, "trained_per_row": int(loss_mask[0].sum()), "before_gib": before / GIB,
            "peak_gib": peak / GIB, "pass_s": seconds}


def saved_breakdown(spec: dict[str, Any]) -> dict[str, Any]:
    """What autograd keeps for backward in the training pass of ``spec["rows"]`` rows of the shape
    (the logprobs the loss reads, LoRA r=16 or full, through the trainer's own pass), by the
    saved tensors' last dimension: each distinct storage counted once, in GiB."""
    import numpy as np
    import torch

    from tinker_algos.model.activation_checkpointing import set_activation_checkpointing
    from tinker_algos.model.models import LoraSpec, PolicyModel, resolve_model
    from tinker_algos.training.shared_prefix import batch_logprobs

    torch.set_num_threads(spec["threads"])
    model, _prompts, group, prompt_len, turns = SHAPES[spec["shape"]]
    policy = PolicyModel.load(resolve_model(model), device="cpu", precision="fp32")
    if spec["lora"]:
        policy.add_adapter("policy", LoraSpec(rank=16, alpha=32), seed=0)
        policy.set_adapter("policy")
    module = policy.module.train()
    if spec.get("checkpointing"):
        set_activation_checkpointing(module, True)
    cfg = policy.base_model.config
    vocab = policy.model.get_input_embeddings().weight.shape[0]
    g = np.random.default_rng(0)
    prompt = g.integers(3, vocab, size=prompt_len).tolist()
    rows, trained = [], []
    for _ in range(spec["rows"]):
        toks, mask = list(prompt), [0] * prompt_len
        for sampled, reply in turns:
            toks += g.integers(3, vocab, size=sampled + reply).tolist()
            mask += [1] * sampled + [0] * reply
        rows.append(toks)
        trained.append(mask)
    tok = torch.tensor(rows)
    tr = torch.tensor(trained, dtype=torch.float32)
    names = {cfg.hidden_size: "hidden-wide", cfg.intermediate_size: "mlp-wide", vocab: "vocabulary-wide"}
    seen: dict[int, tuple[str, int]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.device.type == "cpu" and t.numel() > 0 and not isinstance(t, torch.nn.Parameter):
            key = t.untyped_storage().data_ptr()
            size = t.untyped_storage().nbytes()
            kind = names.get(t.shape[-1], f"last dim {t.shape[-1]}")
            if size > seen.get(key, ("", 0))[1]:
                seen[key] = (kind, size)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lp = batch_logprobs(module, tok, torch.ones_like(tr), tr, temperature=0.7, only_trained=True, chunked=spec["chunked"])
    del lp
    by: dict[str, float] = {}
    for kind, size in seen.values():
        by[kind] = by.get(kind, 0.0) + size / (1 << 30)
    params = {n: p for n, p in module.named_parameters()}
    weights = sum(p.numel() * p.element_size() for p in params.values()) / (1 << 30)
    return {"rows": spec["rows"], "tokens": tok.shape[1], "saved_gib": by, "saved_total_gib": sum(by.values()), "weights_gib": weights,
            "group": group}


def rss_gib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / (1 << 20)
    except (OSError, ValueError):
        pass
    return 0.0


def run_case(spec: dict[str, Any], limit_gib: float) -> dict[str, Any]:
    """One case in a fresh process, stopped past ``limit_gib`` of resident memory."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", json.dumps(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=BENCH_DIR,
    )
    stopped = threading.Event()
    highest = [0.0]

    def guard() -> None:
        while proc.poll() is None:
            highest[0] = max(highest[0], rss_gib(proc.pid))
            if highest[0] > limit_gib:
                stopped.set()
                proc.kill()
                return
            time.sleep(0.05)

    t = threading.Thread(target=guard, daemon=True)
    t.start()
    out, err = proc.communicate()
    t.join()
    if stopped.is_set():
        return {**spec, "peak_gib": None, "stopped_above_gib": limit_gib}
    if proc.returncode != 0:
        return {**spec, "peak_gib": None, "error": err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"}
    return {**spec, **json.loads(out.strip().splitlines()[-1])}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--saved":
        # e.g. --saved '{"shape": "smollm2-calculator", "lora": true, "chunked": true, "rows": 8, "threads": 1}'
        print(json.dumps(saved_breakdown(json.loads(sys.argv[2])), indent=1))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=12.0, help="stop a case past this many GiB resident (default 12)")
    parser.add_argument("--only", default=None, help="comma-separated shapes (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="LoRA only, and no full-logits case without micro-batches")
    parser.add_argument("--cases", default=None,
                        help="comma-separated SHAPE:lora|full:head|logits:MBS[:ckpt][:release] (MBS 0: unset; ckpt: "
                             "activation checkpointing; release: model.release_memory), instead of every combination")
    parser.add_argument("--results", type=Path, default=BENCH_DIR / "results")
    ns = parser.parse_args()
    shapes = ns.only.split(",") if ns.only else list(SHAPES)
    cases = []
    for shape in shapes:
        for lora in ((True,) if ns.quick else (True, False)):
            for chunked in (True, False):
                for mbs in ((None, 8) if shape == "smollm2-calculator" else (None,)):
                    if ns.quick and not chunked and mbs is None and shape == "smollm2-calculator":
                        continue
                    cases.append({"shape": shape, "lora": lora, "chunked": chunked, "micro_batch_size": mbs, "threads": ns.threads})
    if ns.cases:
        cases = []
        for text in ns.cases.split(","):
            shape, ft, logprobs, mbs, *rest = text.split(":")
            cases.append({"shape": shape, "lora": ft == "lora", "chunked": logprobs == "head", "micro_batch_size": int(mbs) or None,
                          "checkpointing": "ckpt" in rest, "release": "release" in rest, "threads": ns.threads})
    load_start = load_snapshot()
    rows = []
    for spec in cases:
        res = run_case(spec, ns.limit)
        rows.append(res)
        print(json.dumps(res), flush=True)
    load_end = load_snapshot()
    print_table(
        "peak resident memory of one GRPO training pass (forward_backward + optim_step)",
        ["shape", "fine-tuning", "logprobs", "micro_batch_size", "activation checkpointing", "release_memory", "before GiB", "peak GiB", "pass s"],
        [[r["shape"], "LoRA r=16" if r["lora"] else "full", "head route" if r["chunked"] else "full logits",
          str(r["micro_batch_size"] or "-"), "on" if r.get("checkpointing") else "off", "on" if r.get("release") else "off", f"{r['before_gib']:.2f}" if "before_gib" in r else "-",
          f"{r['peak_gib']:.2f}" if r.get("peak_gib") is not None else (f"> {r['stopped_above_gib']:.0f}" if "stopped_above_gib" in r else r.get("error", "?")),
          f"{r['pass_s']:.1f}" if "pass_s" in r else "-"] for r in rows],
    )
    ns.results.mkdir(parents=True, exist_ok=True)
    out = ns.results / "memory.json"
    out.write_text(json.dumps({"machine": machine_info(with_torch=False), "load_start": load_start, "load_end": load_end,
                               "pid": os.getpid(), "cases": rows}, indent=1), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
