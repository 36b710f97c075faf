"""The policy-update block GRPO and PPO share: one place for what both do around the loss.

:class:`PolicyUpdate` holds, in the order a step uses them:

1. **The loss**, checked at construction (:func:`~tinker_algos.algorithms.common.resolve_loss`):
   a registered policy loss that takes ``loss_config``.
2. **The empty-batch guard** (:meth:`PolicyUpdate.batch`): a step whose episodes generated no
   token logs ``rollout/empty_batch: 1`` and trains nothing.
3. **The behaviour policy** (:meth:`PolicyUpdate.behaviour`), the logprobs the loss's ratio is
   taken against. ``"sampler"`` (GRPO): the sampler's own logprobs at the sampling temperature;
   the loss's forward pass divides the logits by the same temperature (so the ratio compares one
   policy at one temperature), and its logprobs before the update give ``kl/sample_train`` and
   ``rollout/logprob_mean_abs_diff`` without another pass, unless they are needed before it
   (``kl.mode: reward``) or dropout makes the training pass random (then a no-grad ``forward``
   at the sampling temperature gives them). When the mean absolute difference exceeds
   :data:`SAMPLER_MISMATCH_WARNING` the stage warns once: sampler and trainer disagree about
   the policy (an adapter the sampler does not apply, another dtype or kernel, stale weights).
   ``"trainer"`` (PPO): ``pi_old``, recomputed by the trainer at
   temperature 1 before the first update, replaces the sampler's logprobs.
4. **KL to the reference policy** (``algorithm.kl``, when ``coef > 0``): subtracted from the token
   rewards before the advantages (``mode: reward``) or added as a second loss term
   (``mode: loss``, :meth:`PolicyUpdate.loss_terms`).
5. **The loss terms** (:meth:`PolicyUpdate.loss_terms`): the policy loss (with the sampler as the
   behaviour policy, rows whose advantage is 0 skip the gradient pass when the loss was registered
   with ``vanishes_at_zero_advantage``: :func:`policy_update`, below) and the KL term.
6. **The metric names** both algorithms log: ``losses/policy``, ``losses/kl``, ``losses/total``
   (policy + ``kl.coef`` * kl; PPO adds its value loss), the loss's own metrics as
   ``losses/<metric>`` (``losses/approx_kl``, ``losses/clipfrac``, ...; a metric named like one of
   :data:`RESERVED_LOSS_KEYS` keeps its loss's name: ``losses/<loss>/<metric>``),
   ``advantages/*``, ``kl/policy_ref``, ``kl/sample_train`` and
   ``rollout/logprob_mean_abs_diff`` (:func:`sampler_agreement`), and the ``optim/*`` keys of an
   optimizer step (:func:`optim_metrics`, every algorithm's).

**Zero-advantage rows.** A policy-gradient update that skips the gradient pass of rows whose advantage is 0.

In GRPO a group whose episodes all got the same reward has advantage 0 on every token; with a
loss registered with ``vanishes_at_zero_advantage=True`` (the built-ins ``importance_sampling``:
``-rho A``; ``ppo``: the clipped ``-rho A``; ``cispo``: ``-sg(clip(rho)) A log pi``; or a
plugin's) such a row's loss and gradient are exactly 0, so running it through the gradient pass
only costs time. :func:`policy_update` runs the gradient pass on the other rows, with
``loss_scale`` set so the gradient and the loss are the whole batch's (token-mean: trained tokens
of those rows / all trained tokens; the ``seq-mean-*`` modes: rows / rows).

The skipped rows' logprobs are only ever read by metrics (``kl/sample_train``, the loss's clip
fractions). With ``forward_skipped`` a no-grad forward computes them and the metrics are the
whole batch's, token-weighted over all trained tokens as the trainer combines micro-batches;
without it (GRPO's default when there is no reference model: that pass was about 12% of a step)
nothing more runs, and those metrics cover the rows that train (``scored_B`` says which).

:func:`take_rows` (a batch's rows, with the same rows of other ``[B, T]`` arrays) is the one
row-selection helper of the algorithms (PPO's minibatches use it too).

(:func:`policy_update`, :func:`take_rows` and :func:`vanishes_at_zero_advantage` lived in
``tinker_algos.training.zero_advantage`` until wave 4; that path still imports this module.)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import torch

import tinker_core.registry
from tinker_algos.algorithms.base import StageContext
from tinker_algos.algorithms.common import ReferencePolicy, kl_to_reference, resolve_loss
from tinker_algos.records.health import logprob_agreement
from tinker_core.contracts import Batch, LossInputs, Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from tinker_algos.training.trainer import Trainer

logger = logging.getLogger(__name__)


class RolledOut(Protocol):
    """What the update needs of a rollout's result (single- or multi-agent)."""

    @property
    def trajectories(self) -> Sequence[Trajectory]: ...

    @property
    def groups(self) -> Sequence[TrajectoryGroup]: ...

    def batch(self, pad_token_id: int = 0) -> Batch: ...


