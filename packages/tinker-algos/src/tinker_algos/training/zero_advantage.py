"""A policy-gradient update that skips the gradient pass of rows whose advantage is 0.

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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

import tinker_core.registry
from tinker_core.contracts import Batch, LossInputs

if TYPE_CHECKING:
    from tinker_algos.training.trainer import Trainer

#: aggregations whose value is a mean over all trained tokens or rows (so a skipped row only rescales it)
MEAN_AGGREGATIONS = frozenset({"token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"})


def vanishes_at_zero_advantage(loss: str) -> bool:
    """Whether the registered loss ``loss`` declared (``register(...,
    vanishes_at_zero_advantage=True)``) that its value and gradient are exactly 0 on a token
    whose advantage is 0."""
    return bool(tinker_core.registry.get_loss(loss).options.get("vanishes_at_zero_advantage"))


def take_rows(batch: Batch, rows: np.ndarray, *extra_B_T: np.ndarray, trim: bool = False) -> tuple[Batch, list[np.ndarray]]:
    """:meth:`Batch.take` of ``rows`` and the same rows of each ``extra_B_T``; with ``trim`` both
    are cut to the sub-batch's longest row (right padding only: the values are unchanged)."""
    sub = batch.take(rows, trim=trim)
    T = sub.shape[1]
    return sub, [x[rows, :T] for x in extra_B_T]


def policy_update(
    trainer: Trainer, batch: Batch, loss: str, agg: str, advantages_B_T: np.ndarray, loss_config: dict[str, Any], *, skip: bool,
    forward_skipped: bool = True, temperature: float = 1.0,
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """``trainer.forward_backward(batch, loss, ..., return_logprobs=True)``, skipping the gradient
    pass of zero-advantage rows when ``skip`` and the loss and aggregation allow it (see the module
    docstring). Returns the metrics, the pre-update logprobs and ``scored_B``: the rows those
    logprobs (and the loss's metrics) cover, every row unless a skipped row was not forwarded.
    ``temperature`` divides the logits of every pass (the policy at the sampling temperature)."""
    trained_B_T = batch.loss_mask_B_T * batch.attention_mask_B_T
    on_B = trained_B_T.sum(1) > 0
    live_B = (np.abs(advantages_B_T) * trained_B_T).sum(1) > 0
    rest = np.flatnonzero(on_B & ~live_B)
    every_row = np.ones(len(on_B), dtype=bool)
    if not (skip and agg in MEAN_AGGREGATIONS and live_B.any() and len(rest) and vanishes_at_zero_advantage(loss)):
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
