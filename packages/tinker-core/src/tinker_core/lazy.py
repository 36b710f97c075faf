"""Lazy package exports (PEP 562): names load from their submodules on first use.

Used by OpenTinker's packages so that ``import <package>`` stays cheap (no torch, no gymnasium
until a name that needs them is touched)::

    _EXPORTS = {"Trainer": "tinker_algos.trainer", ...}
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], public: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``exports`` maps a name to its module."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # cache: the next access skips this
        return value

    def __dir__() -> list[str]:
        return list(public)

    return __getattr__, __dir__
