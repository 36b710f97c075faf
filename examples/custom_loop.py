"""A complete GRPO loop on math/arithmetic-v0, written only against the client SDK (no torch).

Start a scheduler on this machine, then run the loop against it::

    $ opentinker scheduler start &                 # 127.0.0.1:50051
    $ python examples/custom_loop.py --sft-steps 150 --steps 40

Every step: sample ``--group-size`` answers to each of ``--prompts`` problems with the current
weights, score them with the environment (reward 1 for the right number), turn rewards into
group-normalised advantages (GRPO), train with the ``importance_sampling`` loss and apply one
Adam step. An optional supervised warm start (``--sft-steps``, ``cross_entropy`` on the correct
answers) gives the tiny random model something RL can improve on. Held-out greedy accuracy is
printed every ``--eval-every`` steps.
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Sequence

import tinker_core
from tinker_client.training import AdamParams, Datum, SamplingParams, ServiceClient, TrainingClient

ENV_ID = "math/arithmetic-v0"
ENV_KWARGS = {"digits": 2, "ops": ["+"]}


def group_advantages(rewards_G: Sequence[float], eps: float = 1e-6) -> list[float]:
    """GRPO: ``(R - mean) / (std + eps)`` with the unbiased std; a constant group gets 0."""
    if len(rewards_G) < 2:
        return [0.0] * len(rewards_G)
    mean = statistics.fmean(rewards_G)
    std = statistics.stdev(rewards_G)
    return [(r - mean) / (std + eps) for r in rewards_G]


def adam(lr: float, step: int, warmup: int, args: argparse.Namespace) -> AdamParams:
    """Adam with a linear learning-rate warm-up over ``warmup`` steps (``step`` counts from 0)."""
    factor = min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
    return AdamParams(learning_rate=lr * factor, beta2=args.beta2, eps=1e-8, grad_clip_norm=args.grad_clip)


def sft_step(trainer: TrainingClient, tokenizer, seeds: Sequence[int], optim: AdamParams) -> float:
    """One supervised step on the correct answers of ``seeds``' problems; returns the mean NLL/token."""
    data = []
    for seed in seeds:
        env = tinker_core.make_env(ENV_ID, **ENV_KWARGS)
        prompt, info = env.reset(seed=seed)
        prompt_ids = tokenizer.encode(prompt)
        full = prompt_ids + tokenizer.encode(info["target"], add_special_tokens=False)
        data.append(Datum.from_sequence(full, prompt_len=len(prompt_ids)))
    out = trainer.forward_backward(data, "cross_entropy").result()
    trainer.optim_step(optim).result()
    return out.metrics["loss"] / out.metrics["num_tokens"]


def grpo_step(
    trainer: TrainingClient, tokenizer, seeds: Sequence[int], args: argparse.Namespace, optim: AdamParams
) -> dict[str, float]:
    """Rollout, rewards, advantages, importance_sampling, optim_step."""
    envs, prompts = [], []
    for seed in seeds:
        env = tinker_core.make_env(ENV_ID, **ENV_KWARGS)
        prompt, _ = env.reset(seed=seed)
        envs.append(env)
        prompts.append(tokenizer.encode(prompt))
    params = SamplingParams(max_tokens=args.max_tokens, temperature=1.0, stop=["\n"])
    groups = trainer.sample(prompts, params, num_samples=args.group_size).result()

    data, rewards = [], []
    for env, prompt_ids, group in zip(envs, prompts, groups, strict=True):
        rewards_G = []
        for sample in group:
            text = tokenizer.decode(sample.tokens)
            env.reset(options={"prompt": env.problem.prompt})  # same problem, fresh episode
            _, reward, *_ = env.step(text)
            rewards_G.append(float(reward))
        rewards += rewards_G
        for sample, adv in zip(group, group_advantages(rewards_G), strict=True):
            if adv == 0.0 or not sample.tokens:
                continue  # no signal: skip (saves compute, same gradient)
            data.append(Datum.from_sequence(prompt_ids + sample.tokens, prompt_len=len(prompt_ids),
                                            advantage=adv, sampling_logprobs=sample.logprobs))
    metrics = {"reward_mean": statistics.fmean(rewards), "trained_sequences": float(len(data))}
    if data:
        fb = trainer.forward_backward(data, "importance_sampling").result()
        step = trainer.optim_step(optim).result()
        metrics.update(loss=fb.metrics["loss"], grad_norm=step.metrics.get("optim/grad_norm", 0.0))
    return metrics


