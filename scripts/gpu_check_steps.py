"""The measuring steps of the GPU check, one per process: ``python scripts/gpu_check_steps.py STEP --json OUT``.

``scripts/gpu_check.py`` runs each under its own timeout and gathers the JSON each writes into
one report. Steps (``--device cuda --model smollm2-135m-instruct`` on a GPU; the self-test runs
them on the CPU with the tiny model):

* ``environment`` -- torch, CUDA and cuDNN versions, the devices, bf16 support.
* ``precision`` -- one GRPO step (``importance_sampling`` loss, group-normalised advantages) from
  the same weights and the same sampled batch in ``fp32``, ``bf16-mixed`` and ``fp16-mixed``:
  the loss, grad norm and the trainer's logprobs of each precision against fp32's, and how far
  the logprobs of the updated weights moved from fp32's updated ones.
* ``sampler`` -- ``tinker_algos.sampling.sampler.sample`` vs ``model.generate`` new tokens/s on
  chat-formatted arithmetic prompts (``bench/bench_sampler_real.py``'s calls), medians.
* ``vllm`` -- against a running ``vllm serve`` (``--vllm-url``): a LoRA adapter trained one step
  by the learner, synced through the vllm engine (``sync_engine``: the engine checks the adapter
  is listed, its hash and a probe logprob against the learner's, and fails otherwise), then
  vLLM's samples scored by the learner: the per-token logprob gap. The adapter is left in
  ``--adapter-dir`` for the engine's real-server conformance test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed")


def environment(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    devices = []
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        p = torch.cuda.get_device_properties(i)
        devices.append({"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1), "capability": f"{p.major}.{p.minor}"})
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "cuda_available": torch.cuda.is_available(),
        "devices": devices,
        "bf16_supported": bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported()),
    }


def _synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _grpo_batch(model: str, device: str, prompts: int, group: int, new_tokens: int) -> Any:
    """A GRPO batch sampled once by the fp32 policy: ``group`` samples of each prompt; reward =
    the share of digits in the completion (a deterministic stand-in: this step compares numerics,
    not learning), advantages normalised within each group."""
    import numpy as np

    from tinker_algos.model.device import seed_everything
    from tinker_algos.model.models import PolicyModel
    from tinker_algos.sampling.sampler import SamplingParams, sample
    from tinker_algos.sampling.samples import sequences_to_batch
    from tinker_env_math.arithmetic import arithmetic_problems

    seed_everything(0)
    policy = PolicyModel.load(model, device=device, precision="fp32")
    texts = [p.prompt for p in arithmetic_problems(prompts, 0, split="train")]
    out = sample(policy, texts, SamplingParams(max_new_tokens=new_tokens, temperature=1.0, n=group, seed=0),
                 chat=policy.tokenizer.chat_template is not None)
    rewards = []
    for g in out:
        r = np.array([sum(c.isdigit() for c in s.text) / max(1, len(s.text)) for s in g], dtype=np.float32)
        rewards.append((r - r.mean()) / (r.std() + 1e-6))
    batch = sequences_to_batch(out, pad_token_id=policy.pad_token_id)
    batch.advantages_B_T = np.concatenate(rewards)[:, None] * batch.loss_mask_B_T
    return batch


def precision(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from tinker_algos.model.models import PolicyModel
    from tinker_algos.training.trainer import Trainer, TrainerConfig

    batch = _grpo_batch(args.model, args.device, args.prompts, args.group, args.new_tokens)
    mask = (np.asarray(batch.loss_mask_B_T) * np.asarray(batch.attention_mask_B_T)) > 0
    runs: dict[str, dict[str, Any]] = {}
    for prec in PRECISIONS:
        policy = PolicyModel.load(args.model, device=args.device, precision=prec)
        trainer = Trainer(policy, TrainerConfig(lr=1e-5, max_grad_norm=1.0))
        t0 = time.perf_counter()
        metrics, logprobs = trainer.forward_backward(batch, "importance_sampling", return_logprobs=True)
        metrics.update(trainer.optim_step())
        _synchronize(policy.device)
        step_s = time.perf_counter() - t0
        runs[prec] = {"metrics": metrics, "logprobs": logprobs, "after": trainer.forward(batch), "step_s": step_s}
        del trainer, policy
    base = runs["fp32"]
    result: dict[str, Any] = {
        "model": args.model, "device": args.device, "rows": int(batch.tokens_B_T.shape[0]),
        "trained_tokens": int(mask.sum()), "loss": "importance_sampling", "precisions": {},
    }
    for prec, run in runs.items():
        m = run["metrics"]
        diff = np.abs(run["logprobs"] - base["logprobs"])[mask]
        moved = np.abs(run["after"] - base["after"])[mask]
        result["precisions"][prec] = {
            "loss": m["loss"], "grad_norm": m["grad_norm"], "skipped": m["skipped"], "grad_scale": m.get("grad_scale"),
            "step_s": round(run["step_s"], 4),
            "loss_abs_diff_vs_fp32": abs(m["loss"] - base["metrics"]["loss"]),
            "grad_norm_rel_diff_vs_fp32": abs(m["grad_norm"] - base["metrics"]["grad_norm"]) / max(base["metrics"]["grad_norm"], 1e-12),
            "logprob_max_abs_diff_vs_fp32": float(diff.max()),
            "logprob_mean_abs_diff_vs_fp32": float(diff.mean()),
            "updated_logprob_mean_abs_diff_vs_fp32": float(moved.mean()),
        }
    # an fp16 step may be skipped by its scaler (an overflow at the initial scale 65536 is normal:
    # it is recorded with the halved grad_scale); any other skip or a non-finite loss fails the step
    bad = [p for p, r in result["precisions"].items()
           if not np.isfinite(r["loss"]) or (r["skipped"] and p != "fp16-mixed")]
    if bad:
        raise SystemExit(f"precision: a non-finite loss or a skipped step under {', '.join(bad)}")
    return result


def sampler(args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_sampler_real import chat_prompts, make_calls

    from tinker_algos.model.models import PolicyModel

    policy = PolicyModel.load(args.model, device=args.device)
    policy.module.eval()
    rows = []
    for batch in args.batches:
        calls = make_calls(policy, chat_prompts(policy.tokenizer, batch), max_new_tokens=args.new_tokens)
        times: dict[str, list[float]] = {"sample": [], "generate": []}
        for fn in calls.values():  # one warm-up each
            fn()
        for _ in range(args.repeats):  # interleaved
            for name, fn in calls.items():
                t0 = time.perf_counter()
                fn()
                _synchronize(policy.device)
                times[name].append(time.perf_counter() - t0)
        tok = {k: batch * args.new_tokens / statistics.median(v) for k, v in times.items()}
        rows.append({"batch": batch, "sample_tok_s": round(tok["sample"], 1), "generate_tok_s": round(tok["generate"], 1),
                     "ratio": round(tok["sample"] / tok["generate"], 3)})
    return {"model": args.model, "device": str(policy.device), "precision": policy.spec.precision,
            "new_tokens": args.new_tokens, "repeats": args.repeats, "runs": rows}


def vllm(args: argparse.Namespace) -> dict[str, Any]:
    import shutil

    import numpy as np

    from tinker_algos.distributed.engine_sync import sync_engine
    from tinker_algos.model.models import LoraSpec, PolicyModel
    from tinker_algos.sampling.sampler import SamplingParams
    from tinker_algos.sampling.samples import SampledSequence, sequences_to_batch
    from tinker_algos.training.checkpoint import save_adapter
    from tinker_algos.training.trainer import Trainer, TrainerConfig
    from tinker_engine_vllm.engine import VLLMEngine, VLLMOptions

    batch = _grpo_batch(args.model, args.device, 4, 2, 16)
    policy = PolicyModel.load(args.model, device=args.device, precision="fp32")
    trainer = Trainer(policy, TrainerConfig(lr=1e-3), adapter="policy", lora=LoraSpec(rank=8), adapter_seed=0)
    trainer.forward_backward(batch, "importance_sampling")
    trainer.optim_step()  # the adapter now changes the model: a zero-effect load would show
    run_dir = Path(args.adapter_dir).parent / "vllm-run"
    engine = VLLMEngine(VLLMOptions(url=args.vllm_url, probe_tolerance=0.05), job_name="gpucheck")
    t0 = time.perf_counter()
    sync_engine(engine, policy, "policy", 1, run_dir)  # raises WeightSyncError naming the pitfall
    sync_s = time.perf_counter() - t0
    prompts = [list(r[: int(m.sum())]) for r, m in zip(batch.tokens_B_T, batch.attention_mask_B_T, strict=True)][:4]
    prompts = [p[: max(4, len(p) // 2)] for p in prompts]
    gens = [g for group in engine.generate(prompts, SamplingParams(max_new_tokens=16, temperature=1.0, seed=0)) for g in group]
    seqs = [SampledSequence(g.prompt_tokens, g.tokens, g.raw_logprobs, g.raw_logprobs, g.stop_reason, g.text) for g in gens]
    scored = trainer.forward(sequences_to_batch(seqs, pad_token_id=policy.pad_token_id))
    gaps = np.concatenate([
        np.abs(scored[i, len(s.prompt_tokens) : len(s.prompt_tokens) + len(s.tokens)] - np.asarray(s.raw_logprobs))
        for i, s in enumerate(seqs)
    ])
    if Path(args.adapter_dir).exists():
        shutil.rmtree(args.adapter_dir)
    save_adapter(policy, "policy", Path(args.adapter_dir))
    health = engine.health()
    engine.close()
    return {"url": args.vllm_url, "model": args.model, "sync_s": round(sync_s, 3), "adapters": list(health.adapters),
            "weight_version": health.weight_version, "sampled_tokens": int(gaps.size),
            "logprob_max_abs_diff_vs_learner": float(gaps.max()), "logprob_mean_abs_diff_vs_learner": float(gaps.mean())}


STEPS = {"environment": environment, "precision": precision, "sampler": sampler, "vllm": vllm}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=sorted(STEPS))
    p.add_argument("--json", required=True, help="where to write the step's result")
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vllm-url", help="vllm step: the server's base URL")
    p.add_argument("--adapter-dir", help="vllm step: where to leave the synced adapter")
    args = p.parse_args(argv)
    result = STEPS[args.step](args)
    Path(args.json).write_text(json.dumps(result, indent=2, default=float))
    print(json.dumps(result, indent=2, default=float))


if __name__ == "__main__":
    main()
