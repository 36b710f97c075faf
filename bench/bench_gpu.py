"""Sampling and training tokens/s on one device (CUDA when there is one); run by hand (the GPU
check, ``scripts/gpu_check.sh``, measures sampler vs ``generate`` and precisions instead).

* sampling -- ``tinker_algos.sampling.sampler.sample`` on 32 arithmetic prompts (``bench_sampler.py``'s),
  64 new tokens each, temperature 1, no early stop: new tokens/s = 32 * 64 / wall time;
* training -- ``Trainer.forward_backward(batch, "cross_entropy")`` + ``optim_step()`` (AdamW) on
  ``bench_trainer.py``'s batch of 32 x 64 tokens, full fine-tuning and LoRA (r=8, all linear
  layers): tokens/s = 2048 / wall time of the step.

Models: ``tiny`` and SmolLM2-135M-Instruct (the ``smollm2-135m-instruct`` preset; from the cache,
else fetched once). The device and precision come from ``tinker_algos.model.device.resolve_device``
(``--device auto``: CUDA with bf16 autocast when available, else the CPU in fp32).
On CUDA each timed call ends with ``torch.cuda.synchronize()``.

``--quick``: the tiny model only, 8 prompts x 16 new tokens, training steps of 8 x 16 tokens, one
repeat (a smoke run; numbers not for the docs).
Results go to ``<results>/device_<cuda|cpu>.json`` (``.quick.json`` for ``--quick``).

    uv run --no-sync python bench/bench_gpu.py [--device auto|cpu|cuda|cuda:N] [--precision auto] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from _common import BenchArgs, model_shape, parse_args, print_table, time_calls, write_results
from bench_sampler import make_prompts
from bench_trainer import LORA_RANK, LORA_TARGETS, make_batch

SAMPLE_BATCH = 32
NEW_TOKENS = 64
SMOLLM2 = "smollm2-135m-instruct"


def synced(fn: Any, device: Any) -> Any:
    """``fn`` followed by a CUDA synchronize (so the timer sees the GPU's work) on CUDA."""
    import torch

    if device.type != "cuda":
        return fn

    def call() -> None:
        fn()
        torch.cuda.synchronize(device)

    return call


def bench_model(name: str, path: str, spec: Any, *, quick: bool) -> list[dict[str, Any]]:
    from tinker_algos.model.models import LoraSpec, PolicyModel
    from tinker_algos.sampling.sampler import SamplingParams, sample
    from tinker_algos.training.trainer import Trainer, TrainerConfig
    from tinker_core.contracts import Batch

    rows: list[dict[str, Any]] = []
    policy = PolicyModel.load(path, spec=spec)
    shape = model_shape(policy.module)
    n_prompts, n_new = (8, 16) if quick else (SAMPLE_BATCH, NEW_TOKENS)
    warmup, repeats = (0, 1) if quick else (1, 5)
    prompts = make_prompts(n_prompts)
    params = SamplingParams(max_new_tokens=n_new, temperature=1.0, stop_at_eos=False, seed=0)

    def sampling() -> None:
        out = sample(policy, prompts, params, chat=False)
        n = sum(len(s.tokens) for group in out for s in group)
        if n != n_prompts * n_new:
            raise RuntimeError(f"sample produced {n} tokens, expected {n_prompts * n_new}")

    timing = time_calls(synced(sampling, spec.device), warmup=warmup, repeats=repeats)
    rows.append({"model": name, "phase": "sampling", "mode": "-", "shape": [n_prompts, n_new], "call": timing.summary(),
                 "tokens_per_s": n_prompts * n_new / timing.median})
    batch = make_batch(shape["vocab_size"])
    if quick:  # the first 8 rows, 16 tokens each
        batch = Batch(*(a[:8, :16] if a.ndim == 2 else a[:8] for a in (
            batch.tokens_B_T, batch.attention_mask_B_T, batch.loss_mask_B_T, batch.sampler_logprobs_B_T,
            batch.rewards_B, batch.group_ids_B)))
    B, T = batch.shape
    for mode in ("lora", "full"):  # LoRA first: full fine-tuning then starts from an unwrapped model
        if mode == "lora":
            trainer = Trainer(policy, TrainerConfig(optimizer="adamw", lr=1e-5, max_grad_norm=1.0), adapter="bench",
                              lora=LoraSpec(rank=LORA_RANK, target_modules=LORA_TARGETS), adapter_seed=0)
        else:
            policy.remove_adapter("bench")
            trainer = Trainer(policy, TrainerConfig(optimizer="adamw", lr=1e-5, max_grad_norm=1.0))

        def step(trainer: Any = trainer, mode: str = mode) -> None:
            metrics = trainer.forward_backward(batch, "cross_entropy")
            trainer.optim_step()
            if metrics["nonfinite"]:
                raise RuntimeError(f"{name} {mode}: the loss was not finite ({metrics['loss']})")

        timing = time_calls(synced(step, spec.device), warmup=warmup, repeats=repeats)
        rows.append({"model": name, "phase": "training", "mode": mode, "shape": [B, T], "call": timing.summary(),
                     "tokens_per_s": B * T / timing.median})
    for r in rows:
        r.update(params=shape["params_total"], device=str(spec.device), precision=spec.precision)
        print(f"{name:22s} {r['phase']:8s} {r['mode']:4s} {r['tokens_per_s']:12,.0f} tok/s "
              f"({r['call']['median_s'] * 1e3:.1f} ms per call)", flush=True)
    return rows


def main(args: BenchArgs, device: str, precision: str) -> None:
    import torch

    from tinker_algos.model.device import resolve_device

    spec = resolve_device(device, precision)
    info: dict[str, Any] = {"spec": spec.to_dict(), "cuda_available": torch.cuda.is_available()}
    if spec.device.type == "cuda":
        info.update(gpu=torch.cuda.get_device_name(spec.device), cuda=torch.version.cuda)
    else:
        torch.set_num_threads(max(args.threads))
    print(f"device {spec.device}, precision {spec.precision}", flush=True)
    models = {"tiny": "tiny"}
    skipped: dict[str, str] = {}
    if not args.quick:
        from tinker_algos.hub import fetch_preset

        try:
            models[SMOLLM2] = str(fetch_preset(SMOLLM2))
        except Exception as e:  # no network and no cached copy: report it, bench the rest
            skipped[SMOLLM2] = f"{type(e).__name__}: {e}"
            print(f"skipping {SMOLLM2}: {skipped[SMOLLM2]}", flush=True)
    rows = [r for name, path in models.items() for r in bench_model(name, path, spec, quick=args.quick)]
    print_table(
        f"tokens/s on {info.get('gpu', spec.device)} ({spec.precision}; sampling: prompts x new tokens, "
        f"training: a step of rows x tokens; median of {rows[0]['call']['repeats']})",
        ["model", "params", "phase", "mode", "shape", "ms per call", "tokens/s"],
        [[r["model"], r["params"], r["phase"], r["mode"], " x ".join(map(str, r["shape"])), r["call"]["median_s"] * 1e3,
          r["tokens_per_s"]] for r in rows],
    )
    write_results(args, f"device_{spec.device.type}", {"device": info, "skipped": skipped, "runs": rows})


if __name__ == "__main__":
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (tinker_algos.model.device)")
    pre.add_argument("--precision", default="auto", help="auto, fp32, bf16-mixed, fp16-mixed or bf16")
    known, rest = pre.parse_known_args(sys.argv[1:])
    if "-h" in rest or "--help" in rest:
        pre.print_help()
    main(parse_args(__doc__.splitlines()[0], rest), known.device, known.precision)
