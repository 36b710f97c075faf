"""KV caches of the decode loop: room reserved up front within a call (:class:`ReservedLayer`), and
caches kept across the turns of a multi-turn rollout (:class:`TurnCache`).

**Reserved room.** A KV cache whose layers write each step into room reserved up front, instead of growing by ``torch.cat``.

``transformers.DynamicCache`` appends a decode step's keys and values to every layer with
``torch.cat``: a new tensor the size of the whole cache, allocated and copied, twice per layer and
step (60 copies of the full cache per step for SmolLM2's 30 layers). The decode loop knows how
long a call can get (prompt width plus ``max_new_tokens``), so :class:`ReservedLayer` allocates
that once and writes each step's column into it; the layer's ``keys`` and ``values`` are views of
the filled part, so everything that reads a ``DynamicLayer`` (attention, ``get_seq_length``,
``crop``, :func:`extract_rows`) reads it unchanged, and attention sees
exactly the tensors ``torch.cat`` would have built (same values, same length).

Whatever replaces ``keys`` with a tensor of its own (``batch_repeat_interleave``,
``reorder_cache``, ``batch_select_indices``) is caught on the next ``update``: the layer reserves
again, copying what it holds. ``crop`` leaves a shorter view of the same room, and the next
column is written after it.

**Across turns**, so a turn prefills only its new tokens. Turn ``t + 1``'s prompt of an episode is turn ``t``'s prompt, the tokens it sampled and the env's
reply: the decode of turn ``t`` already computed the keys and values of all of it but the last
sampled token (never fed back) and the reply. A :class:`TurnCache` holds, per episode (any
hashable key), a :class:`CachedPrefix`: the token ids whose KV it has and the per-layer keys and
values of exactly those tokens (real tokens only, no pads), as ``kv_2_L_T_H_D`` (keys/values,
layers, tokens, KV heads, head dim).

The sampler (:func:`tinker_algos.sampling.sampler.sample` with ``turn_cache=``) looks each prompt up: when
it starts with an episode's cached tokens, the batch's cache is built from the cached rows
(:func:`batch_cache`, :func:`prefix_mask`) laid out as ``[left pads][cached tokens, right-aligned to the widest][pads]
[new suffix][generated]`` and only the suffix is prefilled; a row without a usable cache (a first
turn, a prompt that does not extend the cached tokens) has only pads in the cached region and
prefills its whole prompt. The pads' keys and values are zeros, masked out of attention; the
positions count real tokens only, so every cached key carries the RoPE position a fresh prefill
would give it. After the decode, :func:`extract_rows` takes each row's keys and values back out
(prompt + generated tokens except the last) and the sampler stores them for the next turn.

Only caches whose layers are all plain ``transformers.DynamicLayer`` or the decode loop's
``ReservedLayer`` (full attention, the default of the decode loop's cache) are kept; anything else is not stored, and every turn
then prefills in full. The cache belongs to one policy and adapter with fixed weights (one
rollout): weights that change make it stale, so drop it (:meth:`TurnCache.clear`).

(The reserved layers lived in ``tinker_algos.sampling.kv_reserve`` until wave 4; that path still
imports this module.)
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

__all__ = ["CachedPrefix", "ReservedLayer", "TurnCache", "batch_cache", "extract_rows", "prefix_mask", "reserve", "reusable"]


@dataclass(frozen=True)
class CachedPrefix:
    """The token ids of one conversation whose KV is known, and those keys and values:
    ``kv_2_L_T_H_D[0]`` the keys, ``[1]`` the values, per layer, of the ``T = len(tokens)`` tokens."""

    tokens: tuple[int, ...]
    kv_2_L_T_H_D: torch.Tensor

    def __post_init__(self) -> None:
        if self.kv_2_L_T_H_D.dim() != 5 or self.kv_2_L_T_H_D.shape[0] != 2 or self.kv_2_L_T_H_D.shape[2] != len(self.tokens):
            raise ValueError(
                f"CachedPrefix: kv_2_L_T_H_D must be [2, layers, {len(self.tokens)} tokens, heads, head_dim], "
                f"got {tuple(self.kv_2_L_T_H_D.shape)}"
            )

    def __len__(self) -> int:
        return len(self.tokens)

    def extended_by(self, ids: Sequence[int]) -> bool:
        """Whether ``ids`` starts with these tokens and has at least one more (the suffix to prefill)."""
        n = len(self.tokens)
        return len(ids) > n and tuple(ids[:n]) == self.tokens


class TurnCache:
    """Per-episode :class:`CachedPrefix` entries of one rollout (keys: anything hashable)."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, CachedPrefix] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable) -> CachedPrefix | None:
        return self._entries.get(key)

    def lookup(self, key: Hashable, ids: Sequence[int]) -> CachedPrefix | None:
        """The entry of ``key`` when ``ids`` extends its tokens, else None (a full prefill)."""
        entry = self._entries.get(key)
        return entry if entry is not None and entry.extended_by(ids) else None

    def store(self, key: Hashable, entry: CachedPrefix) -> None:
        self._entries[key] = entry

    def drop(self, key: Hashable) -> None:
        """Forget ``key``'s entry (its episode ended); no error when there is none."""
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached keys and values."""
        return sum(e.kv_2_L_T_H_D.numel() * e.kv_2_L_T_H_D.element_size() for e in self._entries.values())


def prefix_mask(prefixes: Sequence[CachedPrefix | None], device: torch.device) -> torch.Tensor:
    """``mask_B_C``: 1 on each row's cached tokens, right-aligned in ``C`` columns (``C`` the longest
    cached prefix), 0 before them and on a row without one."""
    C = max((len(p) for p in prefixes if p is not None), default=0)
    mask_B_C = torch.zeros((len(prefixes), C), dtype=torch.long)
    for b, p in enumerate(prefixes):
        if p is not None:
            mask_B_C[b, C - len(p) :] = 1
    return mask_B_C.to(device)


def batch_cache(prefixes: Sequence[CachedPrefix | None], device: torch.device) -> Any:
    """A ``transformers.DynamicCache`` holding every row's cached keys and values in the columns
    :func:`prefix_mask` marks, zeros elsewhere (masked out of attention)."""
    known = [p for p in prefixes if p is not None]
    if not known:
        raise ValueError("batch_cache() needs at least one cached prefix")
    ref = known[0].kv_2_L_T_H_D
    _, L, _, H, D = ref.shape
    B, C = len(prefixes), max(len(p) for p in known)
    kv_2_L_B_C_H_D = torch.zeros((2, L, B, C, H, D), dtype=ref.dtype, device=device)
    for b, p in enumerate(prefixes):
        if p is None:
            continue
        if p.kv_2_L_T_H_D.shape[1] != L or p.kv_2_L_T_H_D.shape[3:] != (H, D):
            raise ValueError(f"batch_cache(): row {b}'s cache has shape {tuple(p.kv_2_L_T_H_D.shape)}, another's {tuple(ref.shape)}")
        kv_2_L_B_C_H_D[:, :, b, C - len(p) :] = p.kv_2_L_T_H_D.to(device)
    kv_2_L_B_H_C_D = kv_2_L_B_C_H_D.transpose(3, 4)
    return DynamicCache(ddp_cache_data=[(kv_2_L_B_H_C_D[0, i], kv_2_L_B_H_C_D[1, i]) for i in range(L)])


def reusable(cache: object) -> bool:
    """Whether ``cache``'s layers are all plain ``DynamicLayer`` (or the decode loop's
    :class:`ReservedLayer`) holding keys (what :func:`extract_rows` reads)."""


    layers = getattr(cache, "layers", None)
    return bool(layers) and all(
        type(layer) in (DynamicLayer, ReservedLayer) and getattr(layer, "keys", None) is not None for layer in layers
    )


def extract_rows(cache: object, keep_B_T: torch.Tensor) -> list[torch.Tensor]:
    """Each row's keys and values at the columns ``keep_B_T`` marks (``[B, T]`` bool, ``T`` at most
    the cache's length), as ``kv_2_L_T_H_D`` tensors of their own (nothing shared with the batch)."""
    layers = cache.layers  # type: ignore[attr-defined]
    T = keep_B_T.shape[1]
    counts = keep_B_T.sum(-1).tolist()
    per_layer = []
    for layer in layers:
        k_B_T_H_D = layer.keys[:, :, :T].transpose(1, 2)
        v_B_T_H_D = layer.values[:, :, :T].transpose(1, 2)
        per_layer.append(torch.stack([k_B_T_H_D[keep_B_T], v_B_T_H_D[keep_B_T]]))  # [2, sum(counts), H, D]
    kv_2_L_N_H_D = torch.stack(per_layer, dim=1)
    return [part.clone() for part in torch.split(kv_2_L_N_H_D, counts, dim=2)]


