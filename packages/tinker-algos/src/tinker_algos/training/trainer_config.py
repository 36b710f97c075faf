"""What a :class:`~tinker_algos.training.trainer.Trainer` is configured with: the optimizer, the LR
schedule (:func:`lr_multiplier`), gradient clipping and micro-batching (:class:`TrainerConfig`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEDULES: tuple[str, ...] = ("constant", "linear", "cosine")


def lr_multiplier(
    step: int,
    *,
    schedule: str = "constant",
    warmup_steps: int = 0,
    total_steps: int | None = None,
    min_lr_ratio: float = 0.0,
) -> float:
    """The factor on the base LR for update number ``step`` (0-based).

    Linear warmup ``(step + 1) / warmup_steps`` over the first ``warmup_steps`` updates, then
    ``constant`` (1), ``linear`` (1 -> ``min_lr_ratio`` at ``total_steps``) or ``cosine``
    (half a cosine from 1 to ``min_lr_ratio`` at ``total_steps``); after ``total_steps`` the
    factor stays at ``min_lr_ratio``.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown LR schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    if total_steps is None:
        raise ValueError(f"LR schedule {schedule!r} needs total_steps (the number of updates)")
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, max(0.0, (step - warmup_steps) / span))
    if schedule == "linear":
        return 1.0 - (1.0 - min_lr_ratio) * progress
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


@dataclass
class TrainerConfig:
    """Optimizer, LR schedule and clipping of a :class:`Trainer`.

    Attributes:
        optimizer: a registered optimizer name (``adamw``, ``sgd``, ``lion``, or a plugin's).
        lr: the base learning rate (the schedule multiplies it).
        weight_decay: applied to weights with 2+ dims; biases and norm gains get none.
        optimizer_config: the optimizer's other keys (``betas``, ``eps``, ``momentum`` ...).
        schedule: ``constant``, ``linear`` or ``cosine`` (see :func:`lr_multiplier`).
        warmup_steps / total_steps / min_lr_ratio: schedule shape.
        max_grad_norm: clip the global gradient norm to this (None: no clipping).
        micro_batch_size: split each ``forward_backward`` into row chunks of this size (bounds
            memory; the result equals the unsplit call for every aggregation mode, as long as
            the loss itself has no cross-row statistics). Preference losses need it even.
        share_prefix: run the prompt that several rows of a micro-batch share (a GRPO group's
            copies) through the model once, its keys and values repeated for those rows
            (:mod:`tinker_algos.training.shared_prefix`): the same logprobs and gradients up to float
            rounding, for fewer token positions. Off: one full pass per row (the results of
            versions before it, bit for bit).
        chunked_logprobs: compute the LM head and the log-softmax only at the tokens a loss reads,
            a chunk of positions at a time, from the model's last hidden states
            (:mod:`tinker_algos.model.head_logprobs`; models whose logits are the head of the last
            hidden state: Llama, Qwen, Mistral ...): the same logprobs and gradients up to float
            rounding, without the whole batch's logits in memory. Off: the full logits.
        activation_checkpointing: checkpoint each decoder layer in training passes
            (:mod:`tinker_algos.model.activation_checkpointing`): the same logprobs and gradients,
            keeping each layer's input instead of its activations, for a second forward in backward.
    """

    optimizer: str = "adamw"
    lr: float = 1e-4
    weight_decay: float = 0.0
    optimizer_config: dict[str, Any] = field(default_factory=dict)
    schedule: str = "constant"
    warmup_steps: int = 0
    total_steps: int | None = None
    min_lr_ratio: float = 0.0
    max_grad_norm: float | None = 1.0
    micro_batch_size: int | None = None
    share_prefix: bool = True
    chunked_logprobs: bool = True
    activation_checkpointing: bool = False

    def validate(self) -> None:
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"TrainerConfig.lr must be > 0, got {self.lr}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"TrainerConfig.schedule {self.schedule!r} is unknown; choose one of {', '.join(SCHEDULES)}")
        if self.schedule != "constant" and self.total_steps is None:
            raise ValueError(f"TrainerConfig.schedule={self.schedule!r} needs total_steps")
        if self.warmup_steps < 0:
            raise ValueError(f"TrainerConfig.warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ValueError(f"TrainerConfig.max_grad_norm must be > 0 or None, got {self.max_grad_norm}")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise ValueError(f"TrainerConfig.micro_batch_size must be >= 1 or None, got {self.micro_batch_size}")
        for key in ("lr", "weight_decay", "params"):
            if key in self.optimizer_config:
                raise ValueError(f"TrainerConfig.optimizer_config must not set {key!r}; use the TrainerConfig field")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainerConfig:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"TrainerConfig got unknown key(s) {unknown}; known: {sorted(known)}")
        return cls(**dict(d))
