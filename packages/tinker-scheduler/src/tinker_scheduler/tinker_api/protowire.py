"""The protobuf messages of Tinker's HTTP API that the SDK sends or expects as binary protobuf.

The SDK posts ``forward_backward`` as an ``application/x-protobuf`` ``ForwardBackwardRequest`` and
reads ``ForwardBackwardOutput`` and ``SampleResponse`` results only as protobuf. Those few
messages are read and written here straight from the protobuf wire format (varints and
length-delimited fields), with the field numbers of Tinker's public schema, so the scheduler needs
neither the SDK nor generated code. Only the fields the gateway serves are read; others are
skipped. A malformed body raises :class:`ValueError`.

Why not ``protobuf``'s own parser (already a dependency) over a schema built at run time: it
decodes a whole body before any of it can be checked, so a hostile body within the HTTP size
limit (millions of empty fields, a datum of millions of tokens) costs its full decode and its
memory before being refused. This reader counts fields, values and tokens as it goes
(:class:`_Budget`, from the tenant's request limits) and stops at the first one over.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from tinker_algos.tinker_ops import RequestLimits

#: Tinker's ``DType`` enum -> numpy dtype.
DTYPES: dict[int, np.dtype[Any]] = {1: np.dtype(np.float32), 2: np.dtype(np.int64), 3: np.dtype(np.int32)}
#: ``StopReason`` enum values.
STOP_REASON_STOP, STOP_REASON_LENGTH = 0, 1


# ---- reading ---------------------------------------------------------------------------------
class _Budget:
    """How much more of a body the reader may decode (fields, data, tokens), so a hostile body is
    refused after a bounded amount of work instead of decoded whole. None: no limits."""

    def __init__(self, limits: RequestLimits | None) -> None:
        self.limits = limits
        # a datum of the SDK has about a dozen fields; 64 each leaves plenty of room
        self.fields = 64 * (limits.max_data + 1) + 1024 if limits is not None else -1
        self.tokens = 0

    def field(self) -> None:
        if self.fields == 0:
            raise ValueError("the protobuf body has more fields than its data limit allows (max_data_per_request)")
        self.fields -= 1

    def add_tokens(self, n: int, where: str) -> None:
        self.tokens += n
        if self.limits is not None and self.tokens > self.limits.max_tokens:
            raise ValueError(f"{where}: more than {self.limits.max_tokens} tokens in one request, over the limit "
                             "(max_tokens_per_request); split them into several requests")

    def elements(self, n: int, where: str) -> None:
        if self.limits is not None and n > self.limits.max_tokens + 1:
            raise ValueError(f"{where}: {n} values, more than a datum can have ({self.limits.max_tokens + 1}, "
                             "max_tokens_per_request + 1)")


_UNLIMITED = _Budget(None)


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated protobuf varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ValueError("protobuf varint too long")


def fields(buf: bytes, budget: _Budget = _UNLIMITED) -> Iterator[tuple[int, Any]]:
    """``(field number, value)`` of a message: ints for varints, bytes for fixed fields (8 bytes
    for doubles, 4 for floats) and length-delimited fields. Every field counts against ``budget``."""
    i = 0
    while i < len(buf):
        budget.field()
        key, i = _varint(buf, i)
        number, kind = key >> 3, key & 7
        value: Any
        if kind == 0:
            value, i = _varint(buf, i)
        elif kind in (1, 2, 5):
            if kind == 2:
                n, i = _varint(buf, i)
            else:
                n = 8 if kind == 1 else 4
            if i + n > len(buf):
                raise ValueError("truncated protobuf field")
            value, i = buf[i:i + n], i + n
        else:
            raise ValueError(f"unsupported protobuf wire type {kind}")
        yield number, value


def _bytes(value: Any, where: str) -> bytes:
    """A length-delimited field's bytes; a field of another wire type is a malformed body."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise ValueError(f"{where}: malformed protobuf field (expected a length-delimited value)")
    return bytes(value)


def _text(value: Any, where: str) -> str:
    try:
        return _bytes(value, where).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{where}: is not valid UTF-8") from None


def _read_double(value: Any, where: str) -> float:
    raw = _bytes(value, where)
    if len(raw) != 8:
        raise ValueError(f"{where}: malformed protobuf double ({len(raw)} bytes, not 8)")
    return float(struct.unpack("<d", raw)[0])


