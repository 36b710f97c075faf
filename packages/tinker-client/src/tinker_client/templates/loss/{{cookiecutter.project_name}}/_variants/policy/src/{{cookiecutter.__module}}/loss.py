"""The policy loss ``{{ cookiecutter.__registered_name }}``. THIS is the file to edit.

The loss here is minimal but correct, so the package works end to end from the start:
REINFORCE with a capped importance weight. The tokens were sampled by the rollout's policy
(``sampling_logprobs_B_T``); by the time the trainer computes ``logprobs_B_T`` the policy may
already differ a little, so each token's gradient is reweighted by the ratio of the two
probabilities, capped to bound the update. Per response token::

    rho  = exp(logprobs - sampling_logprobs)        the importance ratio (no gradient)
    w    = min(rho, cap)
    loss = -w * advantage * logprobs                gradient: -w * advantage * d logprobs

On-policy (``rho = 1``) this is exactly REINFORCE with the estimator's advantages. The trainer
aggregates ``loss_B_T`` over the response tokens with the job's ``algorithm.aggregation``.

To make it yours, change :func:`loss` (its keyword arguments are the job's
``algorithm.loss_config``), then the hand-worked numbers in ``tests/test_loss.py``. Keep the
contract that ``tinker_core.check_loss`` checks: a finite ``[B, T]`` float tensor,
differentiable in ``logprobs_B_T``, with exactly zero gradient where ``mask_B_T`` is 0, and
inputs off the mask changing nothing.
"""

from __future__ import annotations

from typing import Any

import torch
from tinker_core import LossInputs, LossOutputs

__all__ = ["LOG_RATIO_CLAMP", "loss"]

LOG_RATIO_CLAMP = 20.0  # keeps exp() finite whatever the inputs


def _on_mask(value: Any, field: str, like: torch.Tensor, on: torch.Tensor) -> torch.Tensor:
    if value is None:
        raise ValueError(f"loss {{ cookiecutter.__registered_name }} needs inputs.{field}; it is a policy loss (algorithm grpo or ppo)")
    t = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    return torch.where(on, t, torch.zeros((), dtype=like.dtype, device=like.device))


def loss(inputs: LossInputs, *, cap: float = 2.0) -> LossOutputs:
    """The loss OpenTinker calls: ``loss(inputs, **loss_config)``.

    Args:
        inputs: ``logprobs_B_T`` (differentiable), ``mask_B_T``, ``sampling_logprobs_B_T`` and
            ``advantages_B_T``.
        cap: the largest importance weight (> 0).
    """
    if not cap > 0:
        raise ValueError(f"loss {{ cookiecutter.__registered_name }}: cap must be > 0, got {cap}")
    on = torch.as_tensor(inputs.mask_B_T, device=inputs.logprobs_B_T.device) > 0
    # Select with torch.where (never multiply by the mask): off the mask the inputs may hold
    # anything, even -inf, and must change neither the loss nor the gradient.
    logprobs = _on_mask(inputs.logprobs_B_T, "logprobs_B_T", inputs.logprobs_B_T, on)
    sampling = _on_mask(inputs.sampling_logprobs_B_T, "sampling_logprobs_B_T", logprobs, on)
    advantages = _on_mask(inputs.advantages_B_T, "advantages_B_T", logprobs, on)
    ratio = torch.exp((logprobs.detach() - sampling).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    weight = ratio.clamp(max=cap)
    loss_B_T = -weight * advantages * logprobs
    n = max(int(on.sum()), 1)
    metrics = {
        "ratio_mean": float(ratio[on].sum() / n),
        "capped_frac": float((ratio[on] > cap).sum() / n),
    }
    return LossOutputs(loss_B_T, metrics)
