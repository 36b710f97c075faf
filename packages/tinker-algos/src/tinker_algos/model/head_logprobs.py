"""Token logprobs without the whole batch's logits: the LM head and the log-softmax only at the
positions asked for, a chunk of positions at a time.

A plain pass materialises ``logits[B, T, V]`` in float32 (and autograd keeps it, its log-softmax
and their gradients): on a 49,152-word vocabulary, 32 episodes of 400 tokens are 2.5 GB per copy.
Yet a loss reads the logprob of one token per position, and only at the trained positions. The
**head route** runs the model's decoder (``get_decoder()``: the layers and the final norm, LoRA
layers included, since peft injects them in place) to its last hidden states, picks the rows of
the positions asked for, and applies the output head (``get_output_embeddings()``, called as a
module: a bias or a LoRA on the head count) and the log-softmax to ``chunk_rows`` of them at a
time. Each chunk runs under :func:`torch.utils.checkpoint.checkpoint` when a gradient is wanted:
backward recomputes that chunk's logits instead of keeping every chunk's, so the peak is bounded
by one chunk (``HEAD_CHUNK_ELEMENTS`` logits), not by ``B x T x V``. The arithmetic per position
is the plain pass's (``head(h).float() / temperature``, the target's logit minus the logsumexp),
so the numbers agree to float rounding (the head's matmul has another shape).

The route applies only where the causal LM's logits are exactly ``lm_head(decoder(x))``: the
model types in :data:`HEAD_ROUTE_MODEL_TYPES`, loaded as transformers' own ``*ForCausalLM``
class (Gemma 2's soft-capping, Cohere's logit scale or Granite's logit scaling would be lost, and
a subclass may change its forward). Anything else takes the **plain route**: the model's own
forward and its full logits, as before. ``chunked=False`` chooses the plain route everywhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

__all__ = [
    "HEAD_CHUNK_ELEMENTS", "HEAD_ROUTE_MODEL_TYPES", "HeadRoute", "base_of", "chunk_rows", "head_route", "pick_logprobs", "run_model",
]

HEAD_CHUNK_ELEMENTS = 1 << 24
"""Logits per chunk of the head route (64 MiB in float32): ``chunk_rows = this // vocabulary``."""

HEAD_ROUTE_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "smollm3", "phi3", "olmo2", "gemma"})
"""``config.model_type`` of the causal LMs whose ``*ForCausalLM.forward`` computes its logits as
``lm_head(model(...).last_hidden_state)`` and nothing more (checked in transformers 5.24)."""

Autocast = Callable[[], contextlib.AbstractContextManager[Any]]


@dataclass(frozen=True)
class HeadRoute:
    """The two halves of a causal LM: ``decoder`` (to the final norm) and ``head`` (hidden -> logits)."""

    decoder: torch.nn.Module
    head: torch.nn.Module

    @property
    def vocab(self) -> int:
        weight = getattr(self.head, "weight", None)
        return int(weight.shape[0]) if isinstance(weight, torch.Tensor) else int(self.head.out_features)


