"""Built-in advantage estimators: pure numpy functions plus thin registry wrappers.

Every estimator comes in two layers (the TorchRL habit):

* a pure function over arrays (``gae_advantages``, ``grpo_advantages``, ...) that is trivially
  testable against the oracles in ``docs/reference/oracles.md``;
* a wrapper ``name(inputs: AdvantageInputs, **config) -> AdvantageOutputs`` that reads the
  contract type, checks its config keys and is what :mod:`tinker_algos.plugin` registers.

Notation: ``m`` is ``mask_B_T`` (1 on trained tokens), ``r`` token rewards, ``R`` sequence
rewards, ``V`` critic values, ``G`` a group (sequences that share a ``group_ids_B`` value). The
wrappers read the groups from :meth:`AdvantageInputs.group_index`: straight from
``group_sizes_G`` when the rollout's :class:`~tinker_core.contracts.TrajectoryGroup` s made the
batch, from the labels otherwise.

Time axis. ``mask_B_T`` covers whole sequences (prompt, policy tokens and, in multi-turn
rollouts, environment tokens between turns). The token-level estimators (GAE, REINFORCE++)
run over the *trained* tokens of each row only: masked positions are skipped, so the "next"
token of a trained token is the next trained token of the same row, and the episode ends after
the last one (``V_T = 0``). A reward that sits on a masked position (e.g. a turn reward placed on
an environment token) is credited to the last trained token before it (the action that caused
it); a non-zero reward before a row's first trained token is an error.

Formulas:

* **GAE** (``gae``, needs a critic): ``delta_t = r_t + gamma * V_{t+1} - V_t`` with
  ``V_T = 0``; ``A_t = delta_t + gamma * lam * A_{t+1}``; ``returns_t = A_t + V_t`` (taken
  before whitening). With ``whiten`` (default), ``A <- (A - mean_m(A)) / (std_m(A) + 1e-8)``
  over every trained token in the batch (population std).
* **GRPO** (``grpo``): ``A_i = (R_i - mean_G(R)) / (std_G(R) + eps)`` with the *unbiased*
  std (``n - 1``) and ``eps = 1e-6``; a group of one sequence gets 0. Broadcast on ``m``.
* **Dr.GRPO** (``dr_grpo``): ``A_i = R_i - mean_G(R)``; a group of one gets 0. The paper pairs
  it with a constant-length loss normaliser: aggregate with ``seq-mean-token-sum-norm``.
* **RLOO** (``rloo``): ``A_i = R_i - sum_{j != i} R_j / (|G| - 1)``; a group of one gets 0.
* **REINFORCE++** (``reinforce_pp``): ``G_t = sum_{k >= t} gamma^(k - t) r_k`` over the token
  rewards, then masked whitening over the batch (as for GAE).
* **REINFORCE++-baseline** (``reinforce_pp_baseline``): ``mean_G(R)`` is subtracted from each
  sequence's reward at its last trained token, then the return-to-go with ``gamma = 1``, then
  masked whitening.

``advantages_B_T`` is exactly 0 off the mask. ``returns_B_T`` is the critic's regression
target for GAE, and the (discounted, ``gamma = 1`` for the group estimators) return-to-go of the
token rewards for the others, also 0 off the mask. All arithmetic is float64 and deterministic.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from tinker_core.contracts import AdvantageInputs, AdvantageOutputs, group_index_of

WHITEN_EPS = 1e-8
GRPO_EPS = 1e-6

F = TypeVar("F", bound=Callable[..., Any])


# ---- helpers ------------------------------------------------------------------------------


def strict_config(kind: str) -> Callable[[F], F]:
    """Make ``fn(inputs, **config)`` reject unknown config keys with a message naming them.

    ``kind`` is how errors call the thing (``"advantage estimator"``, ``"loss"``).
    """

    def decorate(fn: F) -> F:
        params = inspect.signature(fn).parameters
        allowed = [p.name for p in params.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        passable = {
            p.name
            for p in params.values()
            if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        }

        @functools.wraps(fn)
        def wrapper(*args: Any, **config: Any) -> Any:
            unknown = sorted(set(config) - passable)
            if unknown:
                raise TypeError(
                    f"{kind} {fn.__name__!r} got unknown config key(s) {', '.join(map(repr, unknown))}; "
                    f"allowed keys are {', '.join(allowed) or '(none)'}"
                )
            return fn(*args, **config)

        return wrapper  # type: ignore[return-value]

    return decorate


def _as_mask(mask_B_T: np.ndarray) -> np.ndarray:
    mask = np.asarray(mask_B_T, dtype=np.float64)
    if mask.ndim != 2:
        raise ValueError(f"mask_B_T must be 2-D [B, T], got shape {mask.shape}")
    return mask


def _check_same_shape(name: str, arr: np.ndarray, mask_B_T: np.ndarray) -> np.ndarray:
    arr = np.asarray(arr, dtype=np.float64)
    if arr.shape != mask_B_T.shape:
        raise ValueError(
            f"{name} must have the shape of mask_B_T {mask_B_T.shape}, got {arr.shape}"
        )
    return arr


def _check_unit_interval(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return value


def credit_rewards_to_trained_tokens(rewards_B_T: np.ndarray, mask_B_T: np.ndarray) -> np.ndarray:
    """Move each reward on a masked position to the last trained token before it.

    Raises ``ValueError`` when a non-zero reward precedes a row's first trained token.
    """
    mask = _as_mask(mask_B_T) > 0
    rewards = _check_same_shape("rewards_B_T", rewards_B_T, mask)
    out = np.where(mask, rewards, 0.0)
    B, T = mask.shape
    for i in range(B):
        off = np.flatnonzero(~mask[i] & (rewards[i] != 0.0))
        if off.size == 0:
            continue
        on = np.flatnonzero(mask[i])
        for t in off:
            k = np.searchsorted(on, t) - 1  # the last trained position before t
            if k < 0:
                raise ValueError(
                    f"row {i} has reward {rewards[i, t]} at masked position {t}, before its first "
                    "trained token; put rewards on (or after) the tokens that earned them"
                )
            out[i, on[k]] += rewards[i, t]
    return out


def masked_whiten(x_B_T: np.ndarray, mask_B_T: np.ndarray, eps: float = WHITEN_EPS) -> np.ndarray:
    """``(x - mean_m(x)) / (std_m(x) + eps)`` over all trained tokens; 0 off the mask.

    ``std_m`` is the population std of the masked entries. No trained token -> all zeros.
    """
    mask = _as_mask(mask_B_T) > 0
    x = _check_same_shape("x_B_T", x_B_T, mask)
    n = int(mask.sum())
    if n == 0:
        return np.zeros_like(x)
    vals = x[mask]
    mean = vals.mean()
    std = np.sqrt(((vals - mean) ** 2).mean())
    return np.where(mask, (x - mean) / (std + eps), 0.0)


def discounted_returns(
    rewards_B_T: np.ndarray, mask_B_T: np.ndarray, gamma: float = 1.0
) -> np.ndarray:
    """Return-to-go ``G_t = sum_{k >= t} gamma^(k - t) r_k`` over each row's trained tokens.

    Rewards on masked positions are first credited to the preceding trained token
    (:func:`credit_rewards_to_trained_tokens`). 0 off the mask.
    """
    gamma = _check_unit_interval("gamma", gamma)
    mask = _as_mask(mask_B_T) > 0
    r = credit_rewards_to_trained_tokens(rewards_B_T, mask)
    out = np.zeros_like(r)
    running_B = np.zeros(r.shape[0])
    for t in range(r.shape[1] - 1, -1, -1):
        m = mask[:, t]
        running_B = np.where(m, r[:, t] + gamma * running_B, running_B)
        out[:, t] = np.where(m, running_B, 0.0)
    return out


def gae_advantages(
    rewards_B_T: np.ndarray,
    values_B_T: np.ndarray,
    mask_B_T: np.ndarray,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation over trained tokens; returns ``(A_B_T, returns_B_T)``.

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` (``V`` past the last trained token is 0),
    ``A_t = delta_t + gamma * lam * A_{t+1}``, ``returns_t = A_t + V_t``. No whitening here.
    """
    gamma = _check_unit_interval("gamma", gamma)
    lam = _check_unit_interval("lam", lam)
    mask = _as_mask(mask_B_T) > 0
    r = credit_rewards_to_trained_tokens(rewards_B_T, mask)
    v = np.where(mask, _check_same_shape("values_B_T", values_B_T, mask), 0.0)
    B, T = mask.shape
    adv = np.zeros((B, T))
    next_value_B = np.zeros(B)
    next_adv_B = np.zeros(B)
    for t in range(T - 1, -1, -1):
        m = mask[:, t]
        delta_B = r[:, t] + gamma * next_value_B - v[:, t]
        a_B = delta_B + gamma * lam * next_adv_B
        adv[:, t] = np.where(m, a_B, 0.0)
        next_value_B = np.where(m, v[:, t], next_value_B)
        next_adv_B = np.where(m, a_B, next_adv_B)
    returns = np.where(mask, adv + v, 0.0)
    return adv, returns