def _array(raw: bytes, dtype: np.dtype[Any], where: str, budget: _Budget) -> np.ndarray:
    if len(raw) % dtype.itemsize:
        raise ValueError(f"{where}: {len(raw)} bytes is not a whole number of {dtype} values")
    budget.elements(len(raw) // dtype.itemsize, where)
    return np.frombuffer(raw, dtype=dtype)


def _tensor(buf: bytes, name: str, budget: _Budget) -> np.ndarray:
    where = f"loss_fn_inputs.{name}"
    dense, dtype, shape = b"", 0, list[int]()
    for number, value in fields(buf, budget):
        if number == 1:
            dense = _bytes(value, where)
        elif number == 2:
            raise ValueError(f"{where}: sparse tensors are not supported yet; send it dense")
        elif number == 3:
            dtype = value
        elif number == 4:
            shape.extend(_packed_varints(value, budget) if isinstance(value, bytes) else [value])
    if dtype not in DTYPES:
        raise ValueError(f"{where}: unsupported dtype {dtype}")
    return _array(dense, DTYPES[dtype], where, budget).copy()


def _packed_varints(buf: bytes, budget: _Budget = _UNLIMITED) -> list[int]:
    out, i = [], 0
    while i < len(buf):
        budget.field()
        v, i = _varint(buf, i)
        out.append(v)
    return out


def _map_entry(buf: Any, where: str, budget: _Budget) -> tuple[str, Any]:
    key, value = "", None
    for number, v in fields(_bytes(buf, where), budget):
        if number == 1:
            key = _text(v, f"{where} key")
        elif number == 2:
            value = v
    return key, value


def _datum(buf: Any, i: int, budget: _Budget) -> dict[str, Any]:
    tokens: list[int] = []
    inputs: dict[str, np.ndarray] = {}
    spans: dict[str, list[dict[str, Any]]] = {"model_input_spans": [], "loss_fn_input_spans": []}
    where = f"data[{i}]"
    for number, value in fields(_bytes(buf, where), budget):
        if number == 1:  # Chunk
            for kind, chunk in fields(_bytes(value, f"{where}.model_input"), budget):
                if kind != 1:
                    raise ValueError(f"{where}.model_input: only encoded_text chunks are supported (no images or audio)")
                for n, toks in fields(_bytes(chunk, f"{where}.model_input"), budget):
                    if n == 1:
                        ids = _array(_bytes(toks, f"{where}.model_input.tokens"), np.dtype(np.int32),
                                     f"{where}.model_input.tokens", budget)
                        budget.add_tokens(len(ids), f"{where}.model_input.tokens")
                        tokens.extend(ids.tolist())
        elif number == 2:
            name, tensor = _map_entry(value, f"{where}.loss_fn_inputs", budget)
            inputs[name] = _tensor(_bytes(tensor or b"", f"{where}.loss_fn_inputs.{name}"), name, budget)
        elif number in (3, 4):  # model_input_spans, loss_fn_input_spans
            field_name = "model_input_spans" if number == 3 else "loss_fn_input_spans"
            spans[field_name].append(_span(value, f"{where}.{field_name}[{len(spans[field_name])}]", budget))
    return {"tokens": tokens, "loss_fn_inputs": inputs, **spans}


def _span(buf: Any, where: str, budget: _Budget) -> dict[str, Any]:
    """A ``ProvenanceSpan``: ``kind`` (``prompt`` or ``sampled``), ``sequence_id``, ``offset``, ``length``."""
    out: dict[str, Any] = {"kind": "", "sequence_id": "", "offset": 0, "length": 0}
    for arm, body in fields(_bytes(buf, where), budget):
        if arm not in (1, 2):
            continue
        out["kind"] = "prompt" if arm == 1 else "sampled"
        for n, v in fields(_bytes(body, where), budget):
            if n == 1:
                out["sequence_id"] = _text(v, f"{where}.sequence_id")
            elif n in (2, 3) and isinstance(v, int):
                out["offset" if n == 2 else "length"] = v
    if not out["kind"] or not out["sequence_id"]:
        raise ValueError(f"{where}: a provenance run needs prompt_tokens or sampled_tokens with a sequence_id")
    return out


def read_forward_backward(buf: bytes, limits: RequestLimits | None = None) -> dict[str, Any]:
    """A ``ForwardBackwardRequest``: model_id, seq_id, data (tokens, loss_fn_inputs arrays and the
    provenance runs ``model_input_spans`` / ``loss_fn_input_spans`` per datum), loss_fn,
    loss_fn_config (numbers) and forward_only.

    With ``limits`` the body is refused (:class:`ValueError`) as soon as it holds more data, tokens
    or fields than they allow, before the rest is decoded."""
    budget = _Budget(limits)
    out: dict[str, Any] = {"model_id": "", "seq_id": 0, "data": [], "loss_fn": "", "loss_fn_config": {},
                           "forward_only": False}
    v2: dict[str, float] = {}
    for number, value in fields(buf, budget):
        if number == 1:
            out["model_id"] = _text(value, "model_id")
        elif number == 2:
            out["seq_id"] = value
        elif number == 3:
            if limits is not None and len(out["data"]) >= limits.max_data:
                raise ValueError(f"data: more than {limits.max_data} data in one request, over the limit "
                                 "(max_data_per_request); split them into several requests")
            out["data"].append(_datum(value, len(out["data"]), budget))
        elif number == 4:
            out["loss_fn"] = _text(value, "loss_fn")
        elif number == 5:
            key, raw = _map_entry(value, "loss_fn_config", budget)
            out["loss_fn_config"][key] = _read_double(raw, f"loss_fn_config.{key}") if raw else 0.0
        elif number == 6:
            out["forward_only"] = bool(value)
        elif number == 7:
            key, raw = _map_entry(value, "loss_fn_config", budget)
            for n, v in fields(_bytes(raw or b"", f"loss_fn_config.{key}"), budget):
                if n == 1:
                    v2[key] = _read_double(v, f"loss_fn_config.{key}")
                elif n == 2:
                    raise ValueError(f"loss_fn_config.{key}: text values are not supported; send numbers")
    out["loss_fn_config"].update(v2)
    return out


# ---- writing ---------------------------------------------------------------------------------
def _enc_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(number: int, kind: int) -> bytes:
    return _enc_varint(number << 3 | kind)


def _len(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _enc_varint(len(payload)) + payload


def _int(number: int, value: int) -> bytes:
    return _key(number, 0) + _enc_varint(value) if value else b""


def _double(number: int, value: float) -> bytes:
    return _key(number, 1) + struct.pack("<d", value)


def forward_backward_output(logprobs: list[list[float]], metrics: dict[str, float]) -> bytes:
    """A ``ForwardBackwardOutput``: one ``ArrayRecord`` with the float32 ``logprobs`` of each datum."""
    arrays = [np.asarray(lp, dtype=np.float32) for lp in logprobs]
    offsets = np.cumsum([0] + [a.nbytes for a in arrays]).astype(np.int64)
    batched = _len(1, b"".join(a.tobytes() for a in arrays)) + _len(2, offsets.tobytes()) + _int(3, 1)
    record = _len(1, b"ArrayRecord") + _len(2, _len(1, b"logprobs") + _len(2, batched)) + _int(3, len(arrays))
    out = _len(1, b"ArrayRecord") + _len(2, record)
    for name, value in metrics.items():
        out += _len(3, _len(1, name.encode()) + _double(2, float(value)))
    return out


def _topk(number: int, ids: np.ndarray, logprobs: np.ndarray) -> bytes:
    """A ``TopkLogprobs``: row-major ``[length, k]`` int32 ids and float32 logprobs."""
    length, k = np.shape(ids)
    body = (_len(1, np.asarray(ids, dtype=np.int32).tobytes()) + _len(2, np.asarray(logprobs, dtype=np.float32).tobytes())
            + _int(3, k) + _int(4, length))
    return _len(number, body)


def sample_response(answer: list[dict[str, Any]] | dict[str, Any]) -> bytes:
    """A ``SampleResponse``: per sequence its stop reason, int32 tokens, float32 logprobs and (with
    ``topk``) its top-k logprobs; then ``prompt_logprobs`` (float32, NaN where not scored) and
    ``topk_prompt_logprobs`` when present. ``answer`` is the sequences alone or a dict of the
    fields (``sequences``, ``prompt_logprobs``, ``topk_prompt_logprobs``)."""
    fields_ = answer if isinstance(answer, dict) else {"sequences": answer}
    out = b""
    for s in fields_["sequences"]:
        stop = STOP_REASON_LENGTH if s["stop_reason"] == "length" else STOP_REASON_STOP
        body = _int(1, stop) + _len(2, np.asarray(s["tokens"], dtype=np.int32).tobytes())
        if s.get("logprobs") is not None:
            body += _len(3, np.asarray(s["logprobs"], dtype=np.float32).tobytes())
        if s.get("topk") is not None:
            body += _topk(4, *s["topk"])
        out += _len(1, body)
    if fields_.get("prompt_logprobs") is not None:
        out += _len(2, np.asarray(fields_["prompt_logprobs"], dtype=np.float32).tobytes())
    if fields_.get("topk_prompt_logprobs") is not None:
        out += _topk(3, *fields_["topk_prompt_logprobs"])
    return out
