"""The built-in losses, advantage estimators and optimizers (registered as plugins, like anyone's).

Losses and optimizers need torch, so :mod:`tinker_algos.plugin` registers them as :class:`Deferred`
callables that import their module on first use (the trainer resolves a loss once, at its first
``forward_backward``).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any


class Deferred:
    """A callable that imports ``module.attr`` on first use and forwards every call to it.

    ``inspect.signature`` sees the real signature (resolved on demand); instances pickle as
    ``(module, attr)``.
    """

    def __init__(self, module: str, attr: str, doc: str) -> None:
        self.target_module = module
        self.target_attr = attr
        self.__name__ = attr
        self.__qualname__ = attr
        self.__doc__ = doc

    def resolve(self) -> Any:
        """The real callable."""
        return getattr(importlib.import_module(self.target_module), self.target_attr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.resolve())

    def __repr__(self) -> str:
        return f"<deferred {self.target_module}.{self.target_attr}>"