SAMPLER_MISMATCH_WARNING = 0.1
"""``rollout/logprob_mean_abs_diff`` (nats per sampled token) above which the stage logs one warning:
on CPU in float32 the sampler and the trainer agree to about 1e-6; bfloat16 kernels on a GPU to a
few hundredths; a sampler that ignores the adapter or runs old weights differs by far more."""

RESERVED_LOSS_KEYS = frozenset({"policy", "kl", "total", "value", "value_clipfrac"})
"""``losses/<name>`` keys the update itself writes; a loss metric with one of these names is logged
as ``losses/<loss>/<name>`` instead."""


@dataclasses.dataclass
class Behaviour:
    """What a step's update starts from (:meth:`PolicyUpdate.behaviour`)."""

    batch: Batch
    """The step's batch; with the trainer as the behaviour policy its ``sampler_logprobs_B_T`` are
    ``pi_old``'s."""
    mask_B_T: np.ndarray
    """The trained tokens: ``loss_mask_B_T * attention_mask_B_T``."""
    logprobs_B_T: np.ndarray | None
    """The trainer's logprobs before the update; None until the loss's own pass gives them."""
    ref_logprobs_B_T: np.ndarray | None
    """The reference policy's logprobs (None without a KL penalty)."""
    token_rewards_B_T: np.ndarray | None
    """The rewards minus ``kl.coef * KL`` per token (``kl.mode: reward``), for the estimator."""


