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
   no extra pass runs, except when they are needed before it (``kl.mode: reward``) or dropout is
   on (then a separate no-grad ``forward`` gives them). That pass divides the logits by the
   rollout temperature, so the ratio compares the sampler's and the trainer's policy at the
   temperature the sampler drew with.
   ``time/rollout_s`` is the part of the step spent collecting episodes.
5. A KL penalty to the reference policy (``algorithm.kl``; the stage's starting adapter under
   LoRA, a frozen copy of the stage's starting weights otherwise) is either subtracted from the
   token rewards (``mode: reward``) or added as a second loss term (``mode: loss``).
6. A multi-agent env (its spec has ``roles``, e.g. ``games/tictactoe-v0``) is played through
   :mod:`tinker_algos.multiagent`: self-play by default (every role's trajectory trains the
   policy; groups are (task, role)), or the policy in one role against a scripted opponent, set
   by ``algorithm.params.multi_agent: {mode: self_play | opponent, opponent: random, learner_role:
   x, eval_opponent: minimax}`` (opponents are those the env offers; the keys are typed in
   :class:`tinker_core.config.MultiAgentConfig`). Held-out evaluation then plays greedily against
   ``eval_opponent`` (default: ``opponent``), alternating the policy's role; ``eval_opponents:
   [conceder, boulware]`` plays each, logging every one's numbers under ``eval/vs/<opponent>/``.
   ``mode: learners`` gives every role its own LoRA adapter, optimizer and loss
   (:mod:`tinker_algos.algorithms.learners`): each adapter learns from its own role's turns only,
   its metrics logged as ``roles/<role>/<key>``, its checkpoint under ``checkpoints/step-N/roles/<role>/``.
   ``mode: league`` plays each task against a member of a pool of the policy's past snapshots
   (and scripted opponents), rated by ``eval/elo`` (:mod:`tinker_algos.algorithms.league`).

7. When every group's episodes got the same reward for 3 steps in a row (every advantage 0,
   ``optim/grad_norm`` exactly 0 without a KL loss), the stage says so once, in a ``hint:`` log
   line naming the likely fixes (:mod:`tinker_algos.records.health`).

8. Rows whose advantage is 0 on every token (a group whose rewards tied) get no gradient from a
   loss registered with ``vanishes_at_zero_advantage=True`` (the built-in policy losses but
   ``dro``, or a plugin's), so they skip the gradient pass (a no-grad forward gives their
   logprobs); ``loss_scale`` keeps the gradient and the logged metrics those of the whole batch
   (:func:`tinker_algos.algorithms.update.policy_update`).
9. ``rollout.max_staleness: k`` (default 0: on-policy) samples the batch of step ``s + k`` in a
   background thread while step ``s`` trains, with the weights from before update ``s``
   (:mod:`tinker_algos.algorithms.rollout_ahead`); the loss's ratio to the sampler's logprobs corrects for
   the ``k`` updates in between (use a clipped loss, ``ppo``, with ``k > 0``).

Details 4, 5 and 8 live in the policy-update block GRPO shares with PPO
(:mod:`tinker_algos.algorithms.update`), which also names the logged keys: ``losses/policy``,
``losses/kl``, ``losses/total`` and the loss's own metrics as ``losses/<metric>``
(``losses/approx_kl``, ``losses/clipfrac``; see ``docs/algorithms/grpo.md``).

``algorithm.params`` (:class:`tinker_core.config.GRPOParams`): ``estimator_config`` (keyword
arguments of the estimator) and ``multi_agent``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tinker_algos.algorithms.base import Algorithm, StageContext
from tinker_algos.algorithms.common import check_estimator_config, resolve_estimator
from tinker_algos.algorithms.league import League
from tinker_algos.algorithms.learners import RoleLearners
from tinker_algos.algorithms.rollout_ahead import RolloutsAhead
from tinker_algos.algorithms.update import PolicyUpdate, optim_metrics
from tinker_algos.multiagent import (
    MultiAgentParams,
    MultiAgentRolloutResult,
    collect_for_grpo,
    evaluate_opponents,
    evaluate_stage,
    held_out_keys,
    stage_env_spec,
)
from tinker_algos.records.health import HealthMonitor, TiedRewardsHint, reward_spread
from tinker_algos.records.recording import phase, record_train
from tinker_algos.rollout.curriculum import Curriculum
from tinker_algos.rollout.episodes import RolloutResult
from tinker_algos.rollout.group_filter import GroupFilter, collect_filtered
from tinker_core.config import GRPOParams
from tinker_core.contracts import AdvantageInputs, Batch
from tinker_core.errors import ConfigError