GroupIndex = tuple[np.ndarray, np.ndarray]
"""``(group_of_B, sizes_G)``: each sequence's group index (0..G-1) and each group's size."""


def _group_sums(values_B: np.ndarray, group_of_B: np.ndarray, n_groups: int) -> np.ndarray:
    sums_G = np.zeros(n_groups)
    np.add.at(sums_G, group_of_B, values_B)
    return sums_G


def group_mean_baseline(rewards_B: np.ndarray, group_ids_B: np.ndarray, *, index: GroupIndex | None = None) -> np.ndarray:
    """``mean_G(R)`` of each sequence's group (``index``, when given, replaces ``group_ids_B``)."""
    r = np.asarray(rewards_B, dtype=np.float64)
    group_of_B, sizes_G = index if index is not None else group_index_of(group_ids_B)
    return (_group_sums(r, group_of_B, len(sizes_G)) / sizes_G)[group_of_B]


def grpo_advantages(
    rewards_B: np.ndarray,
    group_ids_B: np.ndarray | None = None,
    *,
    scale_by_std: bool = True,
    eps: float = GRPO_EPS,
    index: GroupIndex | None = None,
) -> np.ndarray:
    """Sequence-level GRPO advantages ``(R_i - mean_G) / (std_G + eps)``, std unbiased.

    ``scale_by_std=False`` gives Dr.GRPO (``R_i - mean_G``). Groups of size 1 get 0. The groups
    are ``group_ids_B`` (labels) or ``index`` (a :data:`GroupIndex`, e.g.
    :meth:`AdvantageInputs.group_index`).
    """
    r = np.asarray(rewards_B, dtype=np.float64)
    group_of_B, sizes_G = index if index is not None else group_index_of(group_ids_B)  # type: ignore[arg-type]
    n_G = sizes_G.astype(np.float64)
    mean_G = _group_sums(r, group_of_B, len(sizes_G)) / n_G
    centred_B = r - mean_G[group_of_B]
    single_B = sizes_G[group_of_B] < 2
    if scale_by_std:
        ss_G = _group_sums(centred_B**2, group_of_B, len(sizes_G))
        std_G = np.sqrt(ss_G / np.maximum(n_G - 1.0, 1.0))
        centred_B = centred_B / (std_G[group_of_B] + eps)
    return np.where(single_B, 0.0, centred_B)


