"""A KV cache whose layers write each step into room reserved up front, instead of growing by ``torch.cat``.

``transformers.DynamicCache`` appends a decode step's keys and values to every layer with
``torch.cat``: a new tensor the size of the whole cache, allocated and copied, twice per layer and
step (60 copies of the full cache per step for SmolLM2's 30 layers). The decode loop knows how
long a call can get (prompt width plus ``max_new_tokens``), so :class:`ReservedLayer` allocates
that once and writes each step's column into it; the layer's ``keys`` and ``values`` are views of
the filled part, so everything that reads a ``DynamicLayer`` (attention, ``get_seq_length``,
``crop``, :func:`tinker_algos.sampling.turn_cache.extract_rows`) reads it unchanged, and attention sees
exactly the tensors ``torch.cat`` would have built (same values, same length).

Whatever replaces ``keys`` with a tensor of its own (``batch_repeat_interleave``,
``reorder_cache``, ``batch_select_indices``) is caught on the next ``update``: the layer reserves
again, copying what it holds. ``crop`` leaves a shorter view of the same room, and the next
column is written after it.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

__all__ = ["ReservedLayer", "reserve"]


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
