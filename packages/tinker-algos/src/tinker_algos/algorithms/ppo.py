"""PPO with a critic (``algorithm.name: ppo``): GAE advantages, clipped surrogate, clipped values.

Each step samples ``rollout.group_size`` episodes for each of ``rollout.prompts_per_step``
tasks, scores the critic's per-token values ``V(s_t)`` on them, turns the rewards into
advantages and returns with GAE (``gae``, or any estimator registered with ``needs_critic``),
then makes ``algorithm.epochs_per_step`` passes over the batch in shuffled minibatches of
``algorithm.micro_batch_size`` episodes (the whole batch when unset). Every minibatch is one
update of the policy (the ``ppo`` loss, or any policy loss, with ``loss_config``) and of the
critic (the clipped ``value`` loss).

``algorithm.params`` (all optional; typed and bounded by :class:`tinker_core.config.PPOParams`):

===================  =========  ==================================================================
``critic``           ``head``   ``head``: a linear value head on the policy's last hidden state,
                                the value loss flows into the policy's weights times ``vf_coef``;
                                ``separate``: a copy of the starting policy with a value head
                                (twice the weights; the policy sees no value gradient)
``vf_coef``          ``0.1``    weight of the value loss
``value_clip``       ``0.2``    ``clip_eps`` of the value loss (``null``: unclipped)
``critic_lr``        opt. lr    learning rate of the critic's optimizer (same optimizer kind)
``detach_head``      ``false``  ``head`` mode only: stop the value gradient at the hidden state
``estimator_config`` ``{}``     the estimator's keys: ``gamma`` (1.0), ``lam`` (0.95), ``whiten``
===================  =========  ==================================================================

Implementation details:

1. Tasks are seeded from ``(seed, stage, step, group)``, the sampler from ``(seed, stage,
   step)``, the minibatch order of epoch ``e`` from ``(seed, stage, step, e)``: a resumed run
   replays exactly the rollouts and updates of an uninterrupted one.
2. ``pi_old`` is recomputed by the trainer before the first update (temperature 1, as verl
   does), so the first minibatch starts at ratio 1 exactly; ``kl/sample_train`` still measures
   how far the sampler's logprobs are from the trainer's (0 up to float noise on CPU).
3. Values use the logprob alignment: ``V[:, t]`` is read from the hidden state at ``t - 1``,
   the state in which token ``t`` is chosen (see :mod:`tinker_algos.algorithms.critic`).
4. The episode reward sits on the last policy token; with ``gamma = 1`` GAE's ``delta`` is
   ``V_{t+1} - V_t`` inside a response and ``R - V_T`` at its end. Advantages are whitened over
   the batch's trained tokens (``estimator_config.whiten``); returns are taken before that.
5. A KL penalty to the reference policy (``algorithm.kl``; adapters off for LoRA, a frozen copy
   of the stage's starting weights otherwise) is subtracted from the token rewards before GAE
   (``mode: reward``, the classic RLHF shaping) or added as a loss term (``mode: loss``).
6. Old values (before any update of this step) clip the value loss:
   ``0.5 * max((V - R)^2, (clip(V, V_old +- value_clip) - R)^2)``.
7. The LR of every update of step ``k`` follows the schedule at ``k`` (warmup and decay are
   counted in steps, not in minibatch updates), for the policy and the critic alike.
8. The critic (head, separate body, optimizer state) is built lazily, when the stage's starting
   weights are in place, and is saved in the checkpoint through :meth:`PPO.state_dict`.

Metrics are averaged over the step's updates: ``losses/policy``, ``losses/value``,
``losses/clipfrac``, ``losses/approx_kl``, ``values/explained_variance`` (old values against
returns), ``kl/sample_train``; see ``docs/algorithms/ppo.md`` for the full glossary.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import tinker_core
import tinker_core.registry
from tinker_algos.algorithms.base import Algorithm, StageContext
from tinker_algos.algorithms.common import (
    ReferencePolicy,
    check_loss_config,
    kl_to_reference,
    resolve_estimator,
    sampler_agreement,
)
from tinker_algos.algorithms.critic import Critic, explained_variance
from tinker_algos.rollout import RolloutResult
from tinker_algos.trainer_config import lr_multiplier
from tinker_core.config import PPOParams
from tinker_core.contracts import AdvantageInputs, Batch
from tinker_core.errors import ConfigError


def take_rows(batch: Batch, rows: np.ndarray, *extra_B_T: np.ndarray) -> tuple[Batch, list[np.ndarray]]:
    """The sub-batch of ``rows`` (trimmed to its longest row) and the same rows of ``extra_B_T``."""
    T = max(1, int(batch.attention_mask_B_T[rows].sum(-1).max()))
    sub = Batch(
        tokens_B_T=batch.tokens_B_T[rows, :T],
        attention_mask_B_T=batch.attention_mask_B_T[rows, :T],
        loss_mask_B_T=batch.loss_mask_B_T[rows, :T],
        sampler_logprobs_B_T=batch.sampler_logprobs_B_T[rows, :T],
        rewards_B=batch.rewards_B[rows],
        group_ids_B=batch.group_ids_B[rows],
    )
    return sub, [x[rows, :T] for x in extra_B_T]


class PPO(Algorithm):
    name = "ppo"
    default_estimator = "gae"
    default_loss = "ppo"

    def __init__(self, ctx: StageContext) -> None:
        super().__init__(ctx)
        self.env_factory = ctx.require_env()
        self.params: PPOParams = ctx.algo.params
        self.estimator_name, self.estimator = resolve_estimator(ctx, self.default_estimator, critic=True)
        self.loss = ctx.algo.loss or self.default_loss
        loss_entry = tinker_core.registry.get_loss(self.loss)
        if loss_entry.options.get("kind") != "policy":
            raise ConfigError([f"{ctx.where}.loss: ppo needs a policy loss (ppo, importance_sampling, cispo), got {self.loss!r} ({loss_entry.options.get('kind')})"])
        self._check_configs()
        self.critic: Critic | None = None
        self.reference: ReferencePolicy | None = None

    def _check_configs(self) -> None:
        """Fail before any work on estimator/loss config keys the functions do not take."""
        import torch

        from tinker_core.contracts import LossInputs

        one = np.ones((1, 1))
        try:
            self.estimator(AdvantageInputs(np.zeros(1), one, np.zeros(1), values_B_T=np.zeros((1, 1))), **self.params.estimator_config)
        except (TypeError, ValueError) as e:
            raise ConfigError([f"{self.ctx.where}.params.estimator_config: {e}"]) from None
        lp = torch.zeros(1, 1)
        check_loss_config(self.ctx, self.loss, LossInputs(lp, torch.ones(1, 1), sampling_logprobs_B_T=lp, advantages_B_T=lp))

    # ---- lazily built state (needs the stage's starting weights) ------------------------------
    def _setup(self) -> None:
        if self.critic is not None:
            return
        opt = self.ctx.stage.optimizer
        assert opt is not None
        self.critic = Critic(
            self.ctx.policy,
            mode=self.params.critic,
            optimizer=opt.name,
            lr=float(self.params.critic_lr or opt.lr),
            weight_decay=opt.weight_decay,
            optimizer_config=dict(opt.params),
            max_grad_norm=opt.grad_clip,
            detach=self.params.detach_head,
        )
        if self.ctx.algo.kl.coef > 0:
            self.reference = ReferencePolicy(self.ctx)

    # ---- one step -----------------------------------------------------------------------------
    def collect(self, step: int) -> RolloutResult:
        return self.ctx.group_rollout(step)

    def lr_factor(self, step: int) -> float:
        c = self.ctx.trainer.config
        return lr_multiplier(step, schedule=c.schedule, warmup_steps=c.warmup_steps, total_steps=c.total_steps, min_lr_ratio=c.min_lr_ratio)

    def step(self, step: int) -> dict[str, float]:
        self._setup()
        assert self.critic is not None
        trainer, algo, kl = self.ctx.trainer, self.ctx.algo, self.ctx.algo.kl
        result = self.collect(step)
        metrics = result.metrics()
        trajs = [t for t in result.trajectories if t.num_generated > 0]
        if not trajs:
            metrics["optim/skipped_steps"] = float(trainer.skipped_steps)
            metrics["rollout/empty_batch"] = 1.0
            return metrics
        batch = Batch.from_groups([g.generated() for g in result.groups], pad_token_id=self.ctx.policy.pad_token_id)
        mask = batch.loss_mask_B_T * batch.attention_mask_B_T
        n_tokens = max(float(mask.sum()), 1.0)

        # pi_old, sampler agreement, reference
        temperature = self.ctx.rollout_cfg.temperature
        old_logprobs = trainer.forward(batch)
        at_temp = old_logprobs if temperature == 1.0 else trainer.forward(batch, temperature=temperature)
        metrics.update(sampler_agreement(batch, at_temp, mask))
        batch = dataclasses.replace(batch, sampler_logprobs_B_T=old_logprobs * mask)
        ref = None
        token_rewards = None
        if self.reference is not None:
            ref = self.reference.logprobs(batch)
            metrics["kl/policy_ref"], token_rewards = kl_to_reference(old_logprobs, ref, batch, mask, kl)

        # values and advantages
        old_values = self.critic.values(batch) * mask
        out = self.estimator(
            AdvantageInputs.from_batch(batch, mask_B_T=mask, token_rewards_B_T=token_rewards, values_B_T=old_values),
            **self.params.estimator_config,
        )
        adv = np.asarray(out.advantages_B_T, dtype=np.float32)
        returns = np.asarray(out.returns_B_T, dtype=np.float32)
        metrics.update({f"advantages/{k}": float(v) for k, v in out.metrics.items()})
        metrics["advantages/abs_mean"] = float(np.abs(adv).sum() / n_tokens)
        metrics["values/mean"] = float(old_values.sum() / n_tokens)
        metrics["values/returns_mean"] = float(returns.sum() / n_tokens)
        metrics["values/explained_variance"] = explained_variance(old_values, returns, mask)

        # epochs x minibatches of updates
        B = batch.shape[0]
        mb = algo.micro_batch_size or B
        factor = self.lr_factor(step)
        policy_lr = trainer.config.lr * factor
        critic_lr = float(self.params.critic_lr or trainer.config.lr) * factor
        extras = [adv, returns, old_values] + ([ref] if ref is not None else [])
        sums: dict[str, float] = {}
        updates = 0

        def add(key: str, value: float) -> None:
            sums[key] = sums.get(key, 0.0) + float(value)

        for epoch in range(algo.epochs_per_step):
            order = np.random.default_rng(self.ctx.step_seed(step, "minibatch", epoch)).permutation(B)
            for start in range(0, B, mb):
                rows = np.sort(order[start : start + mb])
                sub, (adv_mb, ret_mb, oldv_mb, *ref_mb) = take_rows(batch, rows, *extras)
                if float((sub.loss_mask_B_T * sub.attention_mask_B_T).sum()) == 0:
                    continue
                fb = trainer.forward_backward(sub, self.loss, agg=algo.aggregation, advantages_B_T=adv_mb, **algo.loss_config)
                total = fb["loss"]
                add("losses/policy", fb["loss"])
                for k, v in fb.items():
                    if k.startswith(f"{self.loss}/"):
                        add(f"losses/{k.split('/', 1)[1]}", v)
                if ref_mb and kl.mode == "loss":
                    fk = trainer.forward_backward(sub, kl.estimator, agg=algo.aggregation, loss_scale=kl.coef, ref_logprobs_B_T=ref_mb[0])
                    add("losses/kl", fk["loss"])
                    total += kl.coef * fk["loss"]
                fv = self.critic.forward_backward(
                    sub, ret_mb, oldv_mb, coef=float(self.params.vf_coef), agg=algo.aggregation, clip_eps=self.params.value_clip
                )
                add("losses/value", fv["loss"])
                add("losses/value_clipfrac", fv["clipfrac"])
                total += float(self.params.vf_coef) * fv["loss"]
                add("losses/total", total)
                opt = trainer.optim_step(lr=policy_lr)
                copt = self.critic.optim_step(lr=critic_lr)
                add("optim/grad_norm", opt["grad_norm"])
                add("critic/grad_norm", copt["grad_norm"])
                updates += 1
        metrics.update({k: v / max(updates, 1) for k, v in sums.items()})
        metrics["critic/skipped_updates"] = float(self.critic.skipped_updates)
        metrics["optim/updates"] = float(updates)
        metrics["optim/lr"] = policy_lr
        metrics["optim/skipped_steps"] = float(trainer.skipped_steps)
        return metrics

    # ---- checkpoint state ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self._setup()
        assert self.critic is not None
        state: dict[str, Any] = {"critic": self.critic.state_dict()}
        if self.reference is not None:
            state.update(self.reference.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._setup()
        assert self.critic is not None
        if "critic" in state:
            self.critic.load_state_dict(state["critic"])
        if self.reference is not None:
            self.reference.load_state_dict(state)
