"""Samples and what they become: a :class:`SampledSequence` (one sample of the sampler, with its
logprobs and stop reason), its trajectory and a batch of them. :mod:`tinker_algos.sampling.sampler`
produces them (and re-exports these names). How well the sampler's logprobs agree with the
trainer's is a health signal: :func:`tinker_algos.records.health.logprob_agreement`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    from tinker_core.contracts import Batch, Trajectory

__all__ = ["SampledSequence", "StopReason", "sequences_to_batch"]

StopReason = Literal["stop_string", "stop_id", "eos", "length", "abort"]
"""Why a sample stopped (see :mod:`tinker_algos.sampling.sampler`)."""


@dataclass
class SampledSequence:
    """One sample: the prompt's ids, the generated ids and their logprobs (see :mod:`tinker_algos.sampling.sampler`)."""

    prompt_tokens: list[int]
    tokens: list[int]
    logprobs: list[float]
    raw_logprobs: list[float]
    stop_reason: StopReason
    text: str
    prompt_index: int = 0
    sample_index: int = 0
    entropies: list[float] = field(default_factory=list)
    """The policy's entropy (nats, temperature 1, unfiltered) at each generated token's position."""

    @property
    def full_tokens(self) -> list[int]:
        return [*self.prompt_tokens, *self.tokens]

    def aligned(self, *, raw: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(tokens_T, logprobs_T, loss_mask_T)`` over prompt + sample, in the Batch alignment."""
        p = len(self.prompt_tokens)
        tokens_T = np.asarray(self.full_tokens, dtype=np.int64)
        lp_T = np.zeros(len(tokens_T), dtype=np.float32)
        lp_T[p:] = self.raw_logprobs if raw else self.logprobs
        mask_T = np.zeros(len(tokens_T), dtype=np.float32)
        mask_T[p:] = 1.0
        return tokens_T, lp_T, mask_T

    def to_trajectory(
        self, turn_rewards: Sequence[float] = (), *, group_id: int | None = None, raw: bool = False
    ) -> Trajectory:
        """A single-turn :class:`tinker_core.contracts.Trajectory` (group id: the prompt index)."""
        from tinker_core.contracts import Trajectory

        tokens_T, lp_T, mask_T = self.aligned(raw=raw)
        return Trajectory(
            tokens_T=tokens_T,
            sampler_logprobs_T=lp_T,
            loss_mask_T=mask_T,
            turn_rewards=list(turn_rewards),
            group_id=self.prompt_index if group_id is None else group_id,
            info={"stop_reason": self.stop_reason, "text": self.text},
        )


def sequences_to_batch(
    sequences: Sequence[SampledSequence] | Sequence[Sequence[SampledSequence]],
    *,
    pad_token_id: int = 0,
    rewards: Sequence[float] | None = None,
    raw: bool = False,
) -> Batch:
    """A right-padded :class:`tinker_core.contracts.Batch` of samples (flattened in order).

    The loss mask covers the generated tokens; ``sampler_logprobs_B_T`` holds ``logprobs``
    (``raw_logprobs`` when ``raw=True``); group ids are prompt indices.
    """
    from tinker_core.contracts import Batch

    flat: list[SampledSequence] = []
    for s in sequences:
        if isinstance(s, SampledSequence):
            flat.append(s)
        else:
            flat.extend(s)
    if rewards is not None and len(rewards) != len(flat):
        raise ValueError(f"rewards has {len(rewards)} entries for {len(flat)} sequences")
    trajs = [
        s.to_trajectory([float(rewards[i])] if rewards is not None else [], raw=raw)
        for i, s in enumerate(flat)
    ]
    return Batch.from_trajectories(trajs, pad_token_id=pad_token_id)
