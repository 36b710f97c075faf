"""Hints a stage logs once when its training signal is missing, with the likely fixes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

FLAT_STEPS = 3
"""Steps in a row with every group's rewards tied before the stage says so (once)."""
FLAT_HINT = (
    "hint: for {n} steps in a row every group's episodes got the same reward, so every advantage "
    "is 0 and the policy learns nothing from the rewards (optim/grad_norm 0). Likely fixes: "
    "warm-start with an SFT stage, a larger rollout.group_size, an easier env (env.kwargs), or "
    "reward shaping (partial credit)."
)


def all_groups_tied(rewards_B: np.ndarray, group_ids_B: np.ndarray) -> bool:
    """Whether the episodes of each group all got the same reward (no group has a learning signal)."""
    rewards_B, group_ids_B = np.asarray(rewards_B), np.asarray(group_ids_B)
    return all(np.ptp(rewards_B[group_ids_B == g]) == 0 for g in np.unique(group_ids_B))


class TiedRewardsHint:
    """Logs :data:`FLAT_HINT` through ``log`` once, when every group's rewards tied for
    :data:`FLAT_STEPS` steps in a row (a group-relative estimator then gives no signal)."""

    def __init__(self, log: Callable[[str], None], steps: int = FLAT_STEPS) -> None:
        self.log = log
        self.steps = steps
        self.tied_steps = 0
        self.given = False

    def observe(self, rewards_B: np.ndarray, group_ids_B: np.ndarray) -> None:
        """One step's episode rewards and their groups."""
        self.tied_steps = self.tied_steps + 1 if all_groups_tied(rewards_B, group_ids_B) else 0
        if self.tied_steps >= self.steps and not self.given:
            self.given = True
            self.log(FLAT_HINT.format(n=self.steps))
