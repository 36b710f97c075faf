"""What travels in ``EnvService`` messages: JSON fields and observations, both ways.

``info`` dicts, reset options and env kwargs travel as JSON text (numpy values become Python
numbers, sets sorted lists); observations as the ``Observation`` message (text or chat).
This module needs protobuf, not grpc.
"""

from __future__ import annotations

import json
from typing import Any

from tinker_core.contracts import Observation
from tinker_core.proto import env_pb2 as pb

#: The deepest nesting of arrays and objects a ``*_json`` request field may have.
MAX_JSON_DEPTH = 64
_TOO_DEEP = object()


def _deeper_than(value: object, depth: int) -> bool:
    """Whether ``value`` nests lists and dicts more than ``depth`` levels (checked level by level)."""
    level = [value]
    for _ in range(depth):
        level = [v for x in level if isinstance(x, dict | list) for v in (x.values() if isinstance(x, dict) else x)]
        if not level:
            return False
    return any(isinstance(x, dict | list) for x in level)


def _json_default(value: object) -> object:
    """Make numpy values (and sets) JSON-serialisable; anything else is an error."""
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy scalar or array
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def to_json(value: object) -> str:
    """``value`` as JSON text; numpy values and sets are converted, anything else raises TypeError."""
    return json.dumps(value, default=_json_default)


def optional_json(value: object) -> str:
    """A ``*_json`` field for an optional value: ``""`` for None, else :func:`to_json`."""
    return "" if value is None else to_json(value)


def json_object(text: str, field_name: str) -> dict[str, Any] | None:
    """Parse a ``*_json`` field that holds a JSON object (``""`` means None).

    Raises ValueError naming ``field_name`` when the text is not JSON or not an object.
    """
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{field_name} is not valid JSON: {e}") from e
    except RecursionError:
        value = _TOO_DEEP
    if value is _TOO_DEEP or _deeper_than(value, MAX_JSON_DEPTH):
        raise ValueError(f"{field_name} nests arrays or objects more than {MAX_JSON_DEPTH} levels deep")
    if not isinstance(value, dict):
        raise ValueError(f"{field_name} must be a JSON object, got a JSON {type(value).__name__}")
    return value


def info_from_json(text: str) -> dict[str, Any]:
    """An ``info_json`` field back to the info dict (``""`` is ``{}``)."""
    info: dict[str, Any] = json.loads(text) if text else {}
    return info


_OPTIONAL_MESSAGE_KEYS = ("name", "tool_call_id")
"""Chat-message keys besides role and content that travel (a tool message's, when they are str)."""


def observation_to_proto(observation: Observation) -> pb.Observation:
    """Encode a text or chat observation; TypeError for anything else."""
    if isinstance(observation, str):
        return pb.Observation(text=observation)
    if isinstance(observation, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in observation
    ):
        messages = [
            pb.ChatMessage(role=m["role"], content=m["content"], **{k: m[k] for k in _OPTIONAL_MESSAGE_KEYS if isinstance(m.get(k), str)})
            for m in observation
        ]
        return pb.Observation(chat=pb.ChatMessages(messages=messages))
    raise TypeError(
        f"an observation is a str or a list of {{'role': str, 'content': str}} messages, "
        f"got {type(observation).__name__}"
    )


def observation_from_proto(message: pb.Observation) -> Observation:
    """Decode an ``Observation`` message: a str, or a list of ``{"role", "content"}`` dicts (with
    ``name`` and ``tool_call_id`` when set)."""
    if message.WhichOneof("value") == "chat":
        return [
            {"role": m.role, "content": m.content, **{k: getattr(m, k) for k in _OPTIONAL_MESSAGE_KEYS if getattr(m, k)}}
            for m in message.chat.messages
        ]
    return message.text
