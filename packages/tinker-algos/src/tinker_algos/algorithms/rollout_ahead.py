"""Rollouts sampled ahead while the trainer learns (``rollout.max_staleness: k``, ``k > 0``).

With ``k = 0`` (the default) a step samples its episodes with the policy it is about to update:
on-policy, nothing here runs. With ``k > 0`` the batch of step ``s + k`` is sampled in a
background thread while step ``s`` trains, by a copy of the policy holding the weights from
*before* update ``s``; so every batch is ``k`` updates old when it trains (the first ``k``
steps sample on-policy, in turn). The losses correct for it as they do for any sampler/trainer
difference: the ratio ``rho = pi / pi_sampler`` uses the sampler's logprobs, and ``ppo`` (or
``cispo``) clips it.

Determinism and resume: a batch depends only on its step's seeds and the weights it was sampled
with, never on timing. Those weights (the trainable tensors) are kept until the batch is taken
and are part of the algorithm's checkpoint state, so a resumed run samples each pending batch
again with exactly the weights the uninterrupted run used.
"""

from __future__ import annotations

import copy
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch

from tinker_algos.model.models import PolicyModel

if TYPE_CHECKING:
    from tinker_algos.algorithms.base import StageContext
    from tinker_algos.rollout.episodes import RolloutResult


class RolloutsAhead:
    """The batches of the next ``k`` steps, sampling in one background thread."""

    def __init__(self, ctx: StageContext, k: int) -> None:
        if k < 1:
            raise ValueError(f"RolloutsAhead needs k >= 1, got {k}")
        self.ctx, self.k = ctx, k
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="opentinker-rollout-ahead")
        self.pending: dict[int, Future[RolloutResult]] = {}
        self.weights: dict[int, dict[str, torch.Tensor]] = {}  # step -> trainable weights it samples with
        self.copy: PolicyModel | None = None

    def take(self, step: int) -> RolloutResult:
        """Step ``step``'s episodes: the batch sampled ahead for it, or sampled now (on-policy)."""
        future = self.pending.pop(step, None)
        self.weights.pop(step, None)
        if future is not None:
            return future.result()
        return self.ctx.group_rollout(step)

    def start(self, step: int) -> None:
        """Start sampling the batch of step ``step + k`` with the current weights (call it before
        step ``step``'s update)."""
        target = step + self.k
        if target >= self.ctx.algo.steps or target in self.pending:
            return
        self.submit(target, {n: p.detach().clone() for n, p in self._trainable(self.ctx.policy)})

    def submit(self, step: int, weights: dict[str, torch.Tensor]) -> None:
        self.weights[step] = weights
        self.pending[step] = self.pool.submit(self._collect, step, weights)

    def metrics(self) -> dict[str, float]:
        """No metrics of its own (the distributed collector logs sync and staleness keys)."""
        return {}

    def _collect(self, step: int, weights: dict[str, torch.Tensor]) -> RolloutResult:
        if self.copy is None:
            policy = self.ctx.policy
            self.copy = PolicyModel(
                model=copy.deepcopy(policy.model), tokenizer=policy.tokenizer, model_id=policy.model_id,
                spec=policy.spec, lora_specs=dict(policy.lora_specs),
            )
        with torch.no_grad():
            for name, p in self._trainable(self.copy):
                p.copy_(weights[name])
        return self.ctx.group_rollout(step, policy=self.copy)

    def _trainable(self, policy: PolicyModel) -> list[tuple[str, torch.Tensor]]:
        names = set(self.ctx.trainer.param_names)
        return [(n, p) for n, p in policy.module.named_parameters() if n in names]

    # ---- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The weights of every batch not taken yet, by step."""
        return {"ahead_weights": {int(s): w for s, w in sorted(self.weights.items())}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Sample the pending batches again, with the weights they were first sampled with."""
        for step, weights in sorted(state.get("ahead_weights", {}).items()):
            self.submit(int(step), weights)
