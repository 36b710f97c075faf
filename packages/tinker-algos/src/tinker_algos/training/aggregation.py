"""Loss aggregation: reduce a per-token loss ``l_B_T`` to a scalar with a mask ``m_B_T``.

``B'`` is the number of sequences with at least one unmasked token (``sum_t m > 0``), ``T`` the
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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinker_core.contracts import AGGREGATION_MODES


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