def evaluate(trainer: TrainingClient, tokenizer, size: int) -> float:
    """Greedy accuracy on ``size`` held-out problems (split="test")."""
    envs, prompts = [], []
    for seed in range(size):
        env = tinker_core.make_env(ENV_ID, **ENV_KWARGS, split="test")
        prompt, _ = env.reset(seed=10_000 + seed)
        envs.append(env)
        prompts.append(tokenizer.encode(prompt))
    params = SamplingParams(max_tokens=6, temperature=0.0, stop=["\n"])
    groups = trainer.sample(prompts, params, num_samples=1).result()
    correct = 0
    for env, group in zip(envs, groups, strict=True):
        _, reward, *_ = env.step(tokenizer.decode(group[0].tokens))
        correct += reward == 1.0
    return correct / size


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--address", default="localhost:50051", help="the scheduler's host:port")
    p.add_argument("--api-key", default=None, help="tenant API key (default: $OPENTINKER_API_KEY)")
    p.add_argument("--base-model", default="tiny")
    p.add_argument("--rank", type=int, default=0, help="LoRA rank; 0 fine-tunes every weight")
    p.add_argument("--steps", type=int, default=40, help="GRPO steps")
    p.add_argument("--sft-steps", type=int, default=0, help="supervised warm-start steps first")
    p.add_argument("--sft-batch", type=int, default=64)
    p.add_argument("--sft-lr", type=float, default=3e-3)
    p.add_argument("--prompts", type=int, default=16, help="problems per GRPO step")
    p.add_argument("--group-size", type=int, default=8, help="samples per problem")
    p.add_argument("--max-tokens", type=int, default=5)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--sft-warmup", type=int, default=50, help="linear warm-up steps of the SFT learning rate")
    p.add_argument("--warmup", type=int, default=5, help="linear warm-up steps of the GRPO learning rate")
    p.add_argument("--beta2", type=float, default=0.999, help="Adam beta2 (Tinker's default is 0.95)")
    p.add_argument("--grad-clip", type=float, default=0.0, help="max global grad norm; 0 disables")
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-size", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    rng = random.Random(args.seed)
    with ServiceClient(args.address, args.api_key) as service:
        if args.rank > 0:
            trainer = service.create_lora_training_client(args.base_model, rank=args.rank, seed=args.seed)
        else:
            trainer = service.create_training_client(args.base_model, seed=args.seed)
        with trainer:
            tokenizer = trainer.get_tokenizer()
            print(f"session {trainer.session_id}: {trainer.info.base_model}, "
                  f"{trainer.info.trainable_parameters} trainable parameters")
            for step in range(args.sft_steps):
                seeds = [rng.randrange(1 << 30) for _ in range(args.sft_batch)]
                nll = sft_step(trainer, tokenizer, seeds, adam(args.sft_lr, step, args.sft_warmup, args))
                if (step + 1) % 25 == 0 or step + 1 == args.sft_steps:
                    print(f"sft {step + 1:4d}  nll/token {nll:.3f}")
            result = {"eval/accuracy_start": evaluate(trainer, tokenizer, args.eval_size)}
            print(f"held-out accuracy before GRPO: {result['eval/accuracy_start']:.3f}")
            for step in range(1, args.steps + 1):
                seeds = [rng.randrange(1 << 30) for _ in range(args.prompts)]
                metrics = grpo_step(trainer, tokenizer, seeds, args, adam(args.lr, step - 1, args.warmup, args))
                print(f"grpo {step:4d}  " + "  ".join(f"{k} {v:.3f}" for k, v in metrics.items()))
                result.update({f"train/{k}": v for k, v in metrics.items()})
                if step % args.eval_every == 0 or step == args.steps:
                    result["eval/accuracy"] = evaluate(trainer, tokenizer, args.eval_size)
                    print(f"held-out accuracy after {step} steps: {result['eval/accuracy']:.3f}")
    return result


if __name__ == "__main__":
    main()