def base_of(module: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a peft wrapper (the module itself without one); the one copy
    of this unwrapping (here, with the head route that reaches into the model first)."""
    return module.get_base_model() if hasattr(module, "get_base_model") else module


def head_route(module: torch.nn.Module, *, chunked: bool = True) -> HeadRoute | None:
    """The head route of ``module`` (a causal LM or a peft wrapper of one), or None for the plain
    route: ``chunked=False``, a model type outside :data:`HEAD_ROUTE_MODEL_TYPES`, or a class
    that is not transformers' own ``*ForCausalLM``."""
    if not chunked:
        return None
    base = base_of(module)
    model_type = getattr(getattr(base, "config", None), "model_type", None)
    cls = type(base)
    if model_type not in HEAD_ROUTE_MODEL_TYPES or not cls.__name__.endswith("ForCausalLM"):
        return None
    if cls.__module__ != f"transformers.models.{model_type}.modeling_{model_type}":
        return None
    decoder, head = base.get_decoder(), base.get_output_embeddings()
    if decoder is None or head is None or decoder is base:
        return None
    return HeadRoute(decoder=decoder, head=head)


def run_model(module: torch.nn.Module, route: HeadRoute | None, autocast: Autocast, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    """``(states_B_S_X, output)``: the last hidden states through the head route, else the logits
    of the model's own forward; ``output`` carries the rest (its cache)."""
    with autocast():
        if route is None:
            out = module(**kwargs)
            return out.logits, out
        kwargs.pop("logits_to_keep", None)
        out = route.decoder(**kwargs)
        return out.last_hidden_state, out


def chunk_rows(vocab: int, elements: int | None = None) -> int:
    """Positions per head chunk: ``elements`` logits (default :data:`HEAD_CHUNK_ELEMENTS`) over a
    ``vocab``-word vocabulary (at least 1)."""
    return max(1, (HEAD_CHUNK_ELEMENTS if elements is None else elements) // max(1, vocab))


def _logprob_rows(logits_N_V: torch.Tensor, targets_N: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log softmax(logits / temperature)[target]`` per row, in float32 (the plain pass's arithmetic)."""
    logits = logits_N_V.float()
    if temperature != 1.0:
        logits = logits / temperature
    return logits.gather(-1, targets_N.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def pick_logprobs(
    route: HeadRoute | None,
    states_B_S_X: torch.Tensor,
    targets_B_S: torch.Tensor,
    keep_B_S: torch.Tensor | None,
    *,
    temperature: float,
    autocast: Autocast,
    rest_B_S: torch.Tensor | None = None,
    rows: int | None = None,
) -> torch.Tensor:
    """``[B, S]`` float32: at column ``s``, the logprob of ``targets_B_S[:, s]`` under the states of
    column ``s`` (hidden states on the head route, logits on the plain one), where ``keep_B_S`` is
    1 (None: everywhere); where ``rest_B_S`` is 1 too, but detached (no gradient flows through
    them: logprobs asked for that no loss reads); 0 elsewhere. The head route computes only those
    positions, ``rows`` (default :func:`chunk_rows`) at a time, the kept ones first (their chunks
    are the same with or without ``rest_B_S``, and so are their values and gradients)."""
    if route is None:
        lp = _logprob_rows(states_B_S_X, targets_B_S, temperature)
        zero = torch.zeros((), dtype=lp.dtype, device=lp.device)
        if rest_B_S is not None:
            zero = torch.where(rest_B_S != 0, lp.detach(), zero)
        return lp if keep_B_S is None else torch.where(keep_B_S != 0, lp, zero)
    B, S, H = states_B_S_X.shape
    hidden = states_B_S_X.reshape(B * S, H)
    targets = targets_B_S.reshape(-1)
    step = rows or chunk_rows(route.vocab)
    keep = torch.ones(B * S, dtype=torch.bool, device=hidden.device) if keep_B_S is None else (keep_B_S != 0).reshape(-1)
    idx_N = keep.nonzero().squeeze(1)
    out = torch.zeros(B * S, dtype=torch.float32, device=hidden.device).index_copy(0, idx_N, _head_rows(route.head, hidden, targets, idx_N, step, temperature, autocast))
    if rest_B_S is not None:
        idx_R = ((rest_B_S != 0).reshape(-1) & ~keep).nonzero().squeeze(1)
        with torch.no_grad():
            lp_R = _head_rows(route.head, hidden.detach(), targets, idx_R, step, temperature, autocast)
        out = out.index_copy(0, idx_R, lp_R)
    return out.reshape(B, S)


def _head_rows(
    head: torch.nn.Module, hidden_M_H: torch.Tensor, targets_M: torch.Tensor, idx_N: torch.Tensor, step: int, temperature: float, autocast: Autocast,
) -> torch.Tensor:
    """``[N]``: the logprobs of rows ``idx_N``, ``step`` rows per head call (each call checkpointed
    when a gradient is wanted: backward recomputes its logits rather than keeping them)."""
    hidden_N_H = hidden_M_H.index_select(0, idx_N)
    targets_N = targets_M.index_select(0, idx_N)

    def chunk(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        with autocast():
            logits = head(h)
        return _logprob_rows(logits, t, temperature)

    grad = torch.is_grad_enabled() and (hidden_N_H.requires_grad or any(p.requires_grad for p in head.parameters()))
    pieces = []
    for start in range(0, idx_N.numel(), step):
        h, t = hidden_N_H[start : start + step], targets_N[start : start + step]
        pieces.append(checkpoint(chunk, h, t, use_reentrant=False) if grad else chunk(h, t))
    return torch.cat(pieces) if pieces else hidden_N_H[:, 0].float() * 0  # none kept: still on the graph
