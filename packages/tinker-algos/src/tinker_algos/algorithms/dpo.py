"""Direct preference optimisation (``algorithm.name: dpo``), with the IPO and cDPO variants.

Pairs come from one of two places:

* **offline** -- ``algorithm.data``, a JSONL file of ``{"prompt", "chosen", "rejected"}``
  records (or a parquet file, ``save_to_disk`` folder or Hub dataset, read by
  :mod:`tinker_algos.hub.data_sources`); each step takes the next ``algorithm.batch_size`` pairs of a per-epoch shuffled order.
* **on-policy** -- without a data file, from the environment: each step samples
  ``rollout.group_size`` completions for each of ``rollout.prompts_per_step`` env tasks, scores
  them with the env (the verifier) and pairs the best with the worst of every group whose
  rewards differ (by more than ``params.min_reward_gap``).

The loss is ``algorithm.loss`` -- ``dpo`` (default), ``ipo`` or ``cdpo`` -- with ``beta`` and
``label_smoothing`` in ``loss_config``, on rows interleaved as the preference-loss contract says
(row ``2k`` chosen, ``2k + 1`` rejected). The reference is the stage's starting policy
(:class:`~tinker_algos.algorithms.common.ReferencePolicy`: the starting adapter under LoRA, a
frozen copy of the weights under full fine-tuning).

``algorithm.params`` (all optional; typed and bounded by :class:`tinker_core.config.DPOParams`):

====================  =========  =================================================================
``eval_data``         none       a JSONL of held-out pairs: ``eval/preference_accuracy``,
                                 ``eval/reward_margin`` and ``eval/preference_loss`` at each eval
``min_reward_gap``    ``0.0``    on-policy: pair best and worst only when their rewards differ by
                                 more than this
====================  =========  =================================================================

Implementation details:

1. A pair's log-ratio is summed over its response tokens (the prompt is masked): prompt and
   response are tokenized exactly as SFT does (through the chat template for a chat model, the
   response ending with its end-of-turn token).
2. Aggregation is ``seq-mean-token-mean`` unless ``algorithm.aggregation`` is set: every token of
   a pair carries the pair's loss, so this is the mean over pairs whatever the lengths.
3. ``micro_batch_size`` must be even, so that a pair never straddles two micro-batches.
4. ``dpo/accuracy`` and ``dpo/reward_margin`` come from the policy before the step's update, over
   the whole batch (implicit reward ``beta * (log pi(y) - log pi_ref(y))``).
5. On-policy pairs come from the rollout's groups (:class:`tinker_core.TrajectoryGroup`, one per
   task: its episodes reset their env with the same seed, so both responses answer one prompt);
   ties pick the earliest sample; a step without any pair makes no update (``dpo/pairs = 0``).
6. The reference copy is taken lazily, once the stage's starting weights are in place, and
   travels in the checkpoint, so a resumed run is exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tinker_core
import tinker_core.registry
from tinker_algos.algorithms.base import Algorithm, StageContext
from tinker_algos.algorithms.common import (
    ReferencePolicy,
    example_trajectory,
    resolve_loss,
    shuffled_batch,
    stage_system_prompt,
)
from tinker_algos.algorithms.update import optim_metrics
from tinker_algos.builtins.losses import preference_metrics
from tinker_algos.hub.data_sources import read_records
from tinker_algos.rollout.episodes import RolloutResult
from tinker_core.config import DataSource, DPOParams
from tinker_core.contracts import Batch, Trajectory, TrajectoryGroup
from tinker_core.errors import ConfigError, did_you_mean

PAIR_FIELDS = ("prompt", "chosen", "rejected")
DEFAULT_AGGREGATION = "seq-mean-token-mean"
EVAL_CHUNK_PAIRS = 64


@dataclass(frozen=True)
class PreferencePair:
    prompt: str
    chosen: str
    rejected: str


def load_preference_pairs(data: DataSource | str | Path, where: str = "algorithm.data") -> list[PreferencePair]:
    """Pairs from ``data`` (a JSONL path or a :class:`DataSource`) of ``{"prompt", "chosen", "rejected"}`` records.

    Raises :class:`ConfigError` naming the record and the field for a missing file, a record
    that is not an object, a field that is missing or not a non-empty string (the prompt may be
    empty), identical ``chosen`` and ``rejected``, or data without records.
    """
    pairs: list[PreferencePair] = []
    for label, rec in read_records(data, where, '{"prompt", "chosen", "rejected"} records', (PAIR_FIELDS,)):
        if not isinstance(rec, dict):
            raise ConfigError([f"{where}: {label} must be a JSON object with fields {', '.join(PAIR_FIELDS)}, got {type(rec).__name__}"])
        for field in PAIR_FIELDS:
            if field not in rec:
                hint = did_you_mean(field, [k for k in rec if k not in PAIR_FIELDS])
                raise ConfigError([f"{where}: {label} has no field {field!r}" + (f"; did you mean {hint!r}? (or map it with fields)" if hint else f" (fields: {', '.join(PAIR_FIELDS)})")])
            value = rec[field]
            if not isinstance(value, str):
                raise ConfigError([f"{where}: {label} field {field!r} must be a string, got {type(value).__name__}"])
            if field != "prompt" and not value:
                raise ConfigError([f"{where}: {label} field {field!r} is empty; every response needs at least one token"])
        if rec["chosen"] == rec["rejected"]:
            raise ConfigError([f"{where}: {label} fields 'chosen' and 'rejected' are the same text; a pair must differ"])
        pairs.append(PreferencePair(rec["prompt"], rec["chosen"], rec["rejected"]))
    return pairs


def pair_logratios(policy_logprobs_B_T: np.ndarray, ref_logprobs_B_T: np.ndarray, mask_B_T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(chosen_P, rejected_P)``: ``sum_t (log pi - log pi_ref)`` over each row's response tokens."""
    seq_B = ((np.asarray(policy_logprobs_B_T, np.float64) - np.asarray(ref_logprobs_B_T, np.float64)) * mask_B_T).sum(-1)
    return seq_B[0::2], seq_B[1::2]


