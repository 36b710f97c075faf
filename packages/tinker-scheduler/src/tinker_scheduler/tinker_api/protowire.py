"""The protobuf messages of Tinker's HTTP API that the SDK sends or expects as binary protobuf.

The SDK posts ``forward_backward`` as an ``application/x-protobuf`` ``ForwardBackwardRequest`` and
reads ``ForwardBackwardOutput`` and ``SampleResponse`` results only as protobuf. Those few
messages are read and written here straight from the protobuf wire format (varints and
length-delimited fields), with the field numbers of Tinker's public schema, so the scheduler needs
neither the SDK nor generated code. Only the fields the gateway serves are read; others are
skipped. A malformed body raises :class:`ValueError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

#: Tinker's ``DType`` enum -> numpy dtype.
DTYPES = {1: np.dtype(np.float32), 2: np.dtype(np.int64), 3: np.dtype(np.int32)}
#: ``StopReason`` enum values.
STOP_REASON_STOP, STOP_REASON_LENGTH = 0, 1


# ---- reading ---------------------------------------------------------------------------------
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


def fields(buf: bytes) -> Iterator[tuple[int, Any]]:
    """``(field number, value)`` of a message: ints for varints and fixed fields (doubles as raw
    8 bytes), bytes for length-delimited fields."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, i = _varint(buf, i)
        elif kind == 1:
            value, i = buf[i:i + 8], i + 8
        elif kind == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ValueError("truncated protobuf field")
            value, i = buf[i:i + n], i + n
        elif kind == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {kind}")
        yield number, value


def _text(value: bytes) -> str:
    return bytes(value).decode("utf-8")


def _tensor(buf: bytes, name: str) -> np.ndarray:
    dense, dtype, shape = b"", 0, []
    for number, value in fields(buf):
        if number == 1:
            dense = value
        elif number == 2:
            raise ValueError(f"loss_fn_inputs.{name}: sparse tensors are not supported yet; send it dense")
        elif number == 3:
            dtype = value
        elif number == 4:
            shape.extend(_packed_varints(value) if isinstance(value, bytes) else [value])
    if dtype not in DTYPES:
        raise ValueError(f"loss_fn_inputs.{name}: unsupported dtype {dtype}")
    return np.frombuffer(dense, dtype=DTYPES[dtype]).copy()


def _packed_varints(buf: bytes) -> list[int]:
    out, i = [], 0
    while i < len(buf):
        v, i = _varint(buf, i)
        out.append(v)
    return out


def _map_entry(buf: bytes) -> tuple[str, Any]:
    key, value = "", None
    for number, v in fields(buf):
        if number == 1:
            key = _text(v)
        elif number == 2:
            value = v
    return key, value


def _datum(buf: bytes, i: int) -> dict[str, Any]:
    tokens: list[int] = []
    inputs: dict[str, np.ndarray] = {}
    for number, value in fields(buf):
        if number == 1:  # Chunk
            for kind, chunk in fields(value):
                if kind != 1:
                    raise ValueError(f"data[{i}].model_input: only encoded_text chunks are supported (no images or audio)")
                for n, toks in fields(chunk):
                    if n == 1:
                        tokens.extend(np.frombuffer(toks, dtype=np.int32).tolist())
        elif number == 2:
            name, tensor = _map_entry(value)
            inputs[name] = _tensor(tensor or b"", name)
    return {"tokens": tokens, "loss_fn_inputs": inputs}


def read_forward_backward(buf: bytes) -> dict[str, Any]:
    """A ``ForwardBackwardRequest``: model_id, seq_id, data (tokens and loss_fn_inputs arrays per
    datum), loss_fn, loss_fn_config (numbers) and forward_only."""
    out: dict[str, Any] = {"model_id": "", "seq_id": 0, "data": [], "loss_fn": "", "loss_fn_config": {},
                           "forward_only": False}
    v2: dict[str, float] = {}
    for number, value in fields(buf):
        if number == 1:
            out["model_id"] = _text(value)
        elif number == 2:
            out["seq_id"] = value
        elif number == 3:
            out["data"].append(_datum(value, len(out["data"])))
        elif number == 4:
            out["loss_fn"] = _text(value)
        elif number == 5:
            key, raw = _map_entry(value)
            out["loss_fn_config"][key] = struct.unpack("<d", raw)[0] if raw else 0.0
        elif number == 6:
            out["forward_only"] = bool(value)
        elif number == 7:
            key, raw = _map_entry(value)
            for n, v in fields(raw or b""):
                if n == 1:
                    v2[key] = struct.unpack("<d", v)[0]
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
