"""Supervised fine-tuning (``algorithm.name: sft``).

Examples come from ``algorithm.data`` (a JSONL file of ``{"prompt": ..., "completion": ...}``
records) or, without a file, from the environment: each example is an episode's first
observation and the env's ``info["target"]`` (the ideal first action, which arithmetic, echo and
other single-turn envs provide). The loss is ``cross_entropy`` on the completion tokens only.

Implementation details:

1. The prompt goes through the job's prompt rendering (``model.chat_template``): for a chat model
   the chat template with the env's system prompt and the generation prompt, and the completion
   ends with the template's end-of-turn token; for plain text the prompt is encoded with the
   tokenizer's special tokens (``<bos>``). Either way the concatenation is exactly what the
   sampler will later see and produce.
2. Each step draws ``batch_size`` examples: env seeds derived from ``(seed, stage, step, i)``, or
   the next slice of a per-epoch shuffled order of the file, so resume needs only the step.
3. ``micro_batch_size`` splits the step into several ``forward_backward`` calls; gradients add
   up before the single ``optim_step``.
"""

from __future__ import annotations

from pathlib import Path

from tinker_algos.algorithms.base import Algorithm, StageContext
from tinker_algos.algorithms.common import (
    example_trajectory,
    optim_metrics,
    read_jsonl,
    shuffled_batch,
    stage_system_prompt,
)
from tinker_core.contracts import Batch
from tinker_core.errors import ConfigError


def load_sft_records(path: str | Path, where: str = "algorithm.data") -> list[tuple[str, str]]:
    """``(prompt, completion)`` pairs from a JSONL file; errors name the line and the fix."""
    records = []
    for n, rec in read_jsonl(path, where, '{"prompt": ..., "completion": ...} records'):
        if not isinstance(rec, dict) or not isinstance(rec.get("prompt"), str) or not isinstance(rec.get("completion"), str):
            raise ConfigError([f"{where}: {path}:{n} needs string fields 'prompt' and 'completion'"])
        records.append((rec["prompt"], rec["completion"]))
    return records


class SFT(Algorithm):
    name = "sft"

    def __init__(self, ctx: StageContext) -> None:
        super().__init__(ctx)
        self.records = load_sft_records(ctx.algo.data, f"{ctx.where}.data") if ctx.algo.data else None
        if self.records is None and ctx.env_factory is None:
            raise ConfigError([f"stages[{ctx.stage_index}]: sft needs 'algorithm.data' (a JSONL file) or an 'env' that gives info['target']"])
        self.loss = ctx.algo.loss or "cross_entropy"

    def examples(self, step: int) -> list[tuple[str, str, str]]:
        """``(prompt, completion, system_prompt)`` of the step's examples."""
        if self.records is not None:
            system = stage_system_prompt(self.ctx)
            return [(p, c, system) for p, c in shuffled_batch(self.ctx, self.records, step)]
        factory = self.ctx.require_env()
        out = []
        for i in range(self.ctx.algo.batch_size):
            env = factory()
            try:
                obs, info = env.reset(seed=self.ctx.step_seed(step, "sft", i))
                system = stage_system_prompt(self.ctx, env)
            finally:
                env.close()
            target = info.get("target") if isinstance(info, dict) else None
            if not isinstance(obs, str) or not isinstance(target, str):
                raise ConfigError([f"env {self.ctx.stage.env.id!r} gives no text info['target'] on reset; sft from an env needs one (or use algorithm.data)"])
            out.append((obs, target, system))
        return out

    def step(self, step: int) -> dict[str, float]:
        tok, renderer = self.ctx.policy.tokenizer, self.ctx.renderer
        trajs = [example_trajectory(tok, p, c, renderer, system) for p, c, system in self.examples(step)]
        batch = Batch.from_trajectories(trajs, pad_token_id=self.ctx.policy.pad_token_id)
        fb = self.ctx.trainer.forward_backward(batch, self.loss, agg=self.ctx.algo.aggregation, **self.ctx.algo.loss_config)
        opt = self.ctx.trainer.optim_step()
        return {
            "losses/total": fb["loss"],
            "losses/sft": fb["loss"],
            **optim_metrics(opt),
            "data/tokens": float(fb["num_tokens"]),
        }
