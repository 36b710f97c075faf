"""Contracts of algorithm plugins: advantage estimators, losses and optimizers.

These are framework-neutral data holders; tinker-core never imports torch. Advantage estimators
work on numpy arrays (advantages need no gradient). Losses receive and return torch tensors,
supplied by the trainer in tinker-algos. Names carry dimensions: ``B`` sequences, ``T`` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

LossKind = Literal["policy", "preference", "value", "kl", "supervised"]
LOSS_KINDS: tuple[str, ...] = ("policy", "preference", "value", "kl", "supervised")

AGGREGATION_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)


@dataclass
class AdvantageInputs:
    """What an advantage estimator reads.

    Attributes:
        rewards_B: the sequence-level reward of each sequence.
        mask_B_T: 1 on response (trained) tokens, 0 elsewhere.
        group_ids_B: sequences sampled from the same prompt share a group id.
        token_rewards_B_T: per-token rewards (e.g. KL shaping, per-turn rewards); when None,
            each sequence's reward sits on its last response token.
        values_B_T: the critic's value estimates (estimators with ``needs_critic``).
    """

    rewards_B: np.ndarray
    mask_B_T: np.ndarray
    group_ids_B: np.ndarray
    token_rewards_B_T: np.ndarray | None = None
    values_B_T: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.rewards_B = np.asarray(self.rewards_B, dtype=np.float64)
        self.mask_B_T = np.asarray(self.mask_B_T, dtype=np.float64)
        self.group_ids_B = np.asarray(self.group_ids_B)
        if self.mask_B_T.ndim != 2:
            raise ValueError(f"mask_B_T must be 2-D [B, T], got shape {self.mask_B_T.shape}")
        B = self.mask_B_T.shape[0]
        if self.rewards_B.shape != (B,):
            raise ValueError(f"rewards_B must have shape ({B},), got {self.rewards_B.shape}")
        if self.group_ids_B.shape != (B,):
            raise ValueError(f"group_ids_B must have shape ({B},), got {self.group_ids_B.shape}")
        for name in ("token_rewards_B_T", "values_B_T"):
            v = getattr(self, name)
            if v is not None:
                v = np.asarray(v, dtype=np.float64)
                if v.shape != self.mask_B_T.shape:
                    raise ValueError(f"{name} must have shape {self.mask_B_T.shape}, got {v.shape}")
                setattr(self, name, v)

    def token_rewards(self) -> np.ndarray:
        """``token_rewards_B_T``, or the sequence reward placed on each last response token."""
        if self.token_rewards_B_T is not None:
            return self.token_rewards_B_T
        out = np.zeros_like(self.mask_B_T)
        for i in range(self.mask_B_T.shape[0]):
            idx = np.flatnonzero(self.mask_B_T[i])
            if idx.size:
                out[i, idx[-1]] = self.rewards_B[i]
        return out


@dataclass
class AdvantageOutputs:
    """``advantages_B_T`` (0 off the mask) and ``returns_B_T`` (the critic's regression target)."""

    advantages_B_T: np.ndarray
    returns_B_T: np.ndarray
    metrics: dict[str, float] = field(default_factory=dict)


class AdvantageEstimator(Protocol):
    def __call__(self, inputs: AdvantageInputs, **config: Any) -> AdvantageOutputs: ...


@dataclass
class LossInputs:
    """What a loss reads; every ``*_B_T`` is a torch tensor aligned with the tokens.

    ``logprobs_B_T`` are the current policy's log-probabilities (differentiable). The others are
    constants. Preference losses get chosen and rejected sequences interleaved: rows ``2k`` and
    ``2k + 1`` are the chosen and the rejected response to the same prompt.
    """

    logprobs_B_T: Any
    mask_B_T: Any
    sampling_logprobs_B_T: Any = None
    advantages_B_T: Any = None
    ref_logprobs_B_T: Any = None
    weights_B_T: Any = None
    values_B_T: Any = None
    old_values_B_T: Any = None
    returns_B_T: Any = None


@dataclass
class LossOutputs:
    """``loss_B_T`` per token (the trainer aggregates it) and scalar metrics."""

    loss_B_T: Any
    metrics: dict[str, float] = field(default_factory=dict)


class Loss(Protocol):
    def __call__(self, inputs: LossInputs, **config: Any) -> LossOutputs: ...


class OptimizerFactory(Protocol):
    def __call__(self, params: Any, **config: Any) -> Any: ...