class PolicyUpdate:
    """The shared block of GRPO (``behaviour="sampler"``) and PPO (``behaviour="trainer"``); see
    the module docstring. Call :meth:`start` once the stage's starting weights are in place."""

    def __init__(self, ctx: StageContext, algorithm: str, default_loss: str, behaviour: Literal["sampler", "trainer"]) -> None:
        self.ctx = ctx
        self.kl = ctx.algo.kl
        self.loss = resolve_loss(ctx, algorithm, default_loss, "policy")
        self.loss_vanishes = vanishes_at_zero_advantage(self.loss)  # looked up once: whether tied rows may skip the gradient pass
        self.behaviour_policy = behaviour
        self.deterministic_pass = not has_dropout(ctx.policy.module)
        self.reference: ReferencePolicy | None = None
        self.warned_mismatch = False

    def start(self) -> None:
        """Copy the reference policy (with a KL penalty): the stage's current weights."""
        if self.kl.coef > 0 and self.reference is None:
            self.reference = ReferencePolicy(self.ctx)

    # ---- before the advantages -----------------------------------------------------------------
    def batch(self, result: RolledOut, metrics: dict[str, float], *, generated_only: bool = False) -> Batch | None:
        """The step's batch, group after group (:meth:`Batch.from_groups`; ``generated_only``: without
        the episodes that generated no token), or None (and ``rollout/empty_batch: 1`` in
        ``metrics``) when no episode generated a token: the step then trains nothing."""
        if sum(t.num_generated for t in result.trajectories) == 0:
            metrics["optim/skipped_steps"] = float(self.ctx.trainer.skipped_steps)
            metrics["rollout/empty_batch"] = 1.0
            return None
        pad = self.ctx.policy.pad_token_id
        if generated_only:
            return Batch.from_groups([g.generated() for g in result.groups], pad_token_id=pad)
        return result.batch(pad_token_id=pad)

    def behaviour(self, batch: Batch, metrics: dict[str, float]) -> Behaviour:
        """The behaviour policy's logprobs, the reference's and the KL-shaped token rewards, with
        ``kl/policy_ref`` and (with the trainer as the behaviour policy) ``kl/sample_train``."""
        trainer, temperature = self.ctx.trainer, self.ctx.rollout_cfg.temperature
        mask = batch.loss_mask_B_T * batch.attention_mask_B_T
        logprobs: np.ndarray | None
        if self.behaviour_policy == "trainer":
            logprobs = trainer.forward(batch)
            at_temp = logprobs if temperature == 1.0 else trainer.forward(batch, temperature=temperature)
            metrics.update(sampler_agreement(batch, at_temp, mask))
            batch = dataclasses.replace(batch, sampler_logprobs_B_T=logprobs * mask)
        else:
            reuse = self.deterministic_pass and not (self.reference is not None and self.kl.mode == "reward")
            logprobs = None if reuse else trainer.forward(batch, temperature=temperature)
        ref = token_rewards = None
        if self.reference is not None:
            ref = self.reference.logprobs(batch)
            if logprobs is not None:
                metrics["kl/policy_ref"], token_rewards = kl_to_reference(logprobs, ref, batch, mask, self.kl)
        return Behaviour(batch, mask, logprobs, ref, token_rewards)

    @staticmethod
    def advantage_metrics(advantages_B_T: np.ndarray, estimator_metrics: dict[str, float], mask_B_T: np.ndarray) -> dict[str, float]:
        """``advantages/<estimator metric>`` and ``advantages/abs_mean`` (mean ``|A|`` over the
        trained tokens)."""
        out = {f"advantages/{k}": float(v) for k, v in estimator_metrics.items()}
        out["advantages/abs_mean"] = float(np.abs(advantages_B_T).sum() / max(float(mask_B_T.sum()), 1.0))
        return out

    # ---- the update ----------------------------------------------------------------------------
    def loss_terms(
        self, batch: Batch, advantages_B_T: np.ndarray, ref_logprobs_B_T: np.ndarray | None
    ) -> tuple[dict[str, float], tuple[np.ndarray, np.ndarray] | None]:
        """Add the gradients of the policy loss and the KL term (``kl.mode: loss``) on ``batch``
        (the step's, or a minibatch of it). Returns their ``losses/*`` metrics and what the
        policy loss's pass gave: ``(logprobs_B_T, scored_B)`` with the sampler as the behaviour
        policy, else None."""
        trainer, algo = self.ctx.trainer, self.ctx.algo
        if self.behaviour_policy == "sampler":
            fb, logprobs, scored_B = policy_update(
                trainer, batch, self.loss, algo.aggregation, advantages_B_T, dict(algo.loss_config),
                skip=self.deterministic_pass, forward_skipped=ref_logprobs_B_T is not None, vanishes=self.loss_vanishes,
                temperature=self.ctx.rollout_cfg.temperature,
            )
            passed: tuple[np.ndarray, np.ndarray] | None = (logprobs, scored_B)
        else:
            fb, passed = trainer.forward_backward(batch, self.loss, agg=algo.aggregation, advantages_B_T=advantages_B_T, **algo.loss_config), None
        terms = {"losses/policy": fb["loss"]}
        for key, value in fb.items():
            if key.startswith(f"{self.loss}/"):
                name = key.split("/", 1)[1]
                terms[f"losses/{self.loss}/{name}" if name in RESERVED_LOSS_KEYS else f"losses/{name}"] = value
        total = fb["loss"]
        if ref_logprobs_B_T is not None and self.kl.mode == "loss":
            fk = trainer.forward_backward(batch, self.kl.estimator, agg=algo.aggregation, loss_scale=self.kl.coef, ref_logprobs_B_T=ref_logprobs_B_T)
            terms["losses/kl"] = fk["loss"]
            total += self.kl.coef * fk["loss"]
        terms["losses/total"] = total
        return terms, passed

    def after(self, before: Behaviour, passed: tuple[np.ndarray, np.ndarray] | None, metrics: dict[str, float]) -> None:
        """With the sampler as the behaviour policy: ``kl/sample_train`` (and ``kl/policy_ref``
        when it waited for them) from the logprobs before the update, those of the loss's pass
        when no separate pass ran (over the rows it scored)."""
        logprobs, mask = before.logprobs_B_T, before.mask_B_T
        if logprobs is None:
            assert passed is not None, "the sampler is the behaviour policy: loss_terms hands back its pass's logprobs"
            logprobs, scored_B = passed
            if before.ref_logprobs_B_T is not None:
                metrics["kl/policy_ref"], _ = kl_to_reference(logprobs, before.ref_logprobs_B_T, before.batch, mask, self.kl)
            mask = mask * scored_B[:, None]
        metrics.update(sampler_agreement(before.batch, logprobs, mask))
        diff = metrics["rollout/logprob_mean_abs_diff"]
        if diff > SAMPLER_MISMATCH_WARNING and not self.warned_mismatch:
            self.warned_mismatch = True
            logger.warning(
                "%s: the sampler's and the trainer's logprobs of the sampled tokens differ by %.3g nats on "
                "average (rollout/logprob_mean_abs_diff > %g): they disagree about the policy -- an adapter "
                "the sampler does not apply, another dtype or kernel, or stale sampler weights; the "
                "importance ratio then corrects for a policy that was not sampled",
                self.ctx.where, diff, SAMPLER_MISMATCH_WARNING,
            )

    # ---- checkpoint state ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return self.reference.state_dict() if self.reference is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.reference is not None:
            self.reference.load_state_dict(state)


