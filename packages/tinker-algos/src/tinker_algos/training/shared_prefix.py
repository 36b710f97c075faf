"""The trainer's logprobs with each distinct prompt computed once (a GRPO group's ``n`` copies share it).

A GRPO batch holds every prompt ``group_size`` times, and the loss falls on the completions only,
yet a plain forward pass runs the prompt through the model once per row. :func:`batch_logprobs`
splits each row before its first trained token into a **prefix** (the tokens before the last
untrained one) and a **suffix** (the rest), runs each distinct prefix once (a batch of the
distinct prefixes, left-padded, with grad), repeats its keys and values for the rows that share
it, and runs the suffixes on that cache. Every suffix token attends to the same keys and values,
at the same positions (they count real tokens, as in :func:`tinker_algos.model.models.sequence_logprobs`),
as it would in the plain pass (a row's last token, which predicts nothing, is not fed at all),
so the logprobs are the same up to float rounding, and the
gradient flows back through the repeated cache into the prefix pass (each prefix's gradient is
the sum over its rows, which is what the plain pass computes row by row).

The split is planned on the host (:func:`plan`); the shared pass is used only when it saves
enough of the plain pass's token positions (the prefix batch's plus the suffix batch's against
``B x T``), when the model is not in a state where one pass per row differs from a shared one
(dropout active in training mode, gradient checkpointing, which drops the cache), and when the
batch is right-padded. Otherwise :func:`batch_logprobs` is the plain
:func:`~tinker_algos.model.models.sequence_logprobs`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tinker_algos.model.activation_checkpointing import is_checkpointing
from tinker_algos.model.head_logprobs import (
    HeadRoute,
    base_of,
    head_route,
    pick_logprobs,
    run_model,
)
from tinker_algos.model.models import (
    accepts_kwarg,
    cache_kwarg,
    position_ids_from_mask,
    sequence_logprobs,
)
from tinker_algos.sampling.decode_rows import distinct_rows

if TYPE_CHECKING:
    from tinker_algos.model.device import DeviceSpec

__all__ = ["MAX_SHARED_COST", "SharedPrefixPlan", "batch_logprobs", "plan", "shares_safely"]

MAX_SHARED_COST = 0.8
"""Use the shared pass only when its token positions (distinct prefixes x their width + rows x
the suffixes' width) are at most this fraction of the plain pass's ``B x T``: below that the
second model call pays for itself."""


@dataclass(frozen=True)
class SharedPrefixPlan:
    """How a batch splits: ``split_B[b]`` tokens of row ``b`` form its prefix, ``length_B[b]`` are
    real; ``first_of`` (a row of each distinct prefix) and ``row_of`` (each row's prefix index)."""

    split_B: np.ndarray
    length_B: np.ndarray
    first_of: list[int]
    row_of: list[int]

    @property
    def prefix_width(self) -> int:
        return int(self.split_B.max())

    @property
    def end_B(self) -> np.ndarray:
        """Where each row's suffix input ends: before its last token (nothing follows it to
        predict), but with at least one token (a row with no trained token, split at 0)."""
        return np.maximum(self.length_B - 1, self.split_B + 1)

    @property
    def suffix_width(self) -> int:
        return int((self.end_B - self.split_B).max())

    def positions(self) -> int:
        """Token positions the shared pass runs: distinct prefixes, then every row's suffix."""
        return len(self.first_of) * self.prefix_width + len(self.row_of) * self.suffix_width


def plan(tokens_B_T: np.ndarray, attention_B_T: np.ndarray, trained_B_T: np.ndarray, *, max_cost: float = MAX_SHARED_COST) -> SharedPrefixPlan | None:
    """The split of a right-padded batch, or None when sharing does not pay (or does not apply).

    Row ``b``'s prefix ends one token before its first trained token (that token's logprob comes
    from the position before it, which the suffix pass computes); a row with no trained token
    has no prefix of its own (an empty one, shared with every such row).
    """
    B, T = tokens_B_T.shape
    attn = attention_B_T != 0
    length_B = attn.sum(-1)
    # right-padded: every row's real tokens come first
    if not np.array_equal(attn, np.arange(T)[None, :] < length_B[:, None]) or B < 2:
        return None
    trained = (trained_B_T != 0) & attn
    any_B = trained.any(-1)
    split_B = np.where(any_B, np.maximum(trained.argmax(-1) - 1, 0), 0).astype(np.int64)
    if split_B.max() == 0:
        return None
    first_of, row_of = distinct_rows([tokens_B_T[b, : split_B[b]].tolist() for b in range(B)])
    shared = SharedPrefixPlan(split_B=split_B, length_B=length_B.astype(np.int64), first_of=first_of, row_of=row_of)
    if shared.positions() > max_cost * B * T:
        return None
    return shared


def shares_safely(module: torch.nn.Module, *, checkpointing: bool | None = None) -> bool:
    """Whether one pass of a prefix for all its rows is what one pass per row would compute: no
    dropout that draws per pass (in training mode) and no gradient checkpointing (it turns the
    cache off). ``checkpointing``: whether the model checkpoints its activations, when the caller
    knows (a :class:`~tinker_algos.training.trainer.Trainer` set it from its config when it was
    built); None reads it off the model."""
    if is_checkpointing(module) if checkpointing is None else checkpointing:
        return False
    base = base_of(module)
    if not module.training:
        return True
    config = getattr(base, "config", None)
    for key in ("attention_dropout", "hidden_dropout", "dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop"):
        value = getattr(config, key, 0.0)
        if isinstance(value, (int, float)) and value > 0:
            return False
    return not any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in module.modules())


def batch_logprobs(
    module: torch.nn.Module,
    tokens_B_T: torch.Tensor,
    attention_mask_B_T: torch.Tensor,
    trained_B_T: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    spec: DeviceSpec | None = None,
    share: bool = True,
    only_trained: bool = False,
    chunked: bool = True,
    checkpointing: bool | None = None,
) -> torch.Tensor:
    """:func:`~tinker_algos.model.models.sequence_logprobs` of the batch (same alignment and masking),
    through the shared-prefix pass when :func:`plan` finds it pays and :func:`shares_safely`.

    ``trained_B_T`` marks the tokens a loss will use (its prefix split; the gradient flows only
    through their logprobs, the others' are detached); without it, or with ``share=False``, this
    is the plain pass. ``only_trained=True`` leaves 0 at every token ``trained_B_T`` does not
    mark (no loss reads them), which spares the prefix pass its logits and, on the head route
    (``chunked``, see :mod:`tinker_algos.model.head_logprobs`), the LM head everywhere else.
    ``checkpointing``: the model's activation checkpointing, when the caller knows it (see
    :func:`shares_safely`).
    """
    positions, rest = trained_B_T, not only_trained
    if share and trained_B_T is not None and shares_safely(module, checkpointing=checkpointing):
        tokens_np = tokens_B_T.cpu().numpy()
        split = plan(tokens_np, attention_mask_B_T.cpu().numpy(), trained_B_T.detach().cpu().numpy())
        if split is not None:
            return shared_prefix_logprobs(
                module, tokens_B_T, split, temperature=temperature, spec=spec, positions_B_T=positions, rest=rest, tokens_np=tokens_np,
                chunked=chunked,
            )
    return sequence_logprobs(
        module, tokens_B_T, attention_mask_B_T, temperature=temperature, spec=spec, positions_B_T=positions, rest=rest, chunked=chunked,
    )


def shared_prefix_logprobs(
    module: torch.nn.Module,
    tokens_B_T: torch.Tensor,
    split: SharedPrefixPlan,
    *,
    temperature: float = 1.0,
    spec: DeviceSpec | None = None,
    positions_B_T: torch.Tensor | None = None,
    rest: bool = False,
    tokens_np: np.ndarray | None = None,
    chunked: bool = True,
) -> torch.Tensor:
    """The logprobs ``[B, T]`` of a right-padded batch through the shared-prefix pass of ``split``
    (with ``positions_B_T``, the trained ones, all after each row's split, only at those: 0
    elsewhere, and the prefix pass computes no logprobs; with ``rest`` too, the others detached,
    as :func:`~tinker_algos.model.models.sequence_logprobs`); ``tokens_np``: the tokens already
    on the host, when the caller has them."""
    from transformers import DynamicCache

    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for logprobs, got {temperature}")
    device = tokens_B_T.device
    B, T = tokens_B_T.shape
    S = split.suffix_width
    if tokens_np is None:
        tokens_np = tokens_B_T.cpu().numpy()
    pre_tok, pre_mask, suf_tok, suf_mask, tgt = (torch.from_numpy(a).to(device) for a in _pass_inputs(tokens_np, split))
    split_t = torch.from_numpy(split.split_B).to(device)
    row_of = torch.tensor(split.row_of, dtype=torch.long, device=device)

    autocast = spec.autocast if spec is not None else contextlib.nullcontext
    route = head_route(module, chunked=chunked)
    kw = cache_kwarg(module)
    prefix_logprobs = positions_B_T is None or rest
    last_only = {"logits_to_keep": 1} if accepts_kwarg(module, "logits_to_keep") and not prefix_logprobs else {}
    prefix_cache = DynamicCache()
    pre_states, _ = run_model(
        module, route, autocast, input_ids=pre_tok, attention_mask=pre_mask, position_ids=position_ids_from_mask(pre_mask),
        use_cache=True, **{kw: prefix_cache}, **last_only,
    )
    # each row gets its prefix's keys and values (pads zeroed: a left pad's hidden state can be
    # anything, and only masked attention keeps it out)
    keep_U_1_P_1 = pre_mask.bool()[:, None, :, None]
    layers = []
    for layer in prefix_cache.layers:
        k = torch.where(keep_U_1_P_1, layer.keys, torch.zeros((), dtype=layer.keys.dtype, device=device))
        v = torch.where(keep_U_1_P_1, layer.values, torch.zeros((), dtype=layer.values.dtype, device=device))
        layers.append((k.index_select(0, row_of), v.index_select(0, row_of)))
    row_cache = DynamicCache(ddp_cache_data=layers)
    full_mask = torch.cat([pre_mask.index_select(0, row_of), suf_mask], dim=1)
    positions = split_t[:, None] + torch.arange(S, device=device)[None, :]
    states, _ = run_model(module, route, autocast, input_ids=suf_tok, attention_mask=full_mask, position_ids=positions, use_cache=True, **{kw: row_cache})
    # row b's token t (split < t < length) is predicted by its suffix column t - split - 1
    t_1_T = torch.arange(T, device=device)[None, :]
    col_B_T = t_1_T - split_t[:, None] - 1
    valid = (col_B_T >= 0) & (t_1_T < torch.from_numpy(split.length_B).to(device)[:, None])
    # the suffix columns whose token is asked for: column j predicts token split + 1 + j
    keep_B_S = torch.from_numpy(np.arange(S)[None, :] < (split.length_B - 1 - split.split_B)[:, None]).to(device)
    rest_B_S = None
    if positions_B_T is not None:
        wanted_B_S = (positions_B_T != 0).gather(1, (split_t[:, None] + 1 + torch.arange(S, device=device)[None, :]).clamp(max=T - 1))
        keep_B_S, rest_B_S = keep_B_S & wanted_B_S, (keep_B_S & ~wanted_B_S if rest else None)
    lp_B_S = pick_logprobs(route, states, tgt, keep_B_S, rest_B_S=rest_B_S, temperature=temperature, autocast=autocast)
    lp_B_T = lp_B_S.gather(1, col_B_T.clamp(0, S - 1))
    lp_B_T = torch.where(valid, lp_B_T, torch.zeros((), dtype=lp_B_T.dtype, device=device))
    if prefix_logprobs:
        # the prefix's tokens are never trained: detached when the trained ones were named
        with torch.no_grad() if positions_B_T is not None else contextlib.nullcontext():
            prefix_B_T = _prefix_part(route, pre_states, pre_tok, pre_mask, tokens_B_T, row_of, split_t, temperature, autocast)
        lp_B_T = lp_B_T + prefix_B_T
    return lp_B_T


def _pass_inputs(tokens_np: np.ndarray, split: SharedPrefixPlan) -> tuple[np.ndarray, ...]:
    """``(prefix tokens, prefix mask, suffix tokens, suffix mask, suffix targets)`` of the two passes."""
    B = tokens_np.shape[0]
    U, P, S = len(split.first_of), split.prefix_width, split.suffix_width
    # the distinct prefixes, right-aligned in P columns: [pads][prefix]
    pre_np = np.zeros((U, P), dtype=np.int64)
    pre_mask_np = np.zeros((U, P), dtype=np.int64)
    for u, b in enumerate(split.first_of):
        s = int(split.split_B[b])
        if s:
            pre_np[u, P - s :] = tokens_np[b, :s]
            pre_mask_np[u, P - s :] = 1
    # every row's suffix, left-aligned in S columns: [suffix][pads]; column j predicts token split + 1 + j
    suf_np = np.zeros((B, S), dtype=np.int64)
    suf_mask_np = np.zeros((B, S), dtype=np.int64)
    tgt_np = np.zeros((B, S), dtype=np.int64)
    for b, (s, e, n) in enumerate(zip(split.split_B.tolist(), split.end_B.tolist(), split.length_B.tolist(), strict=True)):
        suf_np[b, : e - s] = tokens_np[b, s:e]
        suf_mask_np[b, : e - s] = 1
        tgt_np[b, : n - 1 - s] = tokens_np[b, s + 1 : n]
    return pre_np, pre_mask_np, suf_np, suf_mask_np, tgt_np


def _prefix_part(
    route: HeadRoute | None, states_U_P_X: torch.Tensor, pre_tok: torch.Tensor, pre_mask: torch.Tensor, tokens_B_T: torch.Tensor,
    row_of: torch.Tensor, split_t: torch.Tensor, temperature: float, autocast: Callable[[], contextlib.AbstractContextManager[Any]],
) -> torch.Tensor:
    """``[B, T]``: the logprobs of tokens ``1..split`` of each row (0 elsewhere), from the prefix
    pass's states (logits, or hidden states on the head route): prefix column ``c`` predicts the
    next prefix token, the last column the row's token at ``split`` (the suffix's first)."""
    device = tokens_B_T.device
    B, T = tokens_B_T.shape
    P = pre_tok.shape[1]
    # inside the prefix: column c predicts column c + 1 (both real: left pads predict nothing)
    keep_U_P1 = (pre_mask[:, :-1] != 0) & (pre_mask[:, 1:] != 0)
    inner_U_P1 = pick_logprobs(route, states_U_P_X[:, :-1], pre_tok[:, 1:], keep_U_P1 if route is not None else None, temperature=temperature, autocast=autocast)
    # the last column predicts each row's token at its split
    at_split_B = tokens_B_T.gather(1, split_t[:, None])
    last_B_1 = states_U_P_X[:, -1:].index_select(0, row_of)
    last_B = pick_logprobs(route, last_B_1, at_split_B, None, temperature=temperature, autocast=autocast).squeeze(1)
    # row b's token t (1 <= t < split) is prefix column P - split + t, predicted by column P - split + t - 1
    t_B_T = torch.arange(T, device=device)[None, :].expand(B, T)
    col_B_T = P - split_t[:, None] + t_B_T - 1
    inner_B_T = inner_U_P1.index_select(0, row_of).gather(1, col_B_T.clamp(0, max(P - 2, 0))) if P > 1 else torch.zeros((B, T), device=device)
    inside = (t_B_T >= 1) & (t_B_T < split_t[:, None])
    out = torch.where(inside, inner_B_T, torch.zeros((), device=device))
    at_split = (t_B_T == split_t[:, None]) & (split_t[:, None] >= 1)
    return torch.where(at_split, last_B[:, None].expand(B, T), out)
