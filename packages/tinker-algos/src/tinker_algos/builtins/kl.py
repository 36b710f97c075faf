"""KL estimators k1, k2, k3 (Schulman's "Approximating KL divergence"), on numpy or torch.

For a token ``a`` sampled from the policy ``pi``, with ``x = log pi_ref(a) - log pi(a)``:

* ``k1 = -x``                      (unbiased for KL(pi || pi_ref), high variance, can be < 0)
* ``k2 = x^2 / 2``                 (biased, low variance; its gradient is the on-policy
  gradient of KL(pi || pi_ref))
* ``k3 = exp(x) - x - 1``          (unbiased, low variance, always >= 0)

The functions are elementwise and work on numpy arrays, torch tensors or floats alike (for
reward shaping on numpy, or as a differentiable loss term on torch). ``k3`` clamps ``x`` to
``[-clamp, clamp]`` (default 20) before the exponential so that it cannot overflow.

Used as losses (kind ``"kl"``, see :func:`tinker_algos.builtins.losses.kl_loss`) the per-token loss is
``k(logprobs, ref_logprobs) * m``.

Oracle: ``pi(a) = 0.5``, ``pi_ref(a) = 0.25`` -> ``k1 = 0.693147``, ``k2 = 0.240227``,
``k3 = 0.193147``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

DEFAULT_CLAMP = 20.0


def _is_torch(x: object) -> bool:
    return type(x).__module__.split(".", 1)[0] == "torch"


def log_ratio(logprobs: Any, ref_logprobs: Any) -> Any:
    """``x = ref_logprobs - logprobs`` (numpy arrays of any dtype become float64)."""
    if not _is_torch(logprobs) and not _is_torch(ref_logprobs):
        logprobs = np.asarray(logprobs, dtype=np.float64)
        ref_logprobs = np.asarray(ref_logprobs, dtype=np.float64)
    return ref_logprobs - logprobs


def k1(logprobs: Any, ref_logprobs: Any) -> Any:
    """``k1 = -x = log pi(a) - log pi_ref(a)``."""
    return -log_ratio(logprobs, ref_logprobs)


def k2(logprobs: Any, ref_logprobs: Any) -> Any:
    """``k2 = x^2 / 2``."""
    x = log_ratio(logprobs, ref_logprobs)
    return 0.5 * x * x


def k3(logprobs: Any, ref_logprobs: Any, *, clamp: float | None = DEFAULT_CLAMP) -> Any:
    """``k3 = exp(x) - x - 1``, computed as ``expm1(x) - x``; ``x`` clamped to ``[-clamp, clamp]``."""
    x = log_ratio(logprobs, ref_logprobs)
    if _is_torch(x):
        if clamp is not None:
            x = x.clamp(-clamp, clamp)
        return x.expm1() - x
    if clamp is not None:
        x = np.clip(x, -clamp, clamp)
    return np.expm1(x) - x


KL_ESTIMATORS: dict[str, Callable[..., Any]] = {"k1": k1, "k2": k2, "k3": k3}


def kl_estimate(logprobs: Any, ref_logprobs: Any, estimator: str = "k1") -> Any:
    """Elementwise KL estimate by name (``k1``, ``k2`` or ``k3``).

    For reward shaping: ``token_rewards_B_T - beta * kl_estimate(logp_B_T, ref_B_T) * mask_B_T``.
    """
    try:
        fn = KL_ESTIMATORS[estimator]
    except KeyError:
        raise ValueError(
            f"unknown KL estimator {estimator!r}; choose one of {', '.join(KL_ESTIMATORS)}"
        ) from None
    return fn(logprobs, ref_logprobs)
