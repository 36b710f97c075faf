"""``ModelInfo``: the model a training session runs on, one class for both sides of the wire.

The scheduler's model host builds it (:mod:`tinker_scheduler.host_ops` re-exports it), the
TrainingService sends it as the wire's ``ModelInfo`` message (:meth:`ModelInfo.to_proto`), and
the client reads it back (:meth:`ModelInfo.from_proto`, ``tinker_client.training.ModelInfo``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tinker_core.proto import training_pb2

__all__ = ["ModelInfo"]


@dataclass(frozen=True)
class ModelInfo:
    """A training session's model: its base, adapter, tokenizer, size and step."""

    base_model: str
    lora_rank: int
    lora_alpha: float
    tokenizer_id: str
    vocab_size: int
    step: int
    model_type: str
    trainable_parameters: int
    #: The longest sequence (in tokens) the model takes; unknown is None on the host (the model's
    #: config does not say) and 0 from the wire (or from an older server).
    #: Each datum's tokens plus its last target, and each prompt plus ``max_tokens``, must fit.
    context_length: int | None = 0

    @classmethod
    def from_proto(cls, m: training_pb2.ModelInfo) -> ModelInfo:
        """The wire message's fields (0 or empty where the server left them unset)."""
        return cls(**{f.name: getattr(m, f.name) for f in dataclasses.fields(cls)})

    def to_proto(self) -> training_pb2.ModelInfo:
        """The wire message (a field set to None is left unset: 0 or empty)."""
        fields = training_pb2.ModelInfo.DESCRIPTOR.fields_by_name
        return training_pb2.ModelInfo(
            **{k: v for k, v in dataclasses.asdict(self).items() if k in fields and v is not None}
        )
