"""``{{ cookiecutter.__registered_name }}``: an advantage estimator with a critic. THIS is the file to edit.

The estimator here is minimal but correct, so the package works end to end from the start:
the advantage of a response token is how much better the rest of the episode went than the
critic expected (Monte-Carlo return minus value; GAE with ``lam = 1``):

    G[i, t] = r[i, t] + gamma * G[i, t']       the discounted return-to-go; t' is the next
                                               trained token of row i (G = 0 after the last)
    A[i, t] = G[i, t] - V[i, t]                on the mask, 0 elsewhere
    A      <- (A - mean(A)) / (std(A) + 1e-8)  over all trained tokens, with ``whiten`` (default)
    returns_B_T = G                            the critic's regression target

``r`` is ``inputs.token_rewards()`` (each sequence's reward on its last response token, unless
the rollout gave per-token rewards); a reward on an untrained position (an environment token
between turns) counts for the last trained token before it. ``V`` is ``inputs.values_B_T``,
the critic's estimates, which the ``ppo`` algorithm fills in because the estimator is
registered with ``needs_critic=True``.

To make it yours, change :func:`critic_advantages` (the math: a pure function of numpy arrays,
easy to test against hand-worked numbers) and the keyword arguments of :func:`estimate` (the
function OpenTinker calls; a job passes them as ``algorithm.params.estimator_config``). Keep
the contract that ``tests/test_plugin.py`` checks with
``tinker_core.check_advantage_estimator``: ``[B, T]`` float outputs, 0 off the mask,
finite everywhere, the inputs left unchanged, and padding columns changing nothing.
"""

from __future__ import annotations

import numpy as np
from tinker_core import AdvantageInputs, AdvantageOutputs

from .returns import returns_to_go

__all__ = ["DESCRIPTION", "NAME", "NEEDS_CRITIC", "critic_advantages", "estimate", "masked_whiten", "returns_to_go"]

NAME = "{{ cookiecutter.__registered_name }}"
NEEDS_CRITIC = True
DESCRIPTION = "discounted return-to-go minus the critic's value (needs a critic)"
WHITEN_EPS = 1e-8


def critic_advantages(
    rewards_B_T: np.ndarray, values_B_T: np.ndarray, mask_B_T: np.ndarray, *, gamma: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """``(advantages_B_T, returns_B_T)``: return-to-go minus value on the mask (no whitening)."""
    on_B_T = np.asarray(mask_B_T) > 0
    returns_B_T = returns_to_go(rewards_B_T, mask_B_T, gamma)
    values = np.asarray(values_B_T, dtype=np.float64)
    return np.where(on_B_T, returns_B_T - values, 0.0), returns_B_T


def masked_whiten(x_B_T: np.ndarray, mask_B_T: np.ndarray) -> np.ndarray:
    """``(x - mean) / (std + 1e-8)`` over the trained tokens (population std); 0 off the mask."""
    on_B_T = np.asarray(mask_B_T) > 0
    if not on_B_T.any():
        return np.zeros_like(x_B_T)
    vals = x_B_T[on_B_T]
    return np.where(on_B_T, (x_B_T - vals.mean()) / (vals.std() + WHITEN_EPS), 0.0)


def estimate(inputs: AdvantageInputs, *, gamma: float = 1.0, whiten: bool = True) -> AdvantageOutputs:
    """The estimator OpenTinker calls: ``estimate(inputs, **estimator_config)``.

    Args:
        inputs: rewards, the response mask, group ids and the critic's ``values_B_T``.
        gamma: the discount per trained token, in ``[0, 1]``.
        whiten: normalise the advantages over the batch's trained tokens.
    """
    if inputs.values_B_T is None:
        raise ValueError(
            f"advantage estimator {NAME!r} needs inputs.values_B_T (the critic's values); "
            "use it with algorithm 'ppo', which trains a critic"
        )
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"{NAME}: gamma must be in [0, 1], got {gamma}")
    advantages_B_T, returns_B_T = critic_advantages(
        inputs.token_rewards(), inputs.values_B_T, inputs.mask_B_T, gamma=gamma
    )
    on_B_T = inputs.mask_B_T > 0
    metrics = {"advantage_abs_mean": float(np.abs(advantages_B_T[on_B_T]).mean()) if on_B_T.any() else 0.0}
    if whiten:
        advantages_B_T = masked_whiten(advantages_B_T, inputs.mask_B_T)
    return AdvantageOutputs(advantages_B_T, returns_B_T, metrics)
