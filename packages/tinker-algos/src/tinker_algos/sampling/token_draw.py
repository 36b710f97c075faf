"""How one token per row is chosen from a batch of logits: first what may change the logits
(OpenAI's frequency and presence penalties, logits processors), then temperature, top-k and top-p,
then the draw.

**Adjustments.** The seam is :data:`SamplingParams.logits_processors <tinker_algos.sampling.sampler.SamplingParams>`:
factories, each called once per row (one sample of one prompt) when the row starts, returning a
:class:`LogitsProcessor` that keeps that row's state (a grammar matcher, say). Every step the
processor gets the tokens its row has generated so far and the row's logits, and returns them
adjusted (e.g. ``-inf`` for every token its grammar forbids). The penalties are OpenAI's
(``mu[j] - c[j] * frequency_penalty - (c[j] > 0) * presence_penalty``, ``c[j]`` the number of
times token ``j`` was generated so far in this sample; the prompt does not count), applied first.
Adjustments change what is *sampled*; the raw logprobs a sampler reports stay the model's own.

Both the decode loop (:mod:`tinker_algos.sampling.sampler`) and the serving engine, per request,
call :func:`adjust_logits` before :func:`choose_tokens`. (The adjustments lived in
``tinker_algos.sampling.logits_adjust`` until wave 4; that path still imports this module.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import torch

__all__ = [
    "INVERSE_CDF_MIN_VOCAB", "MAX_PENALTY", "DrawParams", "LogitsProcessor", "LogitsProcessorFactory", "adjust_logits",
    "adjusts", "apply_penalties", "check_penalty", "choose_tokens", "draw", "filter_logits", "token_counts", "token_entropy_B",
]

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


class DrawParams(Protocol):
    """What choosing a token reads of :class:`tinker_algos.sampling.sampler.SamplingParams`."""

    temperature: float
    top_k: int
    top_p: float

def filter_logits(scaled_B_V: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside top-k / the top-p nucleus to -inf (the best token always stays)."""
    V = scaled_B_V.shape[-1]
    if 0 < top_k < V:
        kth = torch.topk(scaled_B_V, top_k, dim=-1).values[:, -1:]
        scaled_B_V = scaled_B_V.masked_fill(scaled_B_V < kth, float("-inf"))
    if top_p < 1.0:
        sorted_B_V, idx_B_V = torch.sort(scaled_B_V, dim=-1, descending=True)
        probs = torch.softmax(sorted_B_V, dim=-1)
        before = probs.cumsum(-1) - probs  # mass strictly before each token
        drop_sorted = before > top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, idx_B_V, drop_sorted)
        scaled_B_V = scaled_B_V.masked_fill(drop, float("-inf"))
    return scaled_B_V


def choose_tokens(
    logits_B_V: torch.Tensor, params: DrawParams, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row; return ``(tokens_B, logprobs_B)`` under the sampled distribution."""
    if params.temperature == 0:
        return logits_B_V.argmax(-1), torch.zeros(logits_B_V.shape[0], device=logits_B_V.device)
    scaled = logits_B_V / params.temperature if params.temperature != 1.0 else logits_B_V
    scaled = filter_logits(scaled, params.top_k, params.top_p)
    logp_B_V = torch.log_softmax(scaled, dim=-1)
    next_B = draw(logp_B_V, generator)
    return next_B, logp_B_V.gather(-1, next_B[:, None]).squeeze(-1)


def token_entropy_B(logp_B_V: torch.Tensor) -> torch.Tensor:
    """The entropy (nats) of each row's next-token distribution from its log-probabilities:
    ``-sum_v p_v log p_v`` (``torch.special.entr``: a token of probability 0 adds 0). The one place
    policy entropy is computed; it reads log-probabilities the sampler already holds, so no
    logits are materialised for it."""
    return torch.special.entr(logp_B_V.exp()).sum(-1)


INVERSE_CDF_MIN_VOCAB = 4096
"""From this vocabulary size on, :func:`draw` samples by inverse CDF (one uniform per row)."""


def draw(logp_B_V: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from log-probabilities; a distribution that is not finite (the model's
    weights diverged) is a :class:`~tinker_core.errors.PreconditionError`, not torch's error.

    ``torch.multinomial`` draws an exponential variate for every vocabulary entry of every row
    (``argmax(p / E)``): at a real model's vocabulary (SmolLM2's 49,152) that is about 13 ms per
    decode step of 16 rows on a 2-core CPU, 15% of the step. From
    :data:`INVERSE_CDF_MIN_VOCAB` entries on, each row instead takes one uniform variate ``u``
    and the first token whose cumulative probability (summed in float64, so no token's mass is
    rounded away) exceeds ``u`` times the total: the same distribution, exactly. Smaller
    vocabularies (the ``tiny`` preset's characters) keep ``multinomial``, whose draw is cheap
    there, so their seeded runs are what they were.
    """
    B, V = logp_B_V.shape
    if V < INVERSE_CDF_MIN_VOCAB:
        try:
            return torch.multinomial(logp_B_V.exp(), 1, generator=generator).squeeze(-1)
        except RuntimeError as e:
            if bool(torch.isfinite(logp_B_V).all()):
                raise
            raise _diverged() from e
    wide = torch.float32 if logp_B_V.device.type == "mps" else torch.float64  # MPS has no float64
    cdf_B_V = logp_B_V.exp().cumsum(-1, dtype=wide)
    total_B1 = cdf_B_V[:, -1:]
    if not bool((torch.isfinite(total_B1) & (total_B1 > 0)).all()):
        raise _diverged()
    u_B1 = torch.rand((B, 1), generator=generator, dtype=wide, device=logp_B_V.device) * total_B1
    return torch.searchsorted(cdf_B_V, u_B1, right=True).squeeze(-1).clamp_(max=V - 1)


def _diverged() -> Exception:
    from tinker_core.errors import PreconditionError

    return PreconditionError(
        "the model's next-token distribution is not finite (NaN or inf logits): its weights have "
        "diverged; load an earlier state or lower the learning rate"
    )
