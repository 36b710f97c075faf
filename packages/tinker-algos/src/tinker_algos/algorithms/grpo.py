"""GRPO and its family (``algorithm.name: grpo``): group-relative advantages, no critic.

Each step samples ``rollout.group_size`` episodes for each of ``rollout.prompts_per_step``
tasks, scores them with the environment, turns the rewards into advantages with the configured
group estimator (``grpo`` by default; ``dr_grpo``, ``rloo``, ``reinforce_pp_baseline`` or any
plugin's) and takes one policy-gradient step with ``importance_sampling`` (or ``ppo``, ``cispo``
or any registered policy loss, with ``loss_config``).

Implementation details:

1. The episodes of one group reset their env with the same seed, so they pose the same task;
   task seeds are derived from ``(seed, stage, step, group)``.
2. Rollouts go through the turn FSM: only the policy's tokens carry loss weight, so multi-turn
   envs (tool use, games against a scripted opponent) train exactly like single-turn ones.
3. Failed episodes (env error or time-out) are counted under ``rollout/errors/*`` and left out;
   the step fails only above ``rollout.max_error_rate``.
4. ``kl/sample_train`` is the k3 estimate of KL(sampler || trainer) on the sampled tokens, from
   the trainer's recomputed logprobs before the update (0 up to float noise on CPU). They are
   the logprobs of the loss's own forward pass (``forward_backward(return_logprobs=True)``), so
   no extra pass runs, except when they are needed before it (``kl.mode: reward``), the rollout
   temperature is not 1, or dropout is on (then a separate no-grad ``forward`` gives them).
   ``time/rollout_s`` is the part of the step spent collecting episodes.
5. A KL penalty to the reference policy (``algorithm.kl``; the base model with adapters off for
   LoRA, a frozen copy of the stage's starting weights otherwise) is either subtracted from the
   token rewards (``mode: reward``) or added as a second loss term (``mode: loss``).
6. A multi-agent env (its spec has ``roles``, e.g. ``games/tictactoe-v0``) is played through
   :mod:`tinker_algos.multiagent`: self-play by default (every role's trajectory trains the
   policy; groups are (task, role)), or the policy in one role against a scripted opponent, set
   by ``algorithm.params.multi_agent: {mode: self_play | opponent, opponent: random, learner_role:
   x, eval_opponent: minimax}`` (opponents are those the env offers; the keys are typed in
   :class:`tinker_core.config.MultiAgentConfig`). Held-out evaluation then plays greedily against
   ``eval_opponent`` (default: ``opponent``), alternating the policy's role.

7. When every group's episodes got the same reward for 3 steps in a row (every advantage 0,
   ``optim/grad_norm`` exactly 0 without a KL loss), the stage says so once, in a ``hint:`` log
   line naming the likely fixes (:mod:`tinker_algos.algorithms.hints`).

8. Rows whose advantage is 0 on every token (a group whose rewards tied) get no gradient from the
   built-in policy losses, so they skip the gradient pass (a no-grad forward gives their
   logprobs); ``loss_scale`` keeps the gradient and the logged metrics those of the whole batch
   (:mod:`tinker_algos.zero_advantage`).
9. ``rollout.max_staleness: k`` (default 0: on-policy) samples the batch of step ``s + k`` in a
   background thread while step ``s`` trains, with the weights from before update ``s``
   (:mod:`tinker_algos.rollout_ahead`); the loss's ratio to the sampler's logprobs corrects for
   the ``k`` updates in between (use a clipped loss, ``ppo``, with ``k > 0``).

``algorithm.params`` (:class:`tinker_core.config.GRPOParams`): ``estimator_config`` (keyword
arguments of the estimator) and ``multi_agent``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import tinker_core
import tinker_core.registry
from tinker_algos.algorithms.base import Algorithm, StageContext
from tinker_algos.algorithms.common import (
    ReferencePolicy,
    check_estimator_config,
    kl_to_reference,
    optim_metrics,
    resolve_estimator,
    sampler_agreement,
)
from tinker_algos.algorithms.hints import TiedRewardsHint
from tinker_algos.multiagent import (
    MultiAgentParams,
    MultiAgentRolloutResult,
    collect_for_grpo,
    evaluate_multi_agent,
    stage_env_spec,
)
from tinker_algos.rollout import RolloutResult
from tinker_algos.rollout_ahead import RolloutsAhead
from tinker_algos.zero_advantage import policy_update
from tinker_core.config import GRPOParams
from tinker_core.contracts import AdvantageInputs, Batch
from tinker_core.errors import ConfigError
from tinker_core.seeding import derive_seed


class GRPO(Algorithm):
    name = "grpo"
    default_estimator = "grpo"
    default_loss = "importance_sampling"

    def __init__(self, ctx: StageContext) -> None:
        super().__init__(ctx)
        self.env_factory = ctx.require_env()
        self.params: GRPOParams = ctx.algo.params
        self.estimator_name, self.estimator = resolve_estimator(ctx, self.default_estimator, critic=False)
        self.loss = ctx.algo.loss or self.default_loss
        tinker_core.registry.get_loss(self.loss)  # fail early, with a did-you-mean
        # estimator_config keys the estimator does not take fail here, before the first rollout (as in ppo)
        two = AdvantageInputs(rewards_B=np.zeros(2), mask_B_T=np.ones((2, 1)), group_ids_B=np.zeros(2, dtype=np.int64))
        check_estimator_config(ctx, self.estimator, two, self.params.estimator_config)
        self.reference = ReferencePolicy(ctx) if ctx.algo.kl.coef > 0 else None
        self.multi_agent: MultiAgentParams | None = None
        self.env_spec = stage_env_spec(ctx)
        self.deterministic_pass = not _has_dropout(ctx.policy.module)
        if self.env_spec is not None and self.env_spec.roles:
            # the config typed the keys; this checks them against the env (its roles, its opponents)
            self.multi_agent = MultiAgentParams.for_env(self.params.multi_agent, self.env_spec, where=f"{ctx.where}.params.multi_agent")
        elif self.params.multi_agent is not None:
            raise ConfigError([
                f"{ctx.where}.params.multi_agent: the env {getattr(self.env_spec, 'id', '?')!r} is single-agent "
                "(its spec has no roles); remove multi_agent or use a multi-agent env"
            ])
        self.tied_hint = TiedRewardsHint(ctx.log)
        k = int(getattr(ctx.rollout_cfg, "max_staleness", 0) or 0)
        if k and self.multi_agent is not None:
            raise ConfigError(["rollout.max_staleness: sampling ahead is for single-agent envs; set it to 0 for a multi-agent env"])
        self.ahead = RolloutsAhead(ctx, k) if k else None

    # ---- one step -----------------------------------------------------------------------------
    def collect(self, step: int) -> RolloutResult | MultiAgentRolloutResult:
        if self.multi_agent is not None:
            assert self.env_spec is not None
            return collect_for_grpo(self.ctx, step, self.multi_agent, self.env_spec)
        if self.ahead is not None:
            result = self.ahead.take(step)
            self.ahead.start(step)  # the batch of step + k, with the weights before this update
            return result
        return self.ctx.group_rollout(step)

    def evaluate(self) -> dict[str, float]:
        if self.multi_agent is None:
            return super().evaluate()
        r = self.ctx.rollout_cfg
        return evaluate_multi_agent(
            self.ctx.policy,
            self.ctx.eval_env_factory or self.env_factory,
            self.ctx.algo.eval_size,
            seed=derive_seed(self.ctx.job.seed, "eval"),
            max_new_tokens=r.max_new_tokens,
            stop=r.stop,
            opponent_name=self.multi_agent.eval_opponent or self.multi_agent.opponent,
            adapter=self.ctx.adapter,
            turn_timeout_s=r.turn_timeout_s,
            max_steps=r.max_turns,
            renderer=self.ctx.renderer,
        )

    def advantages(self, batch: Batch, token_rewards_B_T: np.ndarray | None) -> tuple[np.ndarray, dict[str, float]]:
        out = self.estimator(AdvantageInputs.from_batch(batch, token_rewards_B_T=token_rewards_B_T), **self.params.estimator_config)
        return np.asarray(out.advantages_B_T, dtype=np.float32), dict(out.metrics)

    def step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        result = self.collect(step)
        metrics = result.metrics()
        metrics["time/rollout_s"] = time.perf_counter() - t0
        trajs = result.trajectories
        if not trajs or sum(t.num_generated for t in trajs) == 0:
            metrics["optim/skipped_steps"] = float(self.ctx.trainer.skipped_steps)
            metrics["rollout/empty_batch"] = 1.0
            return metrics
        batch = result.batch(pad_token_id=self.ctx.policy.pad_token_id)
        self.tied_hint.observe(batch.rewards_B, batch.group_ids_B)
        mask = batch.loss_mask_B_T
        kl = self.ctx.algo.kl
        # The policy's logprobs before the update: those of forward_backward's own pass (detail 4)
        # unless they are needed before it (KL as reward shaping), are at another temperature
        # than the sampler's, or dropout makes the training pass differ from a plain forward.
        reuse = self.deterministic_pass and self.ctx.rollout_cfg.temperature == 1.0 and not (
            self.reference is not None and kl.mode == "reward"
        )
        current = None if reuse else self.ctx.trainer.forward(batch, temperature=self.ctx.rollout_cfg.temperature)
        token_rewards = None
        ref = None
        if self.reference is not None:
            ref = self.reference.logprobs(batch)
            if current is not None:
                metrics["kl/policy_ref"], token_rewards = kl_to_reference(current, ref, batch, mask, kl)
        adv, est_metrics = self.advantages(batch, token_rewards)
        metrics.update({f"advantages/{k}": v for k, v in est_metrics.items()})
        metrics["advantages/abs_mean"] = float(np.abs(adv).sum() / max(mask.sum(), 1.0))
        # the policy loss: a registered name, by default tinker_algos.losses.importance_sampling
        # (l = -rho * A per token; `ppo`, `cispo` beside it), aggregated by tinker_algos.aggregation
        # (rows whose advantage is 0, tied groups, skip the gradient pass: tinker_algos.zero_advantage;
        # without a reference model they are not forwarded again, and the metrics cover the rows that train)
        fb, fb_logprobs, scored_B = policy_update(
            self.ctx.trainer, batch, self.loss, self.ctx.algo.aggregation, adv, dict(self.ctx.algo.loss_config),
            skip=self.deterministic_pass, forward_skipped=ref is not None,
        )
        agree_mask = mask
        if current is None:
            current, agree_mask = fb_logprobs, mask * scored_B[:, None]
            if ref is not None:
                metrics["kl/policy_ref"], _ = kl_to_reference(current, ref, batch, mask, kl)
        metrics.update(sampler_agreement(batch, current, agree_mask))
        metrics["losses/policy"] = fb["loss"]
        total = fb["loss"]
        if ref is not None and kl.mode == "loss":
            fk = self.ctx.trainer.forward_backward(batch, kl.estimator, agg=self.ctx.algo.aggregation, loss_scale=kl.coef, ref_logprobs_B_T=ref)
            metrics["losses/kl"] = fk["loss"]
            total += kl.coef * fk["loss"]
        metrics["losses/total"] = total
        for k, v in fb.items():
            if "/" in k:
                metrics[f"losses/{k}"] = v
        metrics.update(optim_metrics(self.ctx.trainer.optim_step()))
        return metrics

    def state_dict(self) -> dict[str, Any]:
        state = self.reference.state_dict() if self.reference is not None else {}
        if self.ahead is not None:
            state.update(self.ahead.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.reference is not None:
            self.reference.load_state_dict(state)
        if self.ahead is not None:
            self.ahead.load_state_dict(state)


def _has_dropout(module: Any) -> bool:
    """Whether a training-mode forward pass of ``module`` is random (a dropout with ``p > 0``, a
    LoRA adapter's included, or an attention dropout in a model config)."""
    import torch

    for m in module.modules():
        if isinstance(m, torch.nn.Dropout) and m.p > 0:
            return True
        config = getattr(m, "config", None)
        if config is not None and float(getattr(config, "attention_dropout", 0.0) or 0.0) > 0:
            return True
    return False
