"""Activation checkpointing per decoder layer: keep each layer's input, recompute the rest in backward.

A training pass keeps, for backward, every tensor the model's layers compute (on SmolLM2-135M
about 1.6 MB per token position over its 30 layers: MLP-wide, hidden-wide and per-head
activations); checkpointing keeps only what enters each decoder layer (hidden-size floats per
position per layer) and runs the layer's forward a second time during backward. It trades about
one more forward pass for the memory, which is what lets a long multi-turn batch train in one
pass (``docs/explanation/experiments/memory.md``).

It uses transformers' own mechanism (``activation_checkpointing_enable`` on the base model, named
``gradient_checkpointing_enable`` before transformers 5, with the
non-reentrant ``torch.utils.checkpoint``, so peft's LoRA weights get their gradients without
``enable_input_require_grads``). The layers checkpoint only when the model is in training mode
and autograd records: sampling (under ``torch.no_grad``) keeps its KV cache and runs as before.
The KV cache is off inside a checkpointed layer, so the shared-prefix pass
(:func:`tinker_algos.training.shared_prefix.shares_safely`) falls back to one full pass per row.
"""

from __future__ import annotations

import torch

from tinker_algos.model.head_logprobs import base_of

__all__ = ["base_of", "is_checkpointing", "set_activation_checkpointing"]


def is_checkpointing(module: torch.nn.Module) -> bool:
    """Whether the model's layers checkpoint their activations in training passes."""
    base = base_of(module)
    # transformers 5 renamed the flag (the old name warns)
    name = "is_activation_checkpointing" if hasattr(type(base), "is_activation_checkpointing") else "is_gradient_checkpointing"
    return bool(getattr(base, name, False))


def set_activation_checkpointing(module: torch.nn.Module, on: bool) -> None:
    """Turn per-layer activation checkpointing on or off for ``module`` (a transformers model or
    a peft model around one).

    Raises:
        ValueError: ``on`` for a model that does not support it (``supports_gradient_checkpointing``
            false), naming the setting to turn off.
    """
    base = base_of(module)
    if on == is_checkpointing(module):
        return
    # transformers 5 renamed the methods (the old names warn)
    new_names = hasattr(base, "activation_checkpointing_enable")
    if not on:
        (base.activation_checkpointing_disable if new_names else base.gradient_checkpointing_disable)()
        return
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise ValueError(
            f"{type(base).__name__} does not support activation checkpointing; "
            "set algorithm.activation_checkpointing: false"
        )
    if new_names:
        base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