def has_dropout(module: torch.nn.Module) -> bool:
    """Whether a training-mode forward pass of ``module`` is random (a dropout with ``p > 0``, a
    LoRA adapter's included, or an attention dropout in a model config)."""
    for m in module.modules():
        if isinstance(m, torch.nn.Dropout) and m.p > 0:
            return True
        config = getattr(m, "config", None)
        if config is not None and float(getattr(config, "attention_dropout", 0.0) or 0.0) > 0:
            return True
    return False


def sampler_agreement(batch: Batch, logprobs_B_T: np.ndarray, mask_B_T: np.ndarray) -> dict[str, float]:
    """``kl/sample_train`` (k3 of KL(sampler || trainer)) and ``rollout/logprob_mean_abs_diff``."""
    agree = logprob_agreement(batch.sampler_logprobs_B_T, logprobs_B_T, mask_B_T)
    return {"kl/sample_train": float(agree["kl_k3"]), "rollout/logprob_mean_abs_diff": float(agree["mean_abs_diff"])}


def optim_metrics(opt: dict[str, float]) -> dict[str, float]:
    """``optim/grad_norm``, ``optim/lr``, ``optim/skipped_steps`` of one ``Trainer.optim_step``
    (and ``optim/grad_scale`` under fp16-mixed)."""
    metrics = {"optim/grad_norm": opt["grad_norm"], "optim/lr": opt["lr"], "optim/skipped_steps": float(opt["skipped_steps"])}
    if "grad_scale" in opt:
        metrics["optim/grad_scale"] = opt["grad_scale"]
    return metrics


#: aggregations whose value is a mean over all trained tokens or rows (so a skipped row only rescales it)
MEAN_AGGREGATIONS = frozenset({"token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"})


def vanishes_at_zero_advantage(loss: str) -> bool:
    """Whether the registered loss ``loss`` declared (``register(...,
    vanishes_at_zero_advantage=True)``) that its value and gradient are exactly 0 on a token
    whose advantage is 0."""
    return tinker_core.registry.get_loss(loss).vanishes_at_zero_advantage


