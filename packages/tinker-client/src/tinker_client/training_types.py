"""What a training loop sends to the ``TrainingService`` and gets back: plain Python and numpy
values (no torch), each converted to or from its protobuf message (``to_proto`` / ``from_proto``).

:mod:`tinker_client.training` re-exports every name here; import them from there.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tinker_core.proto import training_pb2

STOP_REASONS = {  # the wire's stop reasons, as SampledSequence.stop_reason names them
    training_pb2.STOP_REASON_LENGTH: "length",
    training_pb2.STOP_REASON_STOP_TOKEN: "stop_token",
    training_pb2.STOP_REASON_STOP_STRING: "stop_string",
}


def int_list(x: Any) -> list[int]:
    """Token ids (a list, a numpy array, None) as a flat list of ints."""
    arr = np.asarray(x if x is not None else [], dtype=np.int64).reshape(-1)
    return [int(v) for v in arr]


def _floats(x: Any, name: str, n: int) -> list[float]:
    if x is None:
        return []
    arr = np.asarray(x, dtype=np.float32).reshape(-1)
    if arr.size and arr.size != n:
        raise ValueError(f"Datum.{name}: has {arr.size} entries for {n} tokens; give one per token or none")
    return [float(v) for v in arr]


@dataclass
class Datum:
    """One training example in Tinker's alignment: position ``t`` predicts ``target_tokens[t]``
    from ``tokens[: t + 1]`` (for next-token training ``tokens = seq[:-1]``, ``target_tokens =
    seq[1:]``; :meth:`from_sequence` builds that). Per-position fields are optional."""

    tokens: Sequence[int] | np.ndarray
    target_tokens: Sequence[int] | np.ndarray
    loss_weights: Sequence[float] | np.ndarray | None = None
    advantages: Sequence[float] | np.ndarray | None = None
    sampling_logprobs: Sequence[float] | np.ndarray | None = None

    @classmethod
    def from_sequence(
        cls,
        sequence: Sequence[int] | np.ndarray,
        *,
        prompt_len: int,
        advantage: float | None = None,
        sampling_logprobs: Sequence[float] | np.ndarray | None = None,
        weight: float = 1.0,
    ) -> Datum:
        """A datum over ``sequence`` (prompt + completion) that trains the completion only.

        ``sampling_logprobs`` are the sampler's logprobs of the completion tokens (as
        :class:`SampledSequence` returns them); ``advantage`` is broadcast over the completion.
        """
        seq = int_list(sequence)
        if not 1 <= prompt_len < len(seq):
            raise ValueError(f"prompt_len={prompt_len} must be in [1, {len(seq) - 1}] for a sequence of {len(seq)} tokens")
        n_completion = len(seq) - prompt_len
        head = [0.0] * (prompt_len - 1)
        weights = head + [float(weight)] * n_completion
        out = cls(tokens=seq[:-1], target_tokens=seq[1:], loss_weights=weights)
        if advantage is not None:
            out.advantages = head + [float(advantage)] * n_completion
        if sampling_logprobs is not None:
            lp = [float(v) for v in np.asarray(sampling_logprobs, dtype=np.float32).reshape(-1)]
            if len(lp) != n_completion:
                raise ValueError(f"sampling_logprobs has {len(lp)} entries for {n_completion} completion tokens")
            out.sampling_logprobs = head + lp
        return out

    def to_proto(self) -> training_pb2.Datum:
        tokens = int_list(self.tokens)
        n = len(tokens)
        return training_pb2.Datum(
            tokens=tokens,
            target_tokens=int_list(self.target_tokens),
            loss_weights=_floats(self.loss_weights, "loss_weights", n),
            advantages=_floats(self.advantages, "advantages", n),
            sampling_logprobs=_floats(self.sampling_logprobs, "sampling_logprobs", n),
        )


@dataclass
class AdamParams:
    """Adam(W) settings of one ``optim_step`` (Tinker's defaults)."""

    learning_rate: float
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0

    def to_proto(self) -> training_pb2.AdamParams:
        return training_pb2.AdamParams(**{k: float(v) for k, v in self.__dict__.items()})


@dataclass
class SamplingParams:
    """How to sample: ``temperature=0`` is greedy; ``seed`` makes samples reproducible."""

    max_tokens: int = 64
    temperature: float | None = None
    top_p: float | None = None
    top_k: int = 0
    stop: Sequence[str] = ()
    stop_token_ids: Sequence[int] = ()
    seed: int | None = None

    def to_proto(self) -> training_pb2.SamplingParams:
        if isinstance(self.stop, str):
            raise TypeError("SamplingParams.stop is a list of strings; wrap a single one: stop=[...]")
        p = training_pb2.SamplingParams(
            top_k=int(self.top_k), max_tokens=int(self.max_tokens), stop=list(self.stop),
            stop_token_ids=int_list(self.stop_token_ids),
        )
        for name in ("temperature", "top_p", "seed"):
            value = getattr(self, name)
            if value is not None:
                setattr(p, name, value)
        return p


@dataclass
class SampledSequence:
    """New tokens (not the prompt), their sampling logprobs and why sampling stopped
    (``"length"``, ``"stop_token"`` or ``"stop_string"``)."""

    tokens: list[int]
    logprobs: list[float]
    stop_reason: str

    @classmethod
    def from_proto(cls, s: training_pb2.SampledSequence) -> SampledSequence:
        return cls(list(s.tokens), list(s.logprobs), STOP_REASONS.get(s.stop_reason, "unspecified"))


@dataclass
class SampleResult:
    """The samples of one prompt (Tinker's ``SampleResponse.sequences``)."""

    sequences: list[SampledSequence]


@dataclass
class ForwardBackwardOutput:
    """Per-datum outputs (``{"logprobs": array over target tokens}``) and scalar metrics
    (``loss`` = ``loss:sum``, ``num_tokens``, the loss's own ``<loss>/<key>``)."""

    loss_fn_outputs: list[dict[str, np.ndarray]]
    metrics: dict[str, float]

    @classmethod
    def from_proto(cls, r: Any) -> ForwardBackwardOutput:
        """From a ``ForwardBackwardResponse`` or a ``ForwardResponse``."""
        return cls(
            loss_fn_outputs=[{"logprobs": np.asarray(o.logprobs, dtype=np.float32)} for o in r.outputs],
            metrics=dict(r.metrics),
        )


@dataclass
class OptimStepOutput:
    step: int
    metrics: dict[str, float] = field(default_factory=dict)


class Tokenizer:
    """The session's tokenizer, loaded from its saved ``tokenizer.json`` with ``tokenizers``."""

    def __init__(self, files: dict[str, bytes]) -> None:
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError:  # pragma: no cover - tokenizers ships with the workspace
            raise ImportError("get_tokenizer() needs the 'tokenizers' package: pip install tokenizers") from None
        if "tokenizer.json" not in files:
            raise ValueError(f"the server sent no tokenizer.json (files: {sorted(files)}); the model's tokenizer is not a fast tokenizer")
        self.files = files
        self.backend = HFTokenizer.from_str(files["tokenizer.json"].decode())
        config = json.loads(files.get("tokenizer_config.json", b"{}").decode() or "{}")
        special = {**json.loads(files.get("special_tokens_map.json", b"{}").decode() or "{}"), **config}

        def token_id(key: str) -> int | None:
            value = special.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            return self.backend.token_to_id(value) if isinstance(value, str) else None

        self.eos_token_id = token_id("eos_token")
        self.bos_token_id = token_id("bos_token")
        self.pad_token_id = token_id("pad_token")

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return str(self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens))

    def save(self, directory: str | Path) -> Path:
        """Write the tokenizer files (``AutoTokenizer.from_pretrained(directory)`` loads them)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        for name, data in self.files.items():
            (d / name).write_bytes(data)
        return d
