"""One ``Trainer.forward_backward`` call, micro-batch by micro-batch (:class:`GradientPass`):
the loss on each chunk of rows, weighted so that the chunks add up to the whole batch's value
(:func:`micro_weight`), its backward pass, and the metrics the call reports.

**Loss aggregation** (:func:`aggregate`): reduce a per-token loss ``l_B_T`` to a scalar with a mask
``m_B_T``. ``B'`` is the number of sequences with at least one unmasked token (``sum_t m > 0``), ``T`` the
padded length unless given.

* ``token-mean``              = ``sum(l * m) / sum(m)``
* ``seq-mean-token-mean``     = ``(1 / B') * sum_i [ sum_t(l * m) / sum_t(m) ]``
* ``seq-mean-token-sum``      = ``(1 / B') * sum_i sum_t(l * m)``
* ``seq-mean-token-sum-norm`` = ``seq-mean-token-sum / T`` (Dr.GRPO's constant normaliser)

Rows without a trained token contribute nothing; an all-masked batch aggregates to 0 (with a
zero, finite gradient). Masked positions are selected out (not multiplied), so a NaN or inf
there never leaks into the result. Works on torch tensors (differentiably) and numpy arrays.

Oracle: ``l = [[1, 2, 3], [4, 0, 0]]``, ``m = [[1, 1, 1], [1, 0, 0]]`` -> 2.5, 3.0, 5.0 and
1.666667 (``T = 3``).

The trainer adds ``token-sum`` (:data:`TOKEN_SUM`, ``sum(l * m)``) for data-parallel learners.
(:func:`aggregate` lived in ``tinker_algos.training.aggregation`` until wave 4; that path still
imports this module.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tinker_algos.training.shared_prefix import batch_logprobs
from tinker_core.contracts import AGGREGATION_MODES

if TYPE_CHECKING:
    from tinker_algos.model.device import DeviceSpec
    from tinker_core.contracts import LossOutputs

__all__ = ["TOKEN_SUM", "GradientPass", "aggregate", "aggregate_chunk", "check_mode", "micro_weight", "trained_tokens"]

TOKEN_SUM = "token-sum"
"""The trainer-level aggregation ``sum(l * m)``: calls on parts of a batch add up to one on the whole."""


def check_mode(mode: str) -> str:
    """Return ``mode`` if it is an aggregation mode, else raise naming the allowed ones."""
    if mode not in AGGREGATION_MODES:
        raise ValueError(
            f"unknown loss aggregation mode {mode!r}; allowed modes are "
            f"{', '.join(AGGREGATION_MODES)}"
        )
    return mode


def aggregate(loss_B_T: Any, mask_B_T: Any, mode: str, *, T: int | None = None) -> Any:
    """Aggregate ``loss_B_T`` over ``mask_B_T`` with ``mode`` (see the module docstring).

    Returns a 0-d torch tensor for torch input, else a Python float.
    """
    check_mode(mode)
    is_torch = type(loss_B_T).__module__.split(".", 1)[0] == "torch"
    mask: Any
    where: Any
    if is_torch:
        import torch

        mask = torch.as_tensor(mask_B_T, device=loss_B_T.device).to(loss_B_T.dtype)
        where = torch.where
    else:
        loss_B_T = np.asarray(loss_B_T, dtype=np.float64)
        mask = np.asarray(mask_B_T, dtype=np.float64)
        where = np.where
    if loss_B_T.ndim != 2 or tuple(loss_B_T.shape) != tuple(mask.shape):
        raise ValueError(
            f"aggregate needs loss_B_T and mask_B_T of one 2-D shape [B, T]; got "
            f"{tuple(loss_B_T.shape)} and {tuple(mask.shape)}"
        )
    if T is None:
        T = int(loss_B_T.shape[-1])
    if T <= 0:
        raise ValueError(f"aggregate: T must be a positive token count, got {T}")

    on = mask != 0
    masked = where(on, loss_B_T, 0.0) * mask  # select first: NaN off the mask never leaks
    tokens_B = mask.sum(-1)
    rows_B = tokens_B != 0
    n_rows = rows_B.sum()
    n_rows = n_rows + (n_rows == 0)  # avoid 0/0; the numerator is 0 then
    if mode == "token-mean":
        total = tokens_B.sum()
        out = masked.sum() / (total + (total == 0))
    elif mode == "seq-mean-token-mean":
        per_seq_B = masked.sum(-1) / where(rows_B, tokens_B, 1.0)
        out = per_seq_B.sum() / n_rows
    else:
        out = masked.sum() / n_rows
        if mode == "seq-mean-token-sum-norm":
            out = out / T
    return out if is_torch else float(out)


def aggregate_chunk(loss_B_T: torch.Tensor, mask_B_T: torch.Tensor, agg: str) -> torch.Tensor:
    """``loss_B_T`` reduced over ``mask_B_T`` with ``agg`` (tinker-core's modes or ``token-sum``)."""
    if agg == TOKEN_SUM:
        on = mask_B_T != 0
        return (torch.where(on, loss_B_T, torch.zeros_like(loss_B_T)) * mask_B_T).sum()
    return aggregate(loss_B_T, mask_B_T, agg)


def micro_weight(agg: str, mask_mb: torch.Tensor, total_tokens: float, total_rows: float) -> float:
    """Weight of one row chunk so that chunk results add up to the whole batch's value."""
    if agg == TOKEN_SUM:
        return 1.0
    if agg == "token-mean":
        return float(mask_mb.sum()) / total_tokens
    return float((mask_mb.sum(-1) > 0).sum()) / total_rows  # seq-mean-* modes


def trained_tokens(mask_B_T: torch.Tensor) -> float:
    """The number of trained tokens of a batch; a batch with none is an error (it cannot train)."""
    total_tokens = float(mask_B_T.sum())
    if total_tokens == 0:
        raise ValueError(
            "forward_backward got a batch with no trained tokens (loss_mask_B_T * "
            "attention_mask_B_T is all 0); drop such batches before training"
        )
    return total_tokens


@dataclass
class GradientPass:
    """One ``forward_backward`` call, micro-batch by micro-batch: the loss on each chunk of rows,
    its backward pass, and the sums the call reports (the aggregated loss, the loss's metrics,
    the logprobs when asked)."""

    loss: str
    loss_fn: Callable[..., LossOutputs]
    loss_config: dict[str, Any]
    agg: str
    loss_scale: float
    tokens: torch.Tensor
    attn: torch.Tensor
    mask: torch.Tensor
    consts: dict[str, torch.Tensor | None]
    spec: DeviceSpec
    temperature: float
    share_prefix: bool
    chunked_logprobs: bool
    #: the model's activation checkpointing, as the trainer set it from its config
    checkpointing: bool
    total_tokens: float
    total_rows: float
    logprobs_B_T: np.ndarray | None
    #: fp16-mixed: scales the loss before backward (the trainer unscales before the update)
    scaler: torch.amp.GradScaler | None = None
    agg_total: float = 0.0
    nonfinite: bool = False
    loss_metrics: dict[str, float] = field(default_factory=dict)

    def run(self, module: torch.nn.Module, micro_batch_size: int) -> None:
        """Every chunk of ``micro_batch_size`` rows in order; after a NaN/inf loss the rest only score."""
        B = self.tokens.shape[0]
        for start in range(0, B, micro_batch_size):
            sl = slice(start, min(B, start + micro_batch_size))
            if self.nonfinite or float(self.mask[sl].sum()) == 0:
                # no gradient from these rows (none trained, or a NaN/inf loss came before)
                self._score(module, sl)
                continue
            self._backward(module, sl)

    def _logprobs(self, module: torch.nn.Module, sl: slice) -> torch.Tensor:
        """The rows' logprobs (a prompt they share run once, see :mod:`tinker_algos.training.shared_prefix`);
        at the untrained tokens only when the caller asked for logprobs (no loss reads them)."""
        return batch_logprobs(
            module, self.tokens[sl], self.attn[sl], self.mask[sl], temperature=self.temperature, spec=self.spec,
            share=self.share_prefix, only_trained=self.logprobs_B_T is None, chunked=self.chunked_logprobs,
            checkpointing=self.checkpointing,
        )

    def _score(self, module: torch.nn.Module, sl: slice) -> None:
        """The rows' logprobs under ``no_grad`` (when the caller asked for logprobs)."""
        if self.logprobs_B_T is not None:
            with torch.no_grad():
                lp_nograd = self._logprobs(module, sl)
            self.logprobs_B_T[sl] = lp_nograd.float().cpu().numpy()

    def _backward(self, module: torch.nn.Module, sl: slice) -> None:
        """The loss on the rows ``sl``, weighted into the whole batch's value, and its backward pass."""
        from tinker_core.contracts import LossInputs

        m_mb = self.mask[sl]
        lp = self._logprobs(module, sl)
        if self.logprobs_B_T is not None:
            self.logprobs_B_T[sl] = lp.detach().float().cpu().numpy()
        inputs = LossInputs(
            logprobs_B_T=lp,
            mask_B_T=m_mb,
            **{k: (v[sl] if v is not None else None) for k, v in self.consts.items()},
        )
        out = self.loss_fn(inputs, **self.loss_config)
        agg_mb = aggregate_chunk(out.loss_B_T, m_mb, self.agg)
        weight = micro_weight(self.agg, m_mb, self.total_tokens, self.total_rows)
        contribution = agg_mb * weight
        value = float(contribution.detach())
        for k, v in (out.metrics or {}).items():
            self.loss_metrics[k] = self.loss_metrics.get(k, 0.0) + float(v) * (float(m_mb.sum()) / self.total_tokens)
        if not math.isfinite(value):
            self.nonfinite = True
            self.agg_total = float("nan")
            return  # never backpropagate a NaN/inf; later chunks only score (see run)
        if not contribution.requires_grad:
            raise ValueError(
                f"loss {self.loss!r} does not depend on the policy's logprobs (no gradient); "
                "a value loss needs a value head, which this Trainer does not have"
            )
        scaled = contribution * self.loss_scale
        (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
        self.agg_total += value

    def metrics(self) -> dict[str, float]:
        """The call's metrics (see the module docstring)."""
        metrics = {
            "loss": self.agg_total,
            "num_tokens": self.total_tokens,
            "num_sequences": self.total_rows,
            "nonfinite": 1.0 if self.nonfinite else 0.0,
        }
        metrics.update({f"{self.loss}/{k}": v for k, v in self.loss_metrics.items()})
        return metrics
