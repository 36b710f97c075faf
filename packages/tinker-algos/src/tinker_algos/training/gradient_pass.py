"""One ``Trainer.forward_backward`` call, micro-batch by micro-batch (:class:`GradientPass`):
the loss on each chunk of rows, weighted so that the chunks add up to the whole batch's value
(:func:`micro_weight`), its backward pass, and the metrics the call reports."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tinker_algos.training.shared_prefix import batch_logprobs

if TYPE_CHECKING:
    from tinker_algos.model.device import DeviceSpec
    from tinker_core.contracts import LossOutputs

__all__ = ["TOKEN_SUM", "GradientPass", "aggregate_chunk", "micro_weight", "trained_tokens"]

TOKEN_SUM = "token-sum"
"""The trainer-level aggregation ``sum(l * m)``: calls on parts of a batch add up to one on the whole."""


def aggregate_chunk(loss_B_T: torch.Tensor, mask_B_T: torch.Tensor, agg: str) -> torch.Tensor:
    """``loss_B_T`` reduced over ``mask_B_T`` with ``agg`` (tinker-core's modes or ``token-sum``)."""
    if agg == TOKEN_SUM:
        on = mask_B_T != 0
        return (torch.where(on, loss_B_T, torch.zeros_like(loss_B_T)) * mask_B_T).sum()
    from tinker_algos.training.aggregation import aggregate

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
