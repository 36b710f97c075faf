"""What may change a row's next-token logits before a token is drawn: OpenAI's frequency and
presence penalties, and logits processors (a grammar's mask: constrained decoding).

The seam is :data:`SamplingParams.logits_processors <tinker_algos.sampling.sampler.SamplingParams>`:
factories, each called once per row (one sample of one prompt) when the row starts, returning a
:class:`LogitsProcessor` that keeps that row's state (a grammar matcher, say). Every step the
processor gets the tokens its row has generated so far and the row's logits, and returns them
adjusted (e.g. ``-inf`` for every token its grammar forbids). The penalties are OpenAI's
(``mu[j] - c[j] * frequency_penalty - (c[j] > 0) * presence_penalty``, ``c[j]`` the number of
times token ``j`` was generated so far in this sample; the prompt does not count), applied first.

Adjustments change what is *sampled*; the raw logprobs a sampler reports stay the model's own.
Both the decode loop (:mod:`tinker_algos.sampling.sampler`) and the serving engine call
:func:`adjust_logits` before :func:`tinker_algos.sampling.token_draw.choose_tokens`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import torch

MAX_PENALTY = 2.0
"""OpenAI's bound on ``frequency_penalty`` and ``presence_penalty`` (either sign)."""


class LogitsProcessor(Protocol):
    """One row's logits adjustment (see the module docstring)."""

    def __call__(self, generated: Sequence[int], logits_V: torch.Tensor) -> torch.Tensor:
        """``logits_V`` (float, the row's next-token logits, may be changed in place) adjusted,
        given the ``generated`` tokens of the row so far (the prompt excluded)."""
        ...


LogitsProcessorFactory = Callable[[], LogitsProcessor]
"""Makes one row's :class:`LogitsProcessor` (called once per row, when it starts)."""


def check_penalty(name: str, value: float) -> None:
    """Raise ValueError unless ``value`` is a finite number in ``[-2, 2]`` (OpenAI's range)."""
    if not (math.isfinite(value) and -MAX_PENALTY <= value <= MAX_PENALTY):
        raise ValueError(f"SamplingParams.{name} must be in [-{MAX_PENALTY:g}, {MAX_PENALTY:g}], got {value}")


def token_counts(generated_B: Sequence[Sequence[int]], vocab: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``counts_B_V``: how often each token occurs in each row's ``generated`` tokens (float)."""
    counts_B_V = torch.zeros((len(generated_B), vocab), device=device)
    for b, toks in enumerate(generated_B):
        if toks:
            ids = torch.tensor(list(toks), dtype=torch.long, device=device)
            counts_B_V[b].scatter_add_(0, ids, torch.ones(len(toks), device=device))
    return counts_B_V


def apply_penalties(logits_B_V: torch.Tensor, counts_B_V: torch.Tensor, frequency: float, presence: float) -> torch.Tensor:
    """OpenAI's penalties: ``logits - counts * frequency - (counts > 0) * presence`` (a new tensor)."""
    return logits_B_V - counts_B_V * frequency - (counts_B_V > 0).to(logits_B_V.dtype) * presence


def adjust_logits(
    logits_B_V: torch.Tensor,
    generated_B: Sequence[Sequence[int]],
    *,
    frequency_penalty: float = 0.0,
    presence_penalty: float = 0.0,
    processors_B: Sequence[Sequence[LogitsProcessor]] = (),
) -> torch.Tensor:
    """The logits a token is drawn from: penalties, then each row's processors in order.
    ``logits_B_V`` itself is left as it was (the raw logprobs are computed from it)."""
    out_B_V = logits_B_V
    if frequency_penalty or presence_penalty:
        counts_B_V = token_counts(generated_B, logits_B_V.shape[-1], logits_B_V.device)
        out_B_V = apply_penalties(logits_B_V, counts_B_V, frequency_penalty, presence_penalty)
    if any(processors_B):
        out_B_V = out_B_V.clone() if out_B_V is logits_B_V else out_B_V
        for b, processors in enumerate(processors_B):
            for processor in processors:
                out_B_V[b] = processor(generated_B[b], out_B_V[b])
    return out_B_V


def adjusts(params: object) -> bool:
    """Whether sampling with ``params`` changes the logits at all (penalties or processors)."""
    return bool(getattr(params, "frequency_penalty", 0.0) or getattr(params, "presence_penalty", 0.0)
                or getattr(params, "logits_processors", ()))


__all__ = [
    "MAX_PENALTY",
    "LogitsProcessor",
    "LogitsProcessorFactory",
    "adjust_logits",
    "adjusts",
    "apply_penalties",
    "check_penalty",
    "token_counts",
]
