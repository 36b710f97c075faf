"""Supervised fine-tuning (``algorithm.name: sft``).

Examples come from ``algorithm.data`` (a JSONL file of ``{"prompt": ..., "completion": ...}``
records) or, without a file, from the environment: each example is an episode's first
observation and the env's ``info["target"]`` (the ideal first action, which arithmetic, echo and
other single-turn envs provide). The loss is ``cross_entropy`` on the completion tokens only.

Implementation details:

1. The prompt is encoded with the tokenizer's special tokens (``<bos>``), the completion without;
   their concatenation is exactly what the sampler will later see and produce.
2. Each step draws ``batch_size`` examples: env seeds derived from ``(seed, stage, step, i)``, or
   the next slice of a per-epoch shuffled order of the file, so resume needs only the step.
3. ``micro_batch_size`` splits the step into several ``forward_backward`` calls; gradients add
   up before the single ``optim_step``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tinker_algos.algorithms.base import Algorithm, StageContext, derive_seed
from tinker_core.errors import ConfigError
from tinker_core.types import Batch, Trajectory


def load_sft_records(path: str | Path) -> list[tuple[str, str]]:
    """``(prompt, completion)`` pairs from a JSONL file; errors name the line and the fix."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError([f"algorithm.data: file {p} does not exist"])
    records: list[tuple[str, str]] = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError([f"algorithm.data: {p}:{n} is not JSON ({e.msg})"]) from None
        if not isinstance(rec, dict) or not isinstance(rec.get("prompt"), str) or not isinstance(rec.get("completion"), str):
            raise ConfigError([f"algorithm.data: {p}:{n} needs string fields 'prompt' and 'completion'"])
        records.append((rec["prompt"], rec["completion"]))
    if not records:
        raise ConfigError([f"algorithm.data: {p} holds no records"])
    return records


def example_trajectory(tokenizer: Any, prompt: str, completion: str) -> Trajectory:
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=True)
    completion_ids = tokenizer.encode(completion, add_special_tokens=False)
    tokens = [*prompt_ids, *completion_ids]
    mask = [0.0] * len(prompt_ids) + [1.0] * len(completion_ids)
    return Trajectory(tokens, [0.0] * len(tokens), mask, [0.0])


class SFT(Algorithm):
    name = "sft"

    def __init__(self, ctx: StageContext) -> None:
        super().__init__(ctx)
        self.records = load_sft_records(ctx.algo.data) if ctx.algo.data else None
        if self.records is None and ctx.env_factory is None:
            raise ConfigError([f"stages[{ctx.stage_index}]: sft needs 'algorithm.data' (a JSONL file) or an 'env' that gives info['target']"])
        self.loss = ctx.algo.loss or "cross_entropy"

    def examples(self, step: int) -> list[tuple[str, str]]:
        bs = self.ctx.algo.batch_size
        if self.records is not None:
            out = []
            for k in range(step * bs, (step + 1) * bs):
                epoch, i = divmod(k, len(self.records))
                order = np.random.default_rng(derive_seed(self.ctx.job.seed, self.ctx.stage_index, "epoch", epoch)).permutation(len(self.records))
                out.append(self.records[int(order[i])])
            return out
        factory = self.ctx.require_env()
        out = []
        for i in range(bs):
            env = factory()
            try:
                obs, info = env.reset(seed=self.ctx.step_seed(step, "sft", i))
            finally:
                env.close()
            target = info.get("target") if isinstance(info, dict) else None
            if not isinstance(obs, str) or not isinstance(target, str):
                raise ConfigError([f"env {self.ctx.stage.env.id!r} gives no text info['target'] on reset; sft from an env needs one (or use algorithm.data)"])
            out.append((obs, target))
        return out

    def step(self, step: int) -> dict[str, float]:
        tok = self.ctx.policy.tokenizer
        trajs = [example_trajectory(tok, p, c) for p, c in self.examples(step)]
        batch = Batch.from_trajectories(trajs, pad_token_id=self.ctx.policy.pad_token_id)
        fb = self.ctx.trainer.forward_backward(batch, self.loss, agg=self.ctx.algo.aggregation, **self.ctx.algo.loss_config)
        opt = self.ctx.trainer.optim_step()
        return {
            "losses/total": fb["loss"],
            "losses/sft": fb["loss"],
            "optim/grad_norm": opt["grad_norm"],
            "optim/lr": opt["lr"],
            "optim/skipped_steps": float(opt["skipped_steps"]),
            "data/tokens": float(fb["num_tokens"]),
        }
