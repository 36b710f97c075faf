"""Lazy package exports (PEP 562): names load from their submodules on first use.

Used by OpenTinker's packages so that ``import <package>`` stays cheap (no torch, no gymnasium
until a name that needs them is touched). The package lists its names once, as the imports of
an ``if TYPE_CHECKING:`` block, which type checkers read and :func:`lazy_package` reads too::

    if TYPE_CHECKING:
        from tinker_algos.training.trainer import Trainer as Trainer

    __getattr__, __dir__, __all__ = lazy_package(__name__, "__version__")

(``X as X`` marks a re-export for ``mypy --strict``.)
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["lazy_package"]


def _lazy_exports(
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


def _type_checking_imports(package: str) -> dict[str, str]:
    """Name -> module of every ``from module import name`` in the top-level
    ``if TYPE_CHECKING:`` blocks of ``package``'s source (relative imports resolved)."""
    path = sys.modules[package].__file__
    try:
        text = Path(path or "").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ImportError(f"lazy_package: cannot read the source of {package!r} ({path})") from e
    imports: dict[str, str] = {}
    for node in ast.parse(text).body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for stmt in node.body:
            if not isinstance(stmt, ast.ImportFrom):
                continue
            module = importlib.util.resolve_name("." * stmt.level + (stmt.module or ""), package)
            for alias in stmt.names:
                if alias.asname not in (None, alias.name):
                    raise ValueError(f"{package}: lazy names cannot be renamed ({alias.name} as {alias.asname})")
                imports[alias.name] = module
    return imports


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def lazy_package(
    package: str, *eager: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for ``package``: the names its ``if
    TYPE_CHECKING:`` block imports load on first use; ``eager`` names the module defines
    itself (``"__version__"``) are public too."""
    exports = _type_checking_imports(package)
    public = [*sorted(exports), *eager]
    return (*_lazy_exports(package, exports, public), public)