def rloo_advantages(rewards_B: np.ndarray, group_ids_B: np.ndarray | None = None, *, index: GroupIndex | None = None) -> np.ndarray:
    """Leave-one-out baseline ``R_i - sum_{j != i} R_j / (|G| - 1)``; groups of size 1 get 0."""
    r = np.asarray(rewards_B, dtype=np.float64)
    group_of_B, sizes_G = index if index is not None else group_index_of(group_ids_B)  # type: ignore[arg-type]
    n_B = sizes_G[group_of_B].astype(np.float64)
    others_B = _group_sums(r, group_of_B, len(sizes_G))[group_of_B] - r
    return np.where(n_B < 2, 0.0, r - others_B / np.maximum(n_B - 1.0, 1.0))


def _broadcast(adv_B: np.ndarray, mask_B_T: np.ndarray) -> np.ndarray:
    mask = _as_mask(mask_B_T) > 0
    return np.where(mask, np.asarray(adv_B, dtype=np.float64)[:, None], 0.0)


def _summary(prefix: str, adv_B_T: np.ndarray, mask_B_T: np.ndarray) -> dict[str, float]:
    mask = mask_B_T > 0
    vals = adv_B_T[mask]
    if vals.size == 0:
        return {f"{prefix}/advantage_mean": 0.0, f"{prefix}/advantage_std": 0.0}
    return {
        f"{prefix}/advantage_mean": float(vals.mean()),
        f"{prefix}/advantage_std": float(vals.std()),
    }


# ---- registry wrappers --------------------------------------------------------------------


