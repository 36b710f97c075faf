"""The discounted return-to-go over the trained tokens: what both the advantages and the
critic's regression target (``returns_B_T``) are built from."""

from __future__ import annotations

import numpy as np

__all__ = ["returns_to_go"]


def returns_to_go(rewards_B_T: np.ndarray, mask_B_T: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """``G[i, t] = r[i, t] + gamma * G[i, t']`` over the trained tokens ``t < t'`` of each row; 0 off the mask.

    A reward on an untrained position (an environment token between turns) counts for the
    last trained token before it; rewards before a row's first trained token are ignored.
    """
    rewards = np.asarray(rewards_B_T, dtype=np.float64)
    on_B_T = np.asarray(mask_B_T) > 0
    B, T = on_B_T.shape
    out = np.zeros((B, T))
    running_B = np.zeros(B)  # return from the next trained token on
    pending_B = np.zeros(B)  # rewards seen on untrained positions since then
    for t in range(T - 1, -1, -1):
        pending_B = pending_B + rewards[:, t]
        on = on_B_T[:, t]
        running_B = np.where(on, pending_B + gamma * running_B, running_B)
        pending_B = np.where(on, 0.0, pending_B)
        out[:, t] = np.where(on, running_B, 0.0)
    return out
