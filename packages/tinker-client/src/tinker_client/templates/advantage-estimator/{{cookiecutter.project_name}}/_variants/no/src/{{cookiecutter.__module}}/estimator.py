"""``{{ cookiecutter.__registered_name }}``: a group-relative advantage estimator. THIS is the file to edit.

The estimator here is minimal but correct, so the package works end to end from the start.
Sequences sampled from the same prompt form a group; each sequence is judged against the
others of its group (no critic needed, as in GRPO):

    S_i   = sum_t r[i, t]                                  the sequence's total reward
    A_i   = S_i - mean_{j in G(i)} S_j                     its advantage over its group
    A_i  /= std_{j in G(i)} S_j + eps                      only with ``normalize=True``
    advantages_B_T[i, t] = A_i where mask_B_T[i, t] = 1, else 0
    returns_B_T[i, t]    = sum of the rewards from t on (the return-to-go), on the mask

``r`` is ``inputs.token_rewards()``: each sequence's reward on its last response token, unless
the rollout gave per-token rewards (turn rewards, a KL penalty). A group of one sequence has
nothing to compare with: its advantage is 0.

To make it yours, change :func:`group_advantages` (the math: a pure function of numpy arrays,
easy to test against hand-worked numbers) and the keyword arguments of :func:`estimate` (the
function OpenTinker calls; a job passes them as ``algorithm.params.estimator_config``). Keep
the contract that ``tests/test_plugin.py`` checks with
``tinker_core.check_advantage_estimator``: ``[B, T]`` float outputs, 0 off the mask,
finite even for a group of one or equal rewards, the inputs left unchanged, and group ids
treated as labels (renaming or reordering the groups changes nothing).
"""

from __future__ import annotations

import numpy as np
from tinker_core import AdvantageInputs, AdvantageOutputs

from .returns import returns_to_go

__all__ = ["DESCRIPTION", "NAME", "NEEDS_CRITIC", "estimate", "group_advantages", "returns_to_go"]

NAME = "{{ cookiecutter.__registered_name }}"
NEEDS_CRITIC = False
DESCRIPTION = "total reward minus the group's mean (optionally / the group's std), on the mask"


def group_advantages(
    scores_B: np.ndarray, group_ids_B: np.ndarray, *, normalize: bool = False, eps: float = 1e-6
) -> np.ndarray:
    """``scores_B`` minus the mean score of each sequence's group (see the module docstring).

    With ``normalize``, divide by the group's population std plus ``eps``. Groups of one get 0.
    """
    scores = np.asarray(scores_B, dtype=np.float64)
    _, inverse_B, sizes_G = np.unique(np.asarray(group_ids_B), return_inverse=True, return_counts=True)
    inverse_B = inverse_B.reshape(-1)
    mean_G = np.bincount(inverse_B, weights=scores, minlength=sizes_G.size) / sizes_G
    adv_B = scores - mean_G[inverse_B]
    if normalize:
        var_G = np.bincount(inverse_B, weights=adv_B**2, minlength=sizes_G.size) / sizes_G
        scale_B = np.sqrt(var_G)[inverse_B] + eps
        adv_B = np.divide(adv_B, scale_B, out=np.zeros_like(adv_B), where=scale_B > 0)
    return np.where(sizes_G[inverse_B] > 1, adv_B, 0.0)


def estimate(inputs: AdvantageInputs, *, normalize: bool = False, eps: float = 1e-6) -> AdvantageOutputs:
    """The estimator OpenTinker calls: ``estimate(inputs, **estimator_config)``.

    Args:
        inputs: rewards, the response mask, group ids (and per-token rewards, when any).
        normalize: divide each advantage by its group's reward std (GRPO's scaling).
        eps: added to the std before dividing.
    """
    if eps < 0:
        raise ValueError(f"{NAME}: eps must be >= 0, got {eps}")
    on_B_T = inputs.mask_B_T > 0
    rewards_B_T = inputs.token_rewards()
    adv_B = group_advantages(rewards_B_T.sum(axis=1), inputs.group_ids_B, normalize=normalize, eps=eps)
    advantages_B_T = np.where(on_B_T, adv_B[:, None], 0.0)
    returns_B_T = returns_to_go(rewards_B_T, inputs.mask_B_T)
    trained = advantages_B_T[on_B_T]
    metrics = {
        "advantage_mean": float(trained.mean()) if trained.size else 0.0,
        "advantage_abs_mean": float(np.abs(trained).mean()) if trained.size else 0.0,
    }
    return AdvantageOutputs(advantages_B_T, returns_B_T, metrics)
