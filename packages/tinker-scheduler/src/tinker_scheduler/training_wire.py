"""TrainingService messages <-> the model hosts' requests and answers (:mod:`tinker_scheduler.host_ops`).

No pickles on the wire: tensors travel as packed numeric fields, weights as ``TensorChunk``
streams (:mod:`tinker_core.proto.tensors`). Field errors raise
:class:`~tinker_scheduler.errors.StatusError` (``INVALID_ARGUMENT``) naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

from tinker_core.proto import training_pb2
from tinker_scheduler import host_ops as ops
from tinker_scheduler.errors import StatusError
from tinker_scheduler.sessions import SessionRequest

#: Keys ``CreateTrainingSessionRequest.options_json`` may hold.
OPTION_KEYS = ("precision", "device", "revision")
#: The largest ``lora_rank``: more is no use for an adapter and can ask a shared host for more memory
#: than it has (a rank of 100,000 gave the tiny model 1.1 billion trainable parameters; 2**31 - 1
#: asked for a terabyte).
MAX_LORA_RANK = 1024


def session_request(request: training_pb2.CreateTrainingSessionRequest) -> SessionRequest:
    """The session a CreateSession request asks for (``options_json`` parsed and checked)."""
    options = _options(request.options_json)
    if request.lora_rank > MAX_LORA_RANK:
        raise StatusError(
            "INVALID_ARGUMENT", f"lora_rank: {request.lora_rank} is over the limit of {MAX_LORA_RANK} (0 = full fine-tuning)"
        )
    if options.get("revision"):
        raise StatusError(
            "INVALID_ARGUMENT",
            "options_json.revision: pinned revisions are not supported yet; download that revision to a "
            "directory and pass it as base_model",
        )
    return SessionRequest(
        base_model=request.base_model, lora_rank=int(request.lora_rank), lora_alpha=float(request.lora_alpha),
        lora_dropout=float(request.lora_dropout), lora_target_modules=tuple(request.lora_target_modules),
        seed=int(request.seed), precision=options.get("precision"), device=options.get("device"),
        request_id=request.request_id,
    )


def _options(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise StatusError("INVALID_ARGUMENT", f"options_json: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise StatusError("INVALID_ARGUMENT", "options_json: must be a JSON object")
    unknown = sorted(set(data) - set(OPTION_KEYS))
    if unknown:
        raise StatusError("INVALID_ARGUMENT", f"options_json: unknown key(s) {unknown}; known: {list(OPTION_KEYS)}")
    return data


def datum_to_dict(d: training_pb2.Datum) -> dict[str, list[float]]:
    """A ``Datum`` as the dict ``tinker_algos.tinker_ops.datum_batch`` reads."""
    if d.extra_inputs:
        raise StatusError(
            "INVALID_ARGUMENT",
            f"data.extra_inputs: {sorted(d.extra_inputs)} not supported by the built-in trainer yet; "
            "the losses served take tokens, target_tokens, loss_weights, advantages and sampling_logprobs",
        )
    return {
        "tokens": list(d.tokens), "target_tokens": list(d.target_tokens), "loss_weights": list(d.loss_weights),
        "advantages": list(d.advantages), "sampling_logprobs": list(d.sampling_logprobs),
    }


def data(request: training_pb2.ForwardRequest | training_pb2.ForwardBackwardRequest) -> list[dict[str, list[float]]]:
    """The ``data`` of a Forward or ForwardBackward request."""
    return [datum_to_dict(d) for d in request.data]


def datum_outputs(result: ops.ForwardResult) -> list[training_pb2.DatumOutput]:
    """The per-datum logprobs of a Forward or ForwardBackward result."""
    return [training_pb2.DatumOutput(logprobs=lp) for lp in result.logprobs]


def adam_fields(a: training_pb2.AdamParams) -> dict[str, float]:
    """Every ``AdamParams`` field by name (0 where unset)."""
    return {f.name: float(getattr(a, f.name)) for f in training_pb2.AdamParams.DESCRIPTOR.fields}


def sampling_fields(p: training_pb2.SamplingParams) -> dict[str, Any]:
    """The ``SamplingParams`` fields that are set (``max_tokens`` must be)."""
    out: dict[str, Any] = {"top_k": p.top_k, "max_tokens": p.max_tokens, "stop": list(p.stop),
                           "stop_token_ids": list(p.stop_token_ids)}
    for name in ("temperature", "top_p", "seed"):
        if p.HasField(name):
            out[name] = getattr(p, name)
    if p.max_tokens <= 0:
        raise StatusError("INVALID_ARGUMENT", f"sampling_params.max_tokens: must be > 0 (got {p.max_tokens})")
    return out


def stop_reason(name: str) -> training_pb2.StopReason:
    """A Tinker stop reason (``tinker_algos.tinker_ops.STOP_REASONS`` values) as the wire enum."""
    return cast(training_pb2.StopReason, training_pb2.StopReason.Value(f"STOP_REASON_{name.upper()}"))


def sample_response(rows: Iterable[Iterable[Mapping[str, Any]]]) -> training_pb2.SampleResponse:
    """A model host's samples (per prompt, per sample) as a ``SampleResponse``."""
    return training_pb2.SampleResponse(results=[
        training_pb2.PromptSamples(samples=[
            training_pb2.SampledSequence(tokens=x["tokens"], logprobs=x["logprobs"], stop_reason=stop_reason(x["stop_reason"]))
            for x in row
        ]) for row in rows
    ])