def take_rows(batch: Batch, rows: np.ndarray, *extra_B_T: np.ndarray, trim: bool = False) -> tuple[Batch, list[np.ndarray]]:
    """:meth:`Batch.take` of ``rows`` and the same rows of each ``extra_B_T``; with ``trim`` both
    are cut to the sub-batch's longest row (right padding only: the values are unchanged)."""
    sub = batch.take(rows, trim=trim)
    T = sub.shape[1]
    return sub, [x[rows, :T] for x in extra_B_T]


def policy_update(
    trainer: Trainer, batch: Batch, loss: str, agg: str, advantages_B_T: np.ndarray, loss_config: dict[str, Any], *, skip: bool,
    forward_skipped: bool = True, temperature: float = 1.0, vanishes: bool | None = None,
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """``trainer.forward_backward(batch, loss, ..., return_logprobs=True)``, skipping the gradient
    pass of zero-advantage rows when ``skip`` and the loss and aggregation allow it (see the module
    docstring). Returns the metrics, the pre-update logprobs and ``scored_B``: the rows those
    logprobs (and the loss's metrics) cover, every row unless a skipped row was not forwarded.
    ``temperature`` divides the logits of every pass (the policy at the sampling temperature).
    ``vanishes``: :func:`vanishes_at_zero_advantage` of ``loss`` when the caller looked it up
    already (None: looked up here)."""
    trained_B_T = batch.loss_mask_B_T * batch.attention_mask_B_T
    on_B = trained_B_T.sum(1) > 0
    live_B = (np.abs(advantages_B_T) * trained_B_T).sum(1) > 0
    rest = np.flatnonzero(on_B & ~live_B)
    every_row = np.ones(len(on_B), dtype=bool)
    if vanishes is None and skip:
        vanishes = vanishes_at_zero_advantage(loss)
    if not (skip and agg in MEAN_AGGREGATIONS and live_B.any() and len(rest) and vanishes):
        fb, logprobs = trainer.forward_backward(
            batch, loss, agg=agg, advantages_B_T=advantages_B_T, return_logprobs=True, temperature=temperature, **loss_config
        )
        return fb, logprobs, every_row
    live, idle = np.flatnonzero(live_B), np.flatnonzero(~live_B)
    tokens_all, tokens_live = float(trained_B_T.sum()), float(trained_B_T[live].sum())
    scale = tokens_live / tokens_all if agg == "token-mean" else float(live_B.sum()) / float(on_B.sum())
    live_batch, (adv_live,) = take_rows(batch, live, advantages_B_T)
    fb, lp_live = trainer.forward_backward(
        live_batch, loss, agg=agg, advantages_B_T=adv_live,
        loss_scale=scale, return_logprobs=True, temperature=temperature, **loss_config,
    )
    logprobs_B_T = np.zeros(batch.tokens_B_T.shape, dtype=np.float32)
    logprobs_B_T[live] = lp_live
    metrics = dict(fb)
    metrics["loss"] = fb["loss"] * scale
    metrics["num_tokens"], metrics["num_sequences"] = tokens_all, float(on_B.sum())
    if not forward_skipped:
        return metrics, logprobs_B_T, live_B
    idle_batch, _ = take_rows(batch, idle)
    lp_idle = trainer.forward(idle_batch, temperature=temperature)
    logprobs_B_T[idle] = lp_idle
    # the whole batch's metrics: the skipped rows add 0 to the loss and their share to the loss's metrics
    mask_idle = torch.as_tensor(trained_B_T[idle], dtype=torch.float32)
    out = tinker_core.registry.get_loss(loss).obj(
        LossInputs(
            logprobs_B_T=torch.as_tensor(lp_idle), mask_B_T=mask_idle,
            sampling_logprobs_B_T=torch.as_tensor(idle_batch.sampler_logprobs_B_T, dtype=torch.float32),
            advantages_B_T=torch.zeros_like(mask_idle),
        ),
        **loss_config,
    )
    tokens_idle = float(mask_idle.sum())
    for k, v in (out.metrics or {}).items():
        key = f"{loss}/{k}"
        metrics[key] = (fb.get(key, 0.0) * tokens_live + float(v) * tokens_idle) / tokens_all
    return metrics, logprobs_B_T, every_row
