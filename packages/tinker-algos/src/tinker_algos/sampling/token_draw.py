"""How one token per row is chosen from a batch of logits: temperature, top-k and top-p, then the draw.

Used by the decode loop (:mod:`tinker_algos.sampling.sampler`) and by the serving engine, per request.
"""

from __future__ import annotations

from typing import Protocol

import torch


class DrawParams(Protocol):
    """What choosing a token reads of :class:`tinker_algos.sampling.sampler.SamplingParams`."""

    temperature: float
    top_k: int
    top_p: float

__all__ = ["INVERSE_CDF_MIN_VOCAB", "DrawParams", "choose_tokens", "draw", "filter_logits"]


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
