"""The operations of a model host, as request and response types.

One request type per operation a training session runs on its model host
(:class:`~tinker_scheduler.model_host.ModelHost`). The TrainingService
(:mod:`tinker_scheduler.training_service`), the Tinker gateway (:mod:`tinker_scheduler.tinker_api`)
and the session manager build them; the host runs them (``ModelHost.call(slot_id, request)``) and
answers the request's response type. A request's type parameter is its response type, so
``call(ForwardBackward(...))`` is a :class:`ForwardResult` to a type checker too.

Failures are :class:`~tinker_scheduler.errors.StatusError` exceptions (a host turns any other
exception into one before it leaves, so only that type crosses a Ray actor's boundary); they map
to gRPC and HTTP statuses in :mod:`tinker_scheduler.errors`.

All fields are plain values (numpy arrays, lists, dicts, strings): picklable, no torch. The
translation onto :mod:`tinker_algos` (data alignment, loss keys, Adam and sampling defaults, stop
reasons) is :mod:`tinker_algos.tinker_ops`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from tinker_algos import tinker_ops
from tinker_core.proto.model_info import ModelInfo

__all__ = [
    "SessionSpec", "adapter_name", "ComputeLogprobs", "Datum", "Forward", "ForwardBackward", "ForwardResult", "GetWeights", "HostRequest", "Info",
    "LoadState", "Loaded", "ModelInfo", "OptimStep", "OptimStepResult", "Sample", "SampledSequence", "Saved",
    "SaveState", "SaveWeightsForSampler", "Score",
]

R = TypeVar("R")

#: One datum as :func:`tinker_algos.tinker_ops.datum_batch` reads it: ``tokens``, ``target_tokens``
#: and optionally ``loss_weights``, ``advantages``, ``sampling_logprobs`` (one value per token).
Datum = Mapping[str, Sequence[float]]
#: One sampled sequence (``tokens``, ``logprobs``, ``stop_reason``; see ``tinker_ops.sampled_sequences``).
SampledSequence = dict[str, Any]


@dataclass
class SessionSpec:
    """What a session trains: ``lora_rank == 0`` means full fine-tuning. ``tenant`` (empty: none
    given) is whose it is: the host's executor shares turns between tenants, then between each
    tenant's sessions (:mod:`tinker_scheduler.host_executor`)."""

    session_id: str
    lora_rank: int = 8
    lora_alpha: float = 0.0
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = field(default_factory=list)
    seed: int = 0
    tenant: str = ""

    @property
    def adapter(self) -> str | None:
        return adapter_name(self.session_id) if self.lora_rank > 0 else None


def adapter_name(session_id: str) -> str:
    """The peft adapter name of a session (valid adapter names: letters, digits, ``_``, ``-``)."""
    return "s-" + "".join(c if c.isalnum() or c in "_-" else "_" for c in session_id)


class HostRequest(Generic[R]):
    """A request a model host runs for one training session; ``R`` is what it answers."""

    def check(self, context_length: int | None) -> None:
        """Refuse (``ValueError`` naming the field) what cannot fit the model, before the request
        takes a turn on the host. Most requests have nothing to check."""


# ---- responses -----------------------------------------------------------------------------------
# ModelInfo is tinker_core.proto.model_info.ModelInfo: one class with the client (imported above).


@dataclass(frozen=True)
class ForwardResult:
    """Per-datum logprobs of the targets, and the loss's metrics."""

    logprobs: list[list[float]]
    metrics: dict[str, float]


@dataclass(frozen=True)
class OptimStepResult:
    """The step count after an optimizer step, and its metrics (``optim/...``)."""

    step: int
    metrics: dict[str, float]


@dataclass(frozen=True)
class Saved:
    """Where a state or sampler weights were written."""

    path: str


@dataclass(frozen=True)
class Loaded:
    """The step count of a loaded state."""

    step: int


# ---- requests ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Info(HostRequest[ModelInfo]):
    """The session's :class:`ModelInfo`."""


@dataclass(frozen=True)
class ForwardBackward(HostRequest[ForwardResult]):
    """Accumulate the gradients of ``loss_fn`` over ``data`` (applied by :class:`OptimStep`)."""

    data: Sequence[Datum]
    loss_fn: str
    loss_config: Mapping[str, float] = field(default_factory=dict)

    def check(self, context_length: int | None) -> None:
        tinker_ops.check_data(_lengths(self.data), context_length)


@dataclass(frozen=True)
class Forward(HostRequest[ForwardResult]):
    """Logprobs of ``data`` without gradients; with a ``loss_fn`` also its metrics."""

    data: Sequence[Datum]
    loss_fn: str = ""
    loss_config: Mapping[str, float] = field(default_factory=dict)

    def check(self, context_length: int | None) -> None:
        tinker_ops.check_data(_lengths(self.data), context_length)


@dataclass(frozen=True)
class OptimStep(HostRequest[OptimStepResult]):
    """Apply the accumulated gradients with Adam (``adam``: ``AdamParams`` fields by name)."""

    adam: Mapping[str, float]


@dataclass(frozen=True)
class Sample(HostRequest[list[list[SampledSequence]]]):
    """``num_samples`` continuations of each prompt (per prompt, per sample).

    ``params``: the sampling parameters (``max_tokens``, ``temperature``, ...; see
    ``tinker_ops.sampling_params``); ``sampler_path``: saved sampler weights to sample instead of
    the session's adapter; ``base``: sample the base model with every adapter off.
    """

    prompts: Sequence[Sequence[int]]
    params: Mapping[str, Any]
    num_samples: int = 1
    sampler_path: str = ""
    base: bool = False

    def check(self, context_length: int | None) -> None:
        tinker_ops.check_sample([len(p) for p in self.prompts], int(self.params.get("max_tokens", 0)),
                                self.num_samples, context_length)


@dataclass(frozen=True)
class Score(HostRequest[list[dict[str, np.ndarray]]]):
    """Logprobs and the ``topk`` tokens per position of whole sequences (``tinker_ops.score_tokens``);
    ``sampler_path`` and ``base`` as for :class:`Sample`."""

    sequences: Sequence[Sequence[int]]
    topk: int = 0
    sampler_path: str = ""
    base: bool = False


@dataclass(frozen=True)
class ComputeLogprobs(HostRequest[list[list[float]]]):
    """The logprob of each token of each sequence given the tokens before it."""

    sequences: Sequence[Sequence[int]]

    def check(self, context_length: int | None) -> None:
        tinker_ops.check_sequences([len(s) for s in self.sequences], context_length)


@dataclass(frozen=True)
class SaveState(HostRequest[Saved]):
    """Write weights, optimizer, RNG and step to ``path``."""

    path: str


@dataclass(frozen=True)
class LoadState(HostRequest[Loaded]):
    """Load a saved state from ``path`` (the optimizer and RNG too when ``with_optimizer``)."""

    path: str
    with_optimizer: bool = False


@dataclass(frozen=True)
class SaveWeightsForSampler(HostRequest[Saved]):
    """Write the weights a sampler loads (the adapter, or the whole model) to ``path``."""

    path: str


@dataclass(frozen=True)
class GetWeights(HostRequest[dict[str, np.ndarray]]):
    """Weights by name: the session's trainable ones (``trainable_only``) or the base model and its
    adapter; from a saved ``path`` instead when given; ``path="tokenizer"``: the tokenizer's files."""

    path: str = ""
    trainable_only: bool = False


def _lengths(data: Sequence[Datum]) -> list[int]:
    return [len(d.get("tokens", ())) for d in data]