def _fills(view: torch.Tensor | None, room: torch.Tensor | None) -> bool:
    """Whether ``view`` is the leading part of ``room`` along the sequence dimension (``[B, H, T, D]``)."""
    return (
        view is not None
        and room is not None
        and view.data_ptr() == room.data_ptr()
        and view.shape[:2] == room.shape[:2]
        and view.shape[3:] == room.shape[3:]
        and view.stride() == room.stride()
    )


class ReservedLayer(DynamicLayer):
    """A ``DynamicLayer`` that keeps its keys and values in room for ``capacity`` positions
    (more when an update needs it), written in place."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self._key_room: torch.Tensor | None = None
        self._value_room: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, t = self.get_seq_length(), key_states.shape[-2]
        room = self._key_room
        if not (
            _fills(self.keys, room) and _fills(self.values, self._value_room) and room is not None and n + t <= room.shape[-2]
        ):
            self._reserve(n + t, key_states, value_states)
        assert self._key_room is not None and self._value_room is not None
        self._key_room[:, :, n : n + t] = key_states
        self._value_room[:, :, n : n + t] = value_states
        self.keys, self.values = self._key_room[:, :, : n + t], self._value_room[:, :, : n + t]
        return self.keys, self.values

    def _reserve(self, needed: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """New room for ``max(capacity, needed)`` positions, holding what the layer holds now."""
        n = self.get_seq_length()
        B, H, _, D = key_states.shape
        size = max(self.capacity, needed)
        keys = key_states.new_empty((B, H, size, D))
        values = value_states.new_empty((B, H, size, value_states.shape[-1]))
        if n:
            assert self.keys is not None and self.values is not None
            keys[:, :, :n] = self.keys
            values[:, :, :n] = self.values
        self._key_room, self._value_room = keys, values

    def reset(self) -> None:
        self._key_room = self._value_room = None
        super().reset()


def reserve(cache: DynamicCache, capacity: int) -> DynamicCache:
    """Make ``cache``'s plain ``DynamicLayer`` layers (those it holds, and those the model adds as
    it first writes them) :class:`ReservedLayer` with room for ``capacity`` positions, keeping
    what they hold; other layer types are left as they are. Returns ``cache``."""
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer:
            reserved = ReservedLayer(capacity)
            if layer.is_initialized and layer.keys is not None and layer.keys.numel():
                reserved.update(layer.keys, layer.values)
            cache.layers[i] = reserved
    if cache.layer_class_to_replicate is DynamicLayer:
        cache.layer_class_to_replicate = partial(ReservedLayer, capacity)  # type: ignore[assignment]
    return cache
