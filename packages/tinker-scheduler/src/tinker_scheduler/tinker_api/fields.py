"""Typed reads of JSON request fields: a value of the wrong type is an INVALID_ARGUMENT naming the
field (HTTP 400, ``category: user`` in a future's answer), never an ``AttributeError`` or
``TypeError`` deep in a route."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tinker_scheduler.errors import StatusError


def _bad(field: str, wanted: str, value: Any) -> StatusError:
    return StatusError("INVALID_ARGUMENT", f"{field}: must be {wanted} (got {type(value).__name__} {value!r:.40})")


def obj(body: Mapping[str, Any], field: str, where: str = "") -> Mapping[str, Any]:
    """``body[field]`` as a JSON object (``{}`` when absent or null)."""
    value = body.get(field)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _bad(where + field, "a JSON object", value)
    return value


def whole(value: Any, field: str, default: int = 0) -> int:
    """A whole number (``default`` for null); bools and fractions are refused."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or (isinstance(value, float) and not value.is_integer()):
        raise _bad(field, "a whole number", value)
    return int(value)


def number(value: Any, field: str, default: float = 0.0) -> float:
    """A finite number (``default`` for null)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(field, "a finite number", value)
    return float(value)


def text(value: Any, field: str, default: str = "") -> str:
    """A string (``default`` for null)."""
    if value is None:
        return default
    if not isinstance(value, str):
        raise _bad(field, "a string", value)
    return value
