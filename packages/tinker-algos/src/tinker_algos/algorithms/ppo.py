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
5. A KL penalty to the reference policy (``algorithm.kl``; the starting adapter under LoRA, a
   frozen copy of the stage's starting weights otherwise) is subtracted from the token rewards before GAE
   (``mode: reward``, the classic RLHF shaping) or added as a loss term (``mode: loss``).
6. Old values (before any update of this step) clip the value loss:
   ``0.5 * max((V - R)^2, (clip(V, V_old +- value_clip) - R)^2)``.
7. The LR of every update of step ``k`` follows the schedule at ``k`` (warmup and decay are
   counted in steps, not in minibatch updates), for the policy and the critic alike.
8. The critic (head, separate body, optimizer state) is built lazily, when the stage's starting
   weights are in place, and is saved in the checkpoint through :meth:`PPO.state_dict`.

Metrics are averaged over the step's updates: ``losses/policy``, ``losses/value``,
``losses/clipfrac``, ``losses/approx_kl``, ``values/explained_variance`` (old values against
returns), ``kl/sample_train``; see ``docs/algorithms/ppo.md`` for the full glossary. Details 2
and 5 and those names live in the policy-update block PPO shares with GRPO
(:mod:`tinker_algos.algorithms.update`), with the trainer's ``pi_old`` as the behaviour policy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinker_algos.algorithms.base import Algorithm, StageContext
from tinker_algos.algorithms.common import check_estimator_config, resolve_estimator
from tinker_algos.algorithms.critic import Critic, explained_variance
from tinker_algos.algorithms.update import PolicyUpdate, take_rows
from tinker_algos.records.recording import phase, record_train
from tinker_algos.rollout.episodes import RolloutResult
from tinker_algos.training.trainer_config import lr_multiplier
from tinker_core.config import PPOParams
from tinker_core.contracts import AdvantageInputs


class PPO(Algorithm):
    name = "ppo"
    default_estimator = "gae"
    default_loss = "ppo"

    def __init__(self, ctx: StageContext) -> None:
        super().__init__(ctx)
        self.env_factory = ctx.require_env()
        self.params: PPOParams = ctx.algo.params
        self.estimator_name, self.estimator = resolve_estimator(ctx, self.default_estimator, critic=True)
        self.update = PolicyUpdate(ctx, "ppo", self.default_loss, behaviour="trainer")
        # estimator_config keys the estimator does not take fail here, before the first rollout (as in grpo)
        one = AdvantageInputs(np.zeros(1), np.ones((1, 1)), np.zeros(1), values_B_T=np.zeros((1, 1)))
        check_estimator_config(ctx, self.estimator, one, self.params.estimator_config)
        self.critic: Critic | None = None

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
        self.update.start()  # the reference policy (with a KL penalty)

    # ---- one step -----------------------------------------------------------------------------
    def collect(self, step: int) -> RolloutResult:
        return self.ctx.group_rollout(step)

    def lr_factor(self, step: int) -> float:
        c = self.ctx.trainer.config
        return lr_multiplier(step, schedule=c.schedule, warmup_steps=c.warmup_steps, total_steps=c.total_steps, min_lr_ratio=c.min_lr_ratio)

    def step(self, step: int) -> dict[str, float]:
        self._setup()
        assert self.critic is not None
        trainer, algo, vf_coef = self.ctx.trainer, self.ctx.algo, float(self.params.vf_coef)
        with phase("rollout"):
            result = self.collect(step)
        metrics = result.metrics()
        batch = self.update.batch(result, metrics, generated_only=True)
        if batch is None:  # no token generated
            return metrics
        # pi_old (the trainer's, temperature 1) is the behaviour policy; KL to the reference shapes the rewards (kl.mode: reward)
        before = self.update.behaviour(batch, metrics)
        batch, mask = before.batch, before.mask_B_T

        # values and advantages
        old_values = self.critic.values(batch) * mask
        out = self.estimator(
            AdvantageInputs.from_batch(batch, mask_B_T=mask, token_rewards_B_T=before.token_rewards_B_T, values_B_T=old_values),
            **self.params.estimator_config,
        )
        adv = np.asarray(out.advantages_B_T, dtype=np.float32)
        returns = np.asarray(out.returns_B_T, dtype=np.float32)
        metrics.update(self.update.advantage_metrics(adv, out.metrics, mask))
        record_train(result, self.ctx.policy.tokenizer, adv, mask, generated_only=True)  # logging.rollouts
        n_tokens = max(float(mask.sum()), 1.0)
        metrics["values/mean"] = float(old_values.sum() / n_tokens)
        metrics["values/returns_mean"] = float(returns.sum() / n_tokens)
        metrics["values/explained_variance"] = explained_variance(old_values, returns, mask)

        # epochs x minibatches of updates: policy loss + KL term (kl.mode: loss) + vf_coef * value loss
        B = batch.shape[0]
        mb = algo.micro_batch_size or B
        factor = self.lr_factor(step)
        policy_lr = trainer.config.lr * factor
        critic_lr = float(self.params.critic_lr or trainer.config.lr) * factor
        ref = before.ref_logprobs_B_T
        extras = [adv, returns, old_values] + ([ref] if ref is not None else [])
        sums: dict[str, float] = {}
        updates = 0
        for epoch in range(algo.epochs_per_step):
            order = np.random.default_rng(self.ctx.step_seed(step, "minibatch", epoch)).permutation(B)
            for start in range(0, B, mb):
                rows = np.sort(order[start : start + mb])
                sub, (adv_mb, ret_mb, oldv_mb, *ref_mb) = take_rows(batch, rows, *extras, trim=True)
                if float((sub.loss_mask_B_T * sub.attention_mask_B_T).sum()) == 0:
                    continue
                terms, _ = self.update.loss_terms(sub, adv_mb, ref_mb[0] if ref_mb else None)
                fv = self.critic.forward_backward(sub, ret_mb, oldv_mb, coef=vf_coef, agg=algo.aggregation, clip_eps=self.params.value_clip)
                terms["losses/value"], terms["losses/value_clipfrac"] = fv["loss"], fv["clipfrac"]
                terms["losses/total"] += vf_coef * fv["loss"]
                terms["optim/grad_norm"] = trainer.optim_step(lr=policy_lr)["grad_norm"]
                terms["critic/grad_norm"] = self.critic.optim_step(lr=critic_lr)["grad_norm"]
                for k, v in terms.items():
                    sums[k] = sums.get(k, 0.0) + float(v)
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
        return {"critic": self.critic.state_dict(), **self.update.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._setup()
        assert self.critic is not None
        if "critic" in state:
            self.critic.load_state_dict(state["critic"])
        self.update.load_state_dict(state)
