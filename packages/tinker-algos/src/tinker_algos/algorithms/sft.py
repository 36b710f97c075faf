"""Supervised fine-tuning (``algorithm.name: sft``).

Examples come from ``algorithm.data`` (a JSONL file of ``{"prompt": ..., "completion": ...}``
records) or, without a file, from the environment: each example is a demonstration the env gives
through ``info["target"]``, the ideal next action (arithmetic, echo and other single-turn envs
give it on reset; a multi-turn env such as ``math/calculator-v0`` gives it after each turn too).
The episode is replayed with those actions until it ends or the env gives no target; a one-turn
demonstration is the first observation and its target, a longer one is rendered turn by turn
exactly as the rollout renders a sampled episode (:class:`tinker_algos.rollout.PolicyTurns`: the
env's tools, tool messages, the template's deltas), and trains on every action's tokens. The
loss is ``cross_entropy`` on the completion (action) tokens only.

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
from tinker_algos.rollout import PolicyTurns
from tinker_algos.sampler import SampledSequence
from tinker_core.contracts import Batch, StepResult, Trajectory
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
        """``(prompt, completion, system_prompt)`` of the step's examples from ``algorithm.data``."""
        system = stage_system_prompt(self.ctx)
        return [(p, c, system) for p, c in shuffled_batch(self.ctx, self.records or [], step)]

    def demonstrations(self, step: int) -> list[Trajectory]:
        """The step's trajectories replayed from the env's ``info["target"]`` actions."""
        factory = self.ctx.require_env()
        out = []
        for i in range(self.ctx.algo.batch_size):
            env = factory()
            try:
                out.append(self.demonstration(env, self.ctx.step_seed(step, "sft", i)))
            finally:
                env.close()
        return out

    def demonstration(self, env: object, seed: int) -> Trajectory:
        """One episode of ``env`` played with its targets (see the module docstring)."""
        obs, info = env.reset(seed=seed)  # type: ignore[attr-defined]
        system = stage_system_prompt(self.ctx, env)
        spec = getattr(env, "env_spec", None)
        tools = tuple(getattr(spec, "tools", ()) or ())
        target = _target(info)
        if target is None or not isinstance(obs, str | list):
            raise ConfigError([f"env {self.ctx.stage.env.id!r} gives no text info['target'] on reset; sft from an env needs one (or use algorithm.data)"])
        turns = PolicyTurns(self.ctx.renderer, system)
        turns.tools = tools
        turns.observe(turns.render(obs))
        first = (obs, target)
        for _ in range(max(int(getattr(spec, "max_turns", 1) or 1), 1)):
            action = turns.act(self._scripted(target))
            result = StepResult.of(env.step(action))  # type: ignore[attr-defined]
            turns.rewarded(result.reward)
            target = _target(result.info)
            if result.terminated or result.truncated or target is None:
                break
            turns.observe(turns.render(result.observation))
        if turns.fsm.num_turns == 1 and isinstance(first[0], str) and not tools:
            return example_trajectory(self.ctx.policy.tokenizer, first[0], first[1], self.ctx.renderer, system)
        return turns.finish(group_id=0)

    def _scripted(self, text: str) -> SampledSequence:
        """``text`` as if the policy had sampled it: its tokens, then the template's end of turn."""
        renderer = self.ctx.renderer
        ids = list(self.ctx.policy.tokenizer.encode(text, add_special_tokens=False))
        if renderer is not None and renderer.chat and renderer.end_of_turn_id is not None:
            ids.append(int(renderer.end_of_turn_id))
        return SampledSequence([], ids, [0.0] * len(ids), [0.0] * len(ids), "stop_id", text)

    def step(self, step: int) -> dict[str, float]:
        tok, renderer = self.ctx.policy.tokenizer, self.ctx.renderer
        if self.records is None:
            trajs = self.demonstrations(step)
        else:
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


def _target(info: object) -> str | None:
    """``info["target"]`` when it is text."""
    target = info.get("target") if isinstance(info, dict) else None
    return target if isinstance(target, str) else None
