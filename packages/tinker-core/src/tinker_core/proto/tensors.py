"""numpy arrays <-> the wire's :class:`Tensor` and :class:`TensorChunk` messages.

No pickles travel: a tensor is its dtype, shape and either a packed repeated field of numbers or
its raw little-endian bytes; a large tensor travels as a stream of byte chunks. numpy has no
bfloat16, so a ``DTYPE_BFLOAT16`` tensor decodes to float32 (exactly: bfloat16 is the top half
of a float32).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import numpy as np

from tinker_core.proto import common_pb2 as pb

DEFAULT_CHUNK_BYTES = 1 << 20

_NUMPY_OF: dict[pb.DType, np.dtype] = {
    pb.DTYPE_FLOAT32: np.dtype("<f4"),
    pb.DTYPE_FLOAT64: np.dtype("<f8"),
    pb.DTYPE_INT32: np.dtype("<i4"),
    pb.DTYPE_INT64: np.dtype("<i8"),
    pb.DTYPE_BOOL: np.dtype("?"),
    pb.DTYPE_UINT8: np.dtype("u1"),
    pb.DTYPE_FLOAT16: np.dtype("<f2"),
    pb.DTYPE_BFLOAT16: np.dtype("<u2"),  # raw bits; widened to float32 on decode
}
_DTYPE_OF: dict[str, pb.DType] = {
    "float32": pb.DTYPE_FLOAT32,
    "float64": pb.DTYPE_FLOAT64,
    "int32": pb.DTYPE_INT32,
    "int64": pb.DTYPE_INT64,
    "bool": pb.DTYPE_BOOL,
    "uint8": pb.DTYPE_UINT8,
    "float16": pb.DTYPE_FLOAT16,
}
# the packed repeated field that carries each dtype (the others travel as raw_data)
_FIELD_OF: dict[pb.DType, str] = {
    pb.DTYPE_FLOAT32: "float_data",
    pb.DTYPE_FLOAT64: "double_data",
    pb.DTYPE_INT32: "int32_data",
    pb.DTYPE_BOOL: "int32_data",
    pb.DTYPE_UINT8: "int32_data",
    pb.DTYPE_INT64: "int64_data",
}
_DATA_FIELDS = ("float_data", "double_data", "int32_data", "int64_data")


def wire_dtype(array: np.ndarray) -> pb.DType:
    """The ``DType`` enum value of a numpy array's dtype; ValueError for unsupported ones."""
    try:
        return _DTYPE_OF[np.dtype(array.dtype).name]
    except KeyError:
        raise ValueError(
            f"tensor dtype {array.dtype} cannot travel; convert it to one of "
            f"{', '.join(sorted(_DTYPE_OF))}"
        ) from None


def _numpy_dtype(dtype: pb.DType, where: str) -> np.dtype:
    try:
        return _NUMPY_OF[dtype]
    except KeyError:
        label = pb.DType.Name(dtype) if dtype in pb.DType.values() else str(dtype)
        raise ValueError(
            f"{where}: dtype {label} is not an element type; set dtype to one of "
            f"{', '.join(pb.DType.Name(d) for d in _NUMPY_OF)}"
        ) from None


def _decode_raw(data: bytes, dtype: pb.DType, shape: tuple[int, ...], where: str) -> np.ndarray:
    np_dtype = _numpy_dtype(dtype, where)
    expected = math.prod(shape) * np_dtype.itemsize
    if len(data) != expected:
        raise ValueError(
            f"{where}: raw data has {len(data)} bytes but shape {list(shape)} of "
            f"{pb.DType.Name(dtype)} needs {expected}"
        )
    array = np.frombuffer(data, dtype=np_dtype).reshape(shape)
    if dtype == pb.DTYPE_BFLOAT16:
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(np_dtype.newbyteorder("="), copy=True)


def to_tensor(array: np.ndarray | Iterable[float] | float, *, raw: bool = False) -> pb.Tensor:
    """Encode an array as a :class:`Tensor`: a packed repeated field, or raw bytes if ``raw``.

    float16 always travels as raw bytes (no repeated field holds it).
    """
    array = np.asarray(array)
    dtype = wire_dtype(array)
    tensor = pb.Tensor(dtype=dtype, shape=list(array.shape))
    field = _FIELD_OF.get(dtype)
    if raw or field is None:
        tensor.raw_data = np.ascontiguousarray(array, dtype=_NUMPY_OF[dtype]).tobytes()
    else:
        flat = array.reshape(-1)
        if dtype == pb.DTYPE_BOOL:
            flat = flat.astype(np.int32)  # 0 or 1 in int32_data
        getattr(tensor, field).extend(flat.tolist())
    return tensor