@strict_config("advantage estimator")
def gae(
    inputs: AdvantageInputs, *, gamma: float = 1.0, lam: float = 0.95, whiten: bool = True
) -> AdvantageOutputs:
    """GAE(gamma, lam) over the critic's values; masked whitening optional (default on)."""
    if inputs.values_B_T is None:
        raise ValueError(
            "advantage estimator 'gae' needs inputs.values_B_T (the critic's values); "
            "train with a value head or pick a critic-free estimator such as 'grpo'"
        )
    adv, returns = gae_advantages(
        inputs.token_rewards(), inputs.values_B_T, inputs.mask_B_T, gamma, lam
    )
    if whiten:
        adv = masked_whiten(adv, inputs.mask_B_T)
    return AdvantageOutputs(adv, returns, _summary("gae", adv, inputs.mask_B_T))


def _group_estimator(inputs: AdvantageInputs, adv_B: np.ndarray, prefix: str) -> AdvantageOutputs:
    adv = _broadcast(adv_B, inputs.mask_B_T)
    returns = discounted_returns(inputs.token_rewards(), inputs.mask_B_T, 1.0)
    _, sizes_G = inputs.group_index()
    metrics = _summary(prefix, adv, inputs.mask_B_T)
    metrics[f"{prefix}/singleton_group_frac"] = float(np.mean(sizes_G < 2)) if sizes_G.size else 0.0
    return AdvantageOutputs(adv, returns, metrics)


@strict_config("advantage estimator")
def grpo(inputs: AdvantageInputs, *, eps: float = GRPO_EPS) -> AdvantageOutputs:
    """GRPO: group-normalised sequence rewards (unbiased std), broadcast on the mask."""
    if eps < 0:
        raise ValueError(f"grpo: eps must be >= 0, got {eps}")
    return _group_estimator(
        inputs, grpo_advantages(inputs.rewards_B, eps=eps, index=inputs.group_index()), "grpo"
    )


@strict_config("advantage estimator")
def dr_grpo(inputs: AdvantageInputs) -> AdvantageOutputs:
    """Dr.GRPO: group-mean-centred sequence rewards (no std division), broadcast on the mask."""
    adv_B = grpo_advantages(inputs.rewards_B, scale_by_std=False, index=inputs.group_index())
    return _group_estimator(inputs, adv_B, "dr_grpo")


@strict_config("advantage estimator")
def rloo(inputs: AdvantageInputs) -> AdvantageOutputs:
    """RLOO: sequence reward minus the mean of the rest of its group, broadcast on the mask."""
    return _group_estimator(inputs, rloo_advantages(inputs.rewards_B, index=inputs.group_index()), "rloo")


@strict_config("advantage estimator")
def reinforce_pp(
    inputs: AdvantageInputs, *, gamma: float = 1.0, whiten: bool = True
) -> AdvantageOutputs:
    """REINFORCE++: discounted return-to-go of the token rewards, whitened over the batch."""
    returns = discounted_returns(inputs.token_rewards(), inputs.mask_B_T, gamma)
    adv = masked_whiten(returns, inputs.mask_B_T) if whiten else returns.copy()
    return AdvantageOutputs(adv, returns, _summary("reinforce_pp", adv, inputs.mask_B_T))


@strict_config("advantage estimator")
def reinforce_pp_baseline(inputs: AdvantageInputs, *, whiten: bool = True) -> AdvantageOutputs:
    """REINFORCE++-baseline: subtract the group-mean reward, return-to-go (gamma 1), whiten."""
    mask = inputs.mask_B_T > 0
    rewards = inputs.token_rewards().copy()
    baseline_B = group_mean_baseline(inputs.rewards_B, inputs.group_ids_B, index=inputs.group_index())
    for i in range(mask.shape[0]):
        idx = np.flatnonzero(mask[i])
        if idx.size:
            rewards[i, idx[-1]] -= baseline_B[i]
    returns = discounted_returns(rewards, inputs.mask_B_T, 1.0)
    adv = masked_whiten(returns, inputs.mask_B_T) if whiten else returns.copy()
    return AdvantageOutputs(adv, returns, _summary("reinforce_pp_baseline", adv, inputs.mask_B_T))


ESTIMATORS: dict[str, tuple[Callable[..., AdvantageOutputs], bool]] = {
    "gae": (gae, True),
    "grpo": (grpo, False),
    "dr_grpo": (dr_grpo, False),
    "rloo": (rloo, False),
    "reinforce_pp": (reinforce_pp, False),
    "reinforce_pp_baseline": (reinforce_pp_baseline, False),
}
"""Name -> (estimator, needs_critic): what :mod:`tinker_algos.plugin` registers."""