def best_worst_pairs(groups: Sequence[TrajectoryGroup], min_gap: float = 0.0) -> list[tuple[Trajectory, Trajectory]]:
    """``(best, worst)`` trajectories of each group whose top and bottom rewards differ by more
    than ``min_gap``, in group order; ties go to the earliest trajectory of the group."""
    out = []
    for group in groups:
        rewards_G = [t.reward for t in group]
        if not rewards_G:
            continue
        members = range(len(rewards_G))
        best = max(members, key=lambda i: (rewards_G[i], -i))
        worst = min(members, key=lambda i: (rewards_G[i], i))
        if rewards_G[best] - rewards_G[worst] > min_gap:
            out.append((group.trajectories[best], group.trajectories[worst]))
    return out


class DPO(Algorithm):
    name = "dpo"
    default_loss = "dpo"

    def __init__(self, ctx: StageContext) -> None:
        super().__init__(ctx)
        algo, where = ctx.algo, ctx.where
        self.params: DPOParams = algo.params
        self.pairs = load_preference_pairs(algo.data, f"{where}.data") if algo.data else None
        self.eval_pairs = load_preference_pairs(self.params.eval_data, f"{where}.params.eval_data") if self.params.eval_data else None
        if self.pairs is None:
            if ctx.env_factory is None:
                raise ConfigError([f"stages[{ctx.stage_index}]: dpo needs '{where}.data' (prompt/chosen/rejected pairs: a JSONL or parquet file, a save_to_disk folder or {{hub: DATASET_ID}}) or an 'env' whose rewards rank the model's own samples"])
            if ctx.rollout_cfg.group_size < 2:
                raise ConfigError([f"rollout.group_size: on-policy dpo pairs samples of one prompt, so it needs group_size >= 2, got {ctx.rollout_cfg.group_size}"])
        self.loss = resolve_loss(ctx, "dpo", self.default_loss, "preference")
        if algo.micro_batch_size is not None and algo.micro_batch_size % 2:
            raise ConfigError([f"{where}.micro_batch_size: dpo keeps each chosen/rejected pair in one micro-batch, so it must be even, got {algo.micro_batch_size}"])
        self.aggregation = algo.aggregation if "aggregation" in algo.model_fields_set else DEFAULT_AGGREGATION
        self.beta = float(algo.loss_config.get("beta", 0.1))
        self.reference: ReferencePolicy | None = None

    def _setup(self) -> ReferencePolicy:
        if self.reference is None:
            self.reference = ReferencePolicy(self.ctx)
        return self.reference

    # ---- pairs -------------------------------------------------------------------------------
    def offline_pairs(self, step: int) -> list[PreferencePair]:
        assert self.pairs is not None
        return shuffled_batch(self.ctx, self.pairs, step)

    def pair_batch(self, pairs: list[PreferencePair]) -> Batch:
        tok, renderer, system = self.ctx.policy.tokenizer, self.ctx.renderer, stage_system_prompt(self.ctx)
        trajs = []
        for pair in pairs:
            trajs.append(example_trajectory(tok, pair.prompt, pair.chosen, renderer, system))
            trajs.append(example_trajectory(tok, pair.prompt, pair.rejected, renderer, system))
        return Batch.from_trajectories(trajs, pad_token_id=self.ctx.policy.pad_token_id)

    def collect(self, step: int) -> RolloutResult:
        return self.ctx.group_rollout(step)

    def on_policy_pairs(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """The step's rows (chosen, rejected, chosen, ...) from the rollout's groups, and metrics."""
        result = self.collect(step)
        metrics = result.metrics()
        chosen = best_worst_pairs([g.generated() for g in result.groups], self.params.min_reward_gap)
        metrics["dpo/pair_rate"] = len(chosen) / max(self.ctx.rollout_cfg.prompts_per_step, 1)
        if chosen:
            metrics["dpo/pair_reward_gap"] = float(np.mean([best.reward - worst.reward for best, worst in chosen]))
        return [t for pair in chosen for t in pair], metrics

    # ---- one step -----------------------------------------------------------------------------
    def step(self, step: int) -> dict[str, float]:
        reference = self._setup()
        if self.pairs is not None:
            batch = self.pair_batch(self.offline_pairs(step))
            metrics: dict[str, float] = {}
        else:
            rows, metrics = self.on_policy_pairs(step)
            if not rows:
                metrics.update({"dpo/pairs": 0.0, "optim/skipped_steps": float(self.ctx.trainer.skipped_steps)})
                return metrics
            batch = Batch.from_trajectories(rows, pad_token_id=self.ctx.policy.pad_token_id)
        trainer, algo = self.ctx.trainer, self.ctx.algo
        mask = batch.loss_mask_B_T * batch.attention_mask_B_T
        ref = reference.logprobs(batch)
        before = trainer.forward(batch)
        chosen_P, rejected_P = pair_logratios(before, ref, mask)
        metrics.update({f"dpo/{k}": v for k, v in preference_metrics(chosen_P, rejected_P, self.beta).items()})
        metrics["dpo/pairs"] = float(len(chosen_P))
        fb = trainer.forward_backward(batch, self.loss, agg=self.aggregation, ref_logprobs_B_T=ref, **algo.loss_config)
        metrics["losses/dpo"] = fb["loss"]
        metrics["losses/total"] = fb["loss"]
        metrics["data/tokens"] = float(fb["num_tokens"])
        metrics.update(optim_metrics(trainer.optim_step()))
        return metrics

    # ---- held-out metrics ---------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        out = super().evaluate()
        if self.eval_pairs:
            out.update(self.evaluate_pairs(self.eval_pairs))
        return out

    def evaluate_pairs(self, pairs: list[PreferencePair]) -> dict[str, float]:
        """``eval/preference_accuracy``, ``eval/reward_margin``, ``eval/preference_loss`` on ``pairs``."""
        import torch

        from tinker_algos.training.gradient_pass import aggregate
        from tinker_core.contracts import LossInputs

        reference = self._setup()
        loss_fn = tinker_core.registry.get_loss(self.loss).obj
        chosen, rejected, losses = [], [], []
        for start in range(0, len(pairs), EVAL_CHUNK_PAIRS):
            batch = self.pair_batch(pairs[start : start + EVAL_CHUNK_PAIRS])
            mask = batch.loss_mask_B_T * batch.attention_mask_B_T
            ref = reference.logprobs(batch)
            pol = self.ctx.trainer.forward(batch)
            c, r = pair_logratios(pol, ref, mask)
            chosen.append(c)
            rejected.append(r)
            out = loss_fn(LossInputs(torch.as_tensor(pol), torch.as_tensor(mask), ref_logprobs_B_T=torch.as_tensor(ref)), **self.ctx.algo.loss_config)
            losses.append(float(aggregate(out.loss_B_T, torch.as_tensor(mask), DEFAULT_AGGREGATION)) * len(c))
        m = preference_metrics(np.concatenate(chosen), np.concatenate(rejected), self.beta)
        return {
            "eval/preference_accuracy": m["accuracy"],
            "eval/reward_margin": m["reward_margin"],
            "eval/preference_loss": sum(losses) / len(pairs),
        }

    # ---- checkpoint state ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return self._setup().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._setup().load_state_dict(state)