def from_tensor(tensor: pb.Tensor) -> np.ndarray:
    """Decode a :class:`Tensor`; ValueError when its fields disagree with its dtype or shape."""
    shape = tuple(int(d) for d in tensor.shape)
    np_dtype = _numpy_dtype(tensor.dtype, "Tensor")
    set_fields = [f for f in _DATA_FIELDS if len(getattr(tensor, f))]
    if tensor.raw_data:
        if set_fields:
            raise ValueError(f"Tensor: raw_data and {set_fields[0]} are both set; set exactly one")
        return _decode_raw(tensor.raw_data, tensor.dtype, shape, "Tensor")
    field = _FIELD_OF.get(tensor.dtype)
    wrong = [f for f in set_fields if f != field]
    if wrong:
        raise ValueError(
            f"Tensor: dtype {pb.DType.Name(tensor.dtype)} travels in "
            f"{field or 'raw_data'}, but {wrong[0]} is set"
        )
    values = getattr(tensor, field) if field else []
    if len(values) != math.prod(shape):
        raise ValueError(
            f"Tensor: {field or 'raw_data'} has {len(values)} values but shape {list(shape)} "
            f"holds {math.prod(shape)}"
        )
    return np.asarray(values, dtype=np_dtype.newbyteorder("=")).reshape(shape)


def iter_tensor_chunks(
    name: str, array: np.ndarray, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[pb.TensorChunk]:
    """Split one array into :class:`TensorChunk` messages of at most ``chunk_bytes`` bytes."""
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
    array = np.asarray(array)
    dtype = wire_dtype(array)
    data = np.ascontiguousarray(array, dtype=_NUMPY_OF[dtype]).tobytes()
    total = len(data)
    offset = 0
    while True:
        piece = data[offset : offset + chunk_bytes]
        chunk = pb.TensorChunk(name=name, total_bytes=total, offset=offset, data=piece)
        if offset == 0:
            chunk.dtype = dtype
            chunk.shape.extend(array.shape)
        yield chunk
        offset += len(piece)
        if offset >= total:
            return


def join_tensor_chunks(chunks: Iterable[pb.TensorChunk]) -> dict[str, np.ndarray]:
    """Reassemble a stream of chunks (one or more tensors, one after the other) by name.

    Raises ValueError on a gap, an out-of-order chunk, a tensor cut short or a repeated name.
    """
    out: dict[str, np.ndarray] = {}
    current: pb.TensorChunk | None = None  # the first chunk of the tensor being assembled
    parts: list[bytes] = []
    received = 0

    def finish() -> None:
        assert current is not None
        if current.name in out:
            raise ValueError(f"TensorChunk stream: tensor {current.name!r} arrives twice")
        where = f"TensorChunk stream, tensor {current.name!r}"
        out[current.name] = _decode_raw(b"".join(parts), current.dtype, tuple(current.shape), where)

    for chunk in chunks:
        if current is None:
            if chunk.offset != 0:
                raise ValueError(
                    f"TensorChunk stream: tensor {chunk.name!r} starts at offset {chunk.offset}; "
                    "the first chunk of a tensor has offset 0"
                )
            current, parts, received = chunk, [], 0
        elif chunk.name != current.name or chunk.offset != received:
            raise ValueError(
                f"TensorChunk stream: expected tensor {current.name!r} at offset {received}, got "
                f"{chunk.name!r} at offset {chunk.offset} (chunks lost or out of order)"
            )
        parts.append(chunk.data)
        received += len(chunk.data)
        if received > current.total_bytes:
            raise ValueError(
                f"TensorChunk stream: tensor {current.name!r} has more than its total_bytes "
                f"({current.total_bytes}) bytes"
            )
        if received == current.total_bytes:
            finish()
            current = None
    if current is not None:
        raise ValueError(
            f"TensorChunk stream ended inside tensor {current.name!r}: {received} of "
            f"{current.total_bytes} bytes received"
        )
    return out
