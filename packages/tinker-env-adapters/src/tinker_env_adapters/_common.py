"""What every adapter shares: finding an ecosystem package, and the error when one is missing."""

from __future__ import annotations

import importlib
import importlib.util
import json
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from tinker_core import EnvSpec, OpenTinkerError


class AdapterError(OpenTinkerError, ValueError):
    """An env of another ecosystem cannot be built or mapped: the message names the env id,
    the piece that is missing or does not map, and what to do."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it (plugin discovery stays cheap)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, env_id: str, extra: str) -> ModuleType:
    """Import ``module`` for ``env_id``, or raise :class:`AdapterError` with the install line."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise AdapterError(
            f"env {env_id!r} needs the Python package {module!r}, which cannot be imported ({e}); "
            f"install it with: pip install 'tinker-env-adapters[{extra}]'"
        ) from e


def adapter_spec(
    env_id: str, ecosystem: str, description: str, *, about: Mapping[str, str] | None = None,
    kwargs: Mapping[str, str] | None = None, **fields: Any,
) -> EnvSpec:
    """The spec of an env another ecosystem provides. Its ``metadata`` says so the same way for
    every adapter: ``ecosystem``, more about it (``about``: what of the ecosystem the env wraps,
    ``{"task": "countdown"}``, or its install extra) and, under ``kwargs``, each kwarg the env
    takes with what it means; ``fields`` are the spec's others (``max_turns``, ``action_format``...)."""
    metadata: dict[str, Any] = {"ecosystem": ecosystem, **(about or {})}
    if kwargs:
        metadata["kwargs"] = dict(kwargs)
    return EnvSpec(id=env_id, description=description, metadata=metadata, **fields)


def ecosystem_name(name: str) -> str:
    """An ecosystem's env name as an OpenTinker id part: ``Othello-v0-small`` -> ``Othello-small``."""
    base, sep, variant = name.partition("-v0")
    return base + variant if sep else name


def json_dict(data: Any) -> dict[str, Any]:
    """The JSON-serialisable items of a mapping (keys as strings; others dropped): an ecosystem's
    metadata as an OpenTinker ``info`` dict."""
    out: dict[str, Any] = {}
    for key, value in dict(data or {}).items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            continue
        out[str(key)] = value
    return out
