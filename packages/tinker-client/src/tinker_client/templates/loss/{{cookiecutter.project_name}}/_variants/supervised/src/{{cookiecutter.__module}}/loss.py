"""The supervised loss ``{{ cookiecutter.__registered_name }}``. THIS is the file to edit.

The loss here is minimal but correct, so the package works end to end from the start: the
focal negative log-likelihood (Lin et al., 2017, applied to target tokens). It is the usual
cross-entropy, down-weighted on tokens the model already predicts well, so that training
concentrates on the hard ones. With ``p = exp(logprobs)`` the probability of the target token
and ``w`` its weight (``weights_B_T``, 1 when absent)::

    loss = -w * (1 - p) ** gamma * logprobs          gamma = 0 gives the cross-entropy

The trainer aggregates ``loss_B_T`` over the target tokens with the job's
``algorithm.aggregation``; ``algorithm: sft`` uses the loss named in ``algorithm.loss``.

To make it yours, change :func:`loss` (its keyword arguments are the job's
``algorithm.loss_config``), then the hand-worked numbers in ``tests/test_loss.py``. Keep the
contract that ``tinker_core.check_loss`` checks: a finite ``[B, T]`` float tensor,
differentiable in ``logprobs_B_T``, with exactly zero gradient where ``mask_B_T`` is 0, and
inputs off the mask changing nothing.
"""

from __future__ import annotations

import torch
from tinker_core import LossInputs, LossOutputs

__all__ = ["loss"]

_TINY = 1e-12  # keeps (1 - p) ** gamma differentiable when p rounds to 1


def loss(inputs: LossInputs, *, gamma: float = 2.0) -> LossOutputs:
    """The loss OpenTinker calls: ``loss(inputs, **loss_config)``.

    Args:
        inputs: ``logprobs_B_T`` (differentiable), ``mask_B_T`` and optionally ``weights_B_T``.
        gamma: the focusing exponent (>= 0); 0 is the plain (weighted) cross-entropy.
    """
    if not gamma >= 0:
        raise ValueError(f"loss {{ cookiecutter.__registered_name }}: gamma must be >= 0, got {gamma}")
    raw = inputs.logprobs_B_T
    on = torch.as_tensor(inputs.mask_B_T, device=raw.device) > 0
    zero = torch.zeros((), dtype=raw.dtype, device=raw.device)
    # Select with torch.where (never multiply by the mask): off the mask the inputs may hold
    # anything, even -inf, and must change neither the loss nor the gradient.
    logprobs = torch.where(on, raw, zero)
    weights = torch.ones_like(logprobs) if inputs.weights_B_T is None else torch.as_tensor(
        inputs.weights_B_T, dtype=raw.dtype, device=raw.device
    )
    weights = torch.where(on, weights, zero)
    miss = (-torch.expm1(logprobs.clamp(max=0.0))).clamp_min(_TINY)  # 1 - p
    focus = miss**gamma
    loss_B_T = -weights * focus * logprobs
    n = max(int(on.sum()), 1)
    metrics = {
        "nll": float(-logprobs.detach()[on].sum() / n),
        "focus_mean": float(focus.detach()[on].sum() / n),
    }
    return LossOutputs(loss_B_T, metrics)