if TYPE_CHECKING:
    from tinker_algos.distributed.rollouts import DistributedRollouts


class GRPO(Algorithm):
    name = "grpo"
    default_estimator = "grpo"
    default_loss = "importance_sampling"

    def __init__(self, ctx: StageContext) -> None:
        super().__init__(ctx)
        self.env_factory = ctx.require_env()
        self.params: GRPOParams = ctx.algo.params
        self.estimator_name, self.estimator = resolve_estimator(ctx, self.default_estimator, critic=False)
        self.update = PolicyUpdate(ctx, "grpo", self.default_loss, behaviour="sampler")
        # estimator_config keys the estimator does not take fail here, before the first rollout (as in ppo)
        two = AdvantageInputs(rewards_B=np.zeros(2), mask_B_T=np.ones((2, 1)), group_ids_B=np.zeros(2, dtype=np.int64))
        check_estimator_config(ctx, self.estimator, two, self.params.estimator_config)
        self.update.start()  # the reference policy: the weights are the stage's starting ones here
        self.multi_agent: MultiAgentParams | None = None
        self.env_spec = stage_env_spec(ctx)
        if self.env_spec is not None and self.env_spec.roles:
            # the config typed the keys; this checks them against the env (its roles, its opponents)
            self.multi_agent = MultiAgentParams.for_env(
                self.params.multi_agent, self.env_spec, where=f"{ctx.where}.params.multi_agent", lora=ctx.adapter is not None
            )
        elif self.params.multi_agent is not None:
            raise ConfigError([
                f"{ctx.where}.params.multi_agent: the env {getattr(self.env_spec, 'id', '?')!r} is single-agent "
                "(its spec has no roles); remove multi_agent or use a multi-agent env"
            ])
        # mode: learners -- one adapter, optimizer and update per role (ctx.trainer's adapter stays unused)
        self.learners = (
            RoleLearners(ctx, self.multi_agent, "grpo", self.default_loss)
            if self.multi_agent is not None and self.multi_agent.mode == "learners" else None
        )
        # mode: league -- the policy plays a pool of its past snapshots (and scripted members)
        self.league = (
            League(ctx, self.multi_agent, self.env_spec)
            if self.multi_agent is not None and self.multi_agent.mode == "league" and self.env_spec is not None else None
        )
        self.tied_hint = TiedRewardsHint(ctx.log)
        self.health = HealthMonitor(ctx.log)
        self.group_filter, self.curriculum = self.group_sampling(ctx)
        k = int(getattr(ctx.rollout_cfg, "max_staleness", 0) or 0)
        if k and self.multi_agent is not None:
            raise ConfigError(["rollout.max_staleness: sampling ahead is for single-agent envs; set it to 0 for a multi-agent env"])
        self.ahead: RolloutsAhead | DistributedRollouts | None = RolloutsAhead(ctx, k) if k else None
        if ctx.job.execution.rollout_workers:
            self.ahead = self.distributed_rollouts(k)
        # the two choices, made once: how the episodes are collected and how the update runs
        self.collector: Callable[[int], RolloutResult | MultiAgentRolloutResult] = self.choose_collector()
        self.learn_step: Callable[[Any], dict[str, float]] = (
            partial(self.learners.learn, learn_one=self.learn) if self.learners is not None else partial(self.learn, update=self.update)
        )

    def group_sampling(self, ctx: StageContext) -> tuple[GroupFilter | None, Curriculum | None]:
        """``rollout.dynamic_sampling`` and ``rollout.curriculum``: single-agent envs sampled in the
        job's process (with or without sampling ahead); anything else is a ConfigError naming them."""
        ds, cur = ctx.rollout_cfg.dynamic_sampling, ctx.rollout_cfg.curriculum
        on = [name for name, c in (("dynamic_sampling", ds), ("curriculum", cur)) if c.enabled]
        if not on:
            return None, None
        where = "rollout." + " and rollout.".join(on)
        if self.multi_agent is not None or ctx.plays_agent_program:
            what = "a multi-agent env" if self.multi_agent is not None else "agent programs"
            raise ConfigError([f"{where}: for single-agent envs; {ctx.where} plays {what}: set enabled: false"])
        if ctx.job.execution.rollout_workers:
            raise ConfigError([f"{where}: not supported on rollout workers yet (execution.rollout_workers: "
                               f"{ctx.job.execution.rollout_workers}); set enabled: false or rollout_workers: 0"])
        group_filter = GroupFilter(ds) if ds.enabled else None
        curriculum = None
        if cur.enabled:
            env = ctx.stage.env
            if env is None or self.env_spec is None:
                raise ConfigError(["rollout.curriculum: needs a registered env that declares difficulty levels (not an env served from an address)"])
            curriculum = Curriculum(cur, self.env_spec.difficulty_levels, env_id=env.id, where="rollout")
            self.draw_at_level(curriculum)
        return group_filter, curriculum

    def draw_at_level(self, curriculum: Curriculum) -> None:
        """Training envs at the curriculum's level (its kwargs over the stage's ``env.kwargs``)."""
        from tinker_algos.rollout.episodes import env_builder

        env = self.ctx.stage.env
        assert env is not None
        self.ctx.env_factory = self.env_factory = env_builder(env, curriculum.kwargs(env.kwargs))

    def distributed_rollouts(self, k: int) -> DistributedRollouts:
        """The stage's collector on rollout workers (``execution.rollout_workers``): single-agent
        envs only (a multi-agent game or an agent program samples in the job's process)."""
        from tinker_algos.distributed.rollouts import DistributedRollouts

        if self.multi_agent is not None or self.ctx.plays_agent_program:
            what = "a multi-agent env" if self.multi_agent is not None else "agent programs"
            raise ConfigError([f"execution.rollout_workers: rollout workers sample single-agent envs; {self.ctx.where} plays {what}, so set rollout_workers to 0"])
        assert self.ctx.runtime is not None, "a run with execution.rollout_workers holds a Runtime"
        return DistributedRollouts(self.ctx, k, self.ctx.runtime)

    def choose_collector(self) -> Callable[[int], RolloutResult | MultiAgentRolloutResult]:
        """How the stage's episodes are collected (chosen once, at construction): a league's matches,
        multi-agent play (self-play, an opponent, per-role learners), batches sampled ahead (in a
        thread or on rollout workers), or the step's own rollout (the policy's turns or agent programs)."""
        if self.league is not None:
            return self.league.collect
        if self.multi_agent is not None:
            return self.collect_multi_agent
        if self.ahead is not None:
            return self.collect_ahead
        return self.ctx.group_rollout

    def collect_multi_agent(self, step: int) -> MultiAgentRolloutResult:
        assert self.multi_agent is not None and self.env_spec is not None
        return collect_for_grpo(self.ctx, step, self.multi_agent, self.env_spec)

    def collect_ahead(self, step: int) -> RolloutResult:
        assert self.ahead is not None
        result = self.ahead.take(step)
        self.ahead.start(step)  # the batch of step + k, with the weights before this update
        return result

    # ---- one step -----------------------------------------------------------------------------
    def collect(self, step: int) -> RolloutResult | MultiAgentRolloutResult:
        """The step's episodes, by the stage's collector; with dynamic sampling, the groups kept."""
        result = self.collector(step)
        if self.group_filter is None:
            return result
        # dynamic sampling: refill rounds sample fresh tasks in this process with the current weights
        ds = self.ctx.rollout_cfg.dynamic_sampling
        kept, self.sampling_metrics = collect_filtered(
            result, lambda r, n: self.ctx.group_rollout(step, refill=r, tasks=n), self.group_filter, self.ctx.rollout_cfg.prompts_per_step, ds.max_rounds,
        )
        self.round0_metrics = result.metrics()
        return kept

    def rollout_metrics(self, result: RolloutResult | MultiAgentRolloutResult) -> dict[str, float]:
        """``env/*`` and ``rollout/*`` of the step's episodes; with dynamic sampling, round 0's (what
        the policy does on the step's usual prompts) and ``sampling/*``."""
        if self.group_filter is None:
            return result.metrics()
        return {**self.round0_metrics, **self.sampling_metrics}

    def evaluate(self) -> dict[str, float]:
        if self.multi_agent is None:
            return super().evaluate()
        adapters = self.learners.adapters if self.learners is not None else None
        if self.league is None:
            return evaluate_stage(self.ctx, self.multi_agent, adapters=adapters)
        # against every member too, and the Elo rating; the scripted members the stage's own
        # evaluation played (the same greedy games) are not played again
        each, per_opponent = evaluate_opponents(self.ctx, self.multi_agent, adapters=adapters)
        out = held_out_keys(each, per_opponent)
        play = partial(evaluate_stage, self.ctx, self.multi_agent, adapters=adapters)
        out.update(self.league.evaluate(lambda agent: play(opponent_agent=agent), self.ctx.algo.eval_size, played=each))
        return out

    def advantages(self, batch: Batch, token_rewards_B_T: np.ndarray | None) -> tuple[np.ndarray, dict[str, float]]:
        out = self.estimator(AdvantageInputs.from_batch(batch, token_rewards_B_T=token_rewards_B_T), **self.params.estimator_config)
        return np.asarray(out.advantages_B_T, dtype=np.float32), dict(out.metrics)

    def step(self, step: int) -> dict[str, float]:
        """Collect the episodes, then learn from them (advantages and one policy-gradient step, per
        role with learners), then the after-step bookkeeping."""
        t0 = time.perf_counter()
        with phase("rollout"):
            result = self.collect(step)
        metrics = self.rollout_metrics(result)
        metrics["time/rollout_s"] = time.perf_counter() - t0
        metrics.update(self.learn_step(result))
        self.after_step(step, metrics)
        return metrics

    def after_step(self, step: int, metrics: dict[str, float]) -> None:
        """The curriculum's move, the league's pool, the sample-ahead and health metrics, into ``metrics``."""
        if self.curriculum is not None:
            level = self.curriculum.level
            moved = self.curriculum.observe(metrics.get("env/success_rate", 0.0))
            metrics.update(self.curriculum.metrics(), **{"curriculum/level": float(level)})
            if moved is not None:
                self.ctx.log(f"curriculum: level {level} -> {moved} ({self.curriculum.levels[moved]}) after step {step + 1}")
                self.draw_at_level(self.curriculum)
        if self.league is not None:
            self.league.after_step(step)
            metrics.update(self.league.metrics())
        if self.ahead is not None:
            metrics.update(self.ahead.metrics())  # on rollout workers: sync/*, staleness/*, time/idle_frac/*
        metrics.update(self.health.observe(metrics))  # health/*, and a warning line per crossing

    def learn(
        self, result: RolloutResult | MultiAgentRolloutResult, update: PolicyUpdate, hint: TiedRewardsHint | None = None
    ) -> dict[str, float]:
        """One policy-gradient step of ``update``'s trainer on ``result``'s trajectories; its
        metrics. ``hint``: the tied-rewards hint to feed (default: the stage's)."""
        metrics: dict[str, float] = {}
        batch = update.batch(result, metrics)  # None: no token generated
        if batch is None:
            return metrics
        (hint or self.tied_hint).observe(batch.rewards_B, batch.group_ids_B)
        metrics["health/reward_spread"], metrics["health/tied_frac"] = reward_spread(batch.rewards_B, batch.group_ids_B)
        # the sampler is the behaviour policy; KL to the reference shapes the rewards (kl.mode: reward)
        before = update.behaviour(batch, metrics)
        adv, est_metrics = self.advantages(batch, before.token_rewards_B_T)
        metrics.update(update.advantage_metrics(adv, est_metrics, before.mask_B_T))
        record_train(result, self.ctx.policy.tokenizer, adv, before.mask_B_T)  # logging.rollouts (nothing when off)
        # the policy loss (default importance_sampling: -rho * A per token) and the KL term (kl.mode: loss);
        # zero-advantage rows (tied groups) skip the gradient pass
        terms, passed = update.loss_terms(batch, adv, before.ref_logprobs_B_T)
        metrics.update(terms)
        update.after(before, passed, metrics)  # kl/sample_train from the loss's own pass
        metrics.update(optim_metrics(update.ctx.trainer.optim_step()))
        return metrics

    def state_dict(self) -> dict[str, Any]:
        state = self.update.state_dict()
        if self.ahead is not None:
            state.update(self.ahead.state_dict())
        if self.learners is not None:
            state["learners"] = self.learners.state_dict()
        for part in (self.group_filter, self.curriculum):
            if part is not None:
                state.update(part.state_dict())
        state.update(self.health.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.update.load_state_dict(state)
        if self.ahead is not None:
            self.ahead.load_state_dict(state)
        if self.learners is not None:
            self.learners.load_state_dict(state.get("learners", {}))
        for part in (self.group_filter, self.curriculum):
            if part is not None:
                part.load_state_dict(state)
        self.health.load_state_dict(state)
        if self.curriculum is not None:
            self.draw_at_level(self.curriculum)

    def save_files(self, checkpoint_dir: Path) -> None:
        if self.learners is not None:
            self.learners.save(checkpoint_dir)
        if self.league is not None:
            self.league.save(checkpoint_dir)

    def load_files(self, checkpoint_dir: Path, *, with_optimizer: bool) -> None:
        if self.learners is not None:
            self.learners.load(checkpoint_dir, with_optimizer=with_optimizer)
        if self.league is not None and with_optimizer:  # mid-stage: the pool as it was
            self.league.load(checkpoint_dir)

