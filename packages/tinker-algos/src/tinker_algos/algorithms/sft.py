"""Supervised fine-tuning (``algorithm.name: sft``).

Examples come from ``algorithm.data`` (a JSONL file of ``{"prompt": ..., "completion": ...}``
records, or of ``{"messages": [...]}`` conversations: an optional ``system`` message, then
``user`` and ``assistant`` messages in turn, ending with an ``assistant`` one; or a parquet file,
``save_to_disk`` folder or Hub dataset, read by :mod:`tinker_algos.hub.data_sources`) or, without data,
from the environment: each example is a demonstration the env gives
through ``info["target"]``, the ideal next action (arithmetic, echo and other single-turn envs
give it on reset; a multi-turn env such as ``math/calculator-v0`` gives it after each turn too),
or, for an agent program (``agent/program-v0`` with ``env.kwargs.demo``), the program's own
episodes run against the rollout proxy answering each call with the program's demonstration
(:func:`tinker_algos.rollout.agent_program.agent_demonstrations`): the prompts are the agent's
calls exactly as the proxy renders them, the trained tokens the demonstrated replies.
The episode is replayed with those actions until it ends or the env gives no target; a one-turn
demonstration is the first observation and its target, a longer one is rendered turn by turn
exactly as the rollout renders a sampled episode (:class:`tinker_algos.rollout.PolicyTurns`: the
env's tools, tool messages, the template's deltas), and trains on every action's tokens. A
``messages`` record is rendered the same way, each ``user`` message an observation and each
``assistant`` message an action, so a multi-turn warm start (a dialogue game's scripted games,
say) is the very token sequence a multi-turn rollout of those replies samples. The
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

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeAlias

from tinker_algos.algorithms.base import Algorithm, StageContext
from tinker_algos.algorithms.common import (
    example_trajectory,
    shuffled_batch,
    stage_system_prompt,
)
from tinker_algos.algorithms.update import optim_metrics
from tinker_algos.hub.data_sources import read_records
from tinker_algos.rollout.episodes import PolicyTurns
from tinker_algos.sampling.sampler import SampledSequence
from tinker_core.config import DataSource
from tinker_core.contracts import Batch, StepResult, Trajectory
from tinker_core.errors import ConfigError

Messages: TypeAlias = tuple[dict[str, str], ...]
"""A conversation record: ``{"role": ..., "content": ...}`` messages, checked by :func:`check_messages`."""

SFTRecord: TypeAlias = tuple[str, str] | Messages
"""One example of ``algorithm.data``: ``(prompt, completion)`` or a conversation."""


SFT_FIELDS = (("prompt", "completion"), ("messages",))
"""What an SFT record holds: a prompt and a completion, or a conversation."""


def load_sft_records(data: DataSource | str | Path, where: str = "algorithm.data") -> list[SFTRecord]:
    """The examples of ``data`` (a JSONL path or a :class:`DataSource`): ``(prompt, completion)``
    pairs, or :data:`Messages` for ``{"messages": [...]}`` records; errors name the record and the fix."""
    records: list[SFTRecord] = []
    for label, rec in read_records(data, where, '{"prompt": ..., "completion": ...} or {"messages": [...]} records', SFT_FIELDS):
        if isinstance(rec, dict) and "messages" in rec:
            records.append(check_messages(rec["messages"], f"{where}: {label}"))
        elif not isinstance(rec, dict) or not isinstance(rec.get("prompt"), str) or not isinstance(rec.get("completion"), str):
            raise ConfigError([f"{where}: {label} needs string fields 'prompt' and 'completion', or a 'messages' list"])
        else:
            records.append((rec["prompt"], rec["completion"]))
    return records


def check_messages(messages: Any, where: str) -> Messages:
    """``messages`` as a conversation SFT can replay: an optional first ``system`` message, then
    ``user`` and ``assistant`` messages in turn (a user one first), the last an ``assistant`` one;
    each a dict with string ``role`` and ``content``. ``ConfigError`` naming ``where``, the message
    and the fix otherwise."""
    if not isinstance(messages, list) or not messages:
        raise ConfigError([f"{where}: 'messages' must be a non-empty list of {{'role': ..., 'content': ...}} objects"])
    out: list[dict[str, str]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ConfigError([f"{where}: messages[{i}] must be an object with string 'role' and 'content'"])
        out.append({"role": m["role"], "content": m["content"]})
    body = out[1:] if out[0]["role"] == "system" else out
    for i, m in enumerate(body, len(out) - len(body)):
        want = "user" if (i - (len(out) - len(body))) % 2 == 0 else "assistant"
        if m["role"] != want:
            raise ConfigError([f"{where}: messages[{i}] has role {m['role']!r} where {want!r} is due: after an optional "
                               "first 'system' message, 'user' and 'assistant' messages take turns, a 'user' one first"])
    if not body or body[-1]["role"] != "assistant":
        raise ConfigError([f"{where}: the last message must be an 'assistant' one (the reply SFT trains on)"])
    return tuple(out)


class SFT(Algorithm):
    name = "sft"

    def __init__(self, ctx: StageContext) -> None:
        super().__init__(ctx)
        self.records = load_sft_records(ctx.algo.data, f"{ctx.where}.data") if ctx.algo.data else None
        if self.records is None and ctx.env_factory is None:
            raise ConfigError([f"stages[{ctx.stage_index}]: sft needs 'algorithm.data' (a JSONL or parquet file, a save_to_disk folder or {{hub: DATASET_ID}}) or an 'env' that gives info['target']"])
        self.loss = ctx.algo.loss or "cross_entropy"
        self.demo_metrics: dict[str, float] = {}  # an agent program's demonstrations: their mean reward

    def examples(self, step: int) -> list[Trajectory]:
        """The step's examples from ``algorithm.data``, as trajectories."""
        tok, renderer, system = self.ctx.policy.tokenizer, self.ctx.renderer, stage_system_prompt(self.ctx)
        return [self.conversation(rec, system) if _is_messages(rec) else example_trajectory(tok, rec[0], rec[1], renderer, system)
                for rec in shuffled_batch(self.ctx, self.records or [], step)]

    def conversation(self, messages: Messages, system: str) -> Trajectory:
        """A ``messages`` record replayed as a rollout renders it: each ``user`` message observed,
        each ``assistant`` message acted (and trained on); its own ``system`` message, if any,
        instead of ``system``."""
        if messages[0]["role"] == "system":
            system, messages = messages[0]["content"], messages[1:]
        turns = PolicyTurns(self.ctx.renderer, system)
        for user, assistant in zip(messages[::2], messages[1::2], strict=True):
            turns.observe(turns.render(user["content"]))
            turns.act(self._scripted(assistant["content"]))
            turns.rewarded(0.0)
        return turns.finish(group_id=0)

    def demonstrations(self, step: int) -> list[Trajectory]:
        """The step's trajectories replayed from the env's ``info["target"]`` actions (an agent
        program's: its episodes with demonstrated replies)."""
        if self.ctx.plays_agent_program:
            return self.agent_demonstrations(step)
        factory = self.ctx.require_env()
        out = []
        for i in range(self.ctx.algo.batch_size):
            env = factory()
            try:
                out.append(self.demonstration(env, self.ctx.step_seed(step, "sft", i)))
            finally:
                env.close()
        return out

    def agent_demonstrations(self, step: int) -> list[Trajectory]:
        """The step's agent-program episodes played with demonstrations, as trajectories (every
        segment of each); ``sft/demo_reward_mean`` is their mean reward (1.0 when the
        demonstrations solve their tasks). A RuntimeError naming the first failure when none finished."""
        from tinker_algos.rollout.agent_program import agent_demonstrations

        seeds = [self.ctx.step_seed(step, "sft", i) for i in range(self.ctx.algo.batch_size)]
        result = agent_demonstrations(self.ctx, seeds)
        trajs = [e.trajectory for e in result.episodes if e.trajectory is not None]
        if not trajs:
            raise RuntimeError(f"{self.ctx.where}: no demonstrated agent episode finished ({dict(result.errors)}; first: "
                               f"{result.failures[0] if result.failures else '?'}); fix the agent or its demo function")
        self.demo_metrics = {"sft/demo_reward_mean": result.metrics(prefix="demo")["demo/reward_mean"]}
        return trajs

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
        trajs = self.demonstrations(step) if self.records is None else self.examples(step)
        batch = Batch.from_trajectories(trajs, pad_token_id=self.ctx.policy.pad_token_id)
        fb = self.ctx.trainer.forward_backward(batch, self.loss, agg=self.ctx.algo.aggregation, **self.ctx.algo.loss_config)
        opt = self.ctx.trainer.optim_step()
        return {
            **self.demo_metrics,
            "losses/total": fb["loss"],
            "losses/sft": fb["loss"],
            **optim_metrics(opt),
            "data/tokens": float(fb["num_tokens"]),
        }


def _is_messages(record: Sequence[Any]) -> bool:
    """Whether an :data:`SFTRecord` is a conversation (its items are messages, not strings)."""
    return bool(record) and isinstance(record[0], dict)


def _target(info: object) -> str | None:
    """``info["target"]`` when it is text."""
    target = info.get("target") if isinstance(info, dict) else None
    return target if isinstance(target, str) else None
