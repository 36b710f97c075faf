"""Shared pieces of the conformance kit: the error type, reporting and small validators.

Nothing here imports torch.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

if TYPE_CHECKING:
    from tinker_core.plugin_entries import Entry

__all__ = [
    "ConformanceError",
    "ConformanceWarning",
    "TorchNotInstalledError",
]


class ConformanceError(AssertionError):
    """A plugin broke the OpenTinker contract.

    The message names the plugin, the check that failed, what was observed and what to fix::

        env 'mine/task-v0' failed conformance check 'determinism': two fresh envs reset with
        seed 0 gave different observations: 'Say: apple' vs 'Say: river'
          fix: call super().reset(seed=seed) first in reset() and draw all randomness from
          self.np_random

    Attributes:
        problem: what was observed.
        plugin: which plugin (``"env 'echo/echo-v0'"``, ``"loss 'ppo'"``...); may be empty.
        check: the name of the failed check (``"determinism"``, ``"mask-gradient"``...).
        fix: what the plugin author should do about it; may be empty.
    """

    def __init__(self, problem: str, *, plugin: str = "", check: str = "", fix: str = "") -> None:
        self.problem = problem
        self.plugin = plugin
        self.check = check
        self.fix = fix
        super().__init__(self.message)

    @property
    def message(self) -> str:
        head = self.plugin or "plugin"
        msg = f"{head} failed conformance check {self.check!r}: " if self.check else f"{head}: "
        msg += self.problem
        if self.fix:
            msg += f"\n  fix: {self.fix}"
        return msg

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:  # keep the fields through pickling (xdist, Ray)
        rebuild = functools.partial(type(self), plugin=self.plugin, check=self.check, fix=self.fix)
        return (rebuild, (self.problem,))


class TorchNotInstalledError(ConformanceError, ImportError):
    """``check_loss`` / ``check_optimizer`` need torch, which is not installed.

    It is both a :class:`ConformanceError` and an :class:`ImportError`, so
    ``except ImportError`` (and test-suite skip logic built on it) works.
    """


class ConformanceWarning(UserWarning):
    """Something the kit could not verify (e.g. ``max_turns`` beyond ``max_steps``)."""


class Reporter:
    """Raises :class:`ConformanceError` for one plugin; wraps exceptions from plugin code."""

    def __init__(self, plugin: str) -> None:
        self.plugin = plugin

    def fail(self, check: str, problem: str, fix: str = "", *, cause: BaseException | None = None) -> NoReturn:
        err = ConformanceError(problem, plugin=self.plugin, check=check, fix=fix)
        if cause is not None:
            raise err from cause
        raise err

    def warn(self, check: str, problem: str) -> None:
        warnings.warn(f"{self.plugin}, check {check!r}: {problem}", ConformanceWarning, stacklevel=3)

    @contextmanager
    def guard(self, check: str, doing: str, fix: str = "") -> Iterator[None]:
        """Turn an exception raised by plugin code into a ConformanceError naming ``check``."""
        try:
            yield
        except ConformanceError:
            raise
        except Exception as e:
            self.fail(check, f"{doing} raised {type(e).__name__}: {e}", fix, cause=e)


def short(value: object, limit: int = 80) -> str:
    """A repr of ``value`` cut to ``limit`` characters, for messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def callable_name(obj: object) -> str:
    """``module.qualname`` of a function or class, else its type's."""
    target = obj if hasattr(obj, "__qualname__") else type(obj)
    module = getattr(target, "__module__", None) or "?"
    return f"{module}.{getattr(target, '__qualname__', repr(target))}"


def is_real_number(value: object) -> bool:
    """An int/float or numpy scalar, not a bool and not an array or tensor."""
    if isinstance(value, bool | np.bool_):
        return False
    return isinstance(value, numbers.Real | np.integer | np.floating)


def is_bool(value: object) -> bool:
    return isinstance(value, bool | np.bool_)


def check_metrics(rep: Reporter, metrics: object, case: str, convert: str) -> None:
    """``output``: the metrics a plugin returned are a dict of str -> finite float; ``convert``
    says how to make one (``"float(x)"``)."""
    if not isinstance(metrics, dict):
        rep.fail("output", f"on {case}: metrics is {type(metrics).__name__}, not a dict",
                 "return metrics as dict[str, float]")
    for key, value in metrics.items():
        if not isinstance(key, str) or not is_real_number(value) or not math.isfinite(float(value)):
            rep.fail("output", f"on {case}: metrics[{short(key)}] is {type(value).__name__} {short(value)}",
                     f"metrics are str -> finite float: use {convert}")


def json_problem(value: object, where: str) -> str | None:
    """None when ``value`` is standard JSON (no NaN/inf); else which part is not and why."""
    try:
        json.dumps(value, allow_nan=False)
        return None
    except (TypeError, ValueError) as e:
        detail = _find_non_json(value, where)
        return detail or f"{where} is not JSON-serialisable: {e}"


def _find_non_json(value: object, where: str) -> str | None:
    if value is None or isinstance(value, bool | str | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where} is {value!r}, which standard JSON cannot hold"
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = _find_non_json(item, f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str | int | float | bool) and key is not None:
                return f"{where} has a key {short(key)} of type {type(key).__name__}; JSON keys are strings"
            found = _find_non_json(item, f"{where}[{key!r}]")
            if found:
                return found
        return None
    hint = " (convert numpy values with .item() or .tolist())" if type(value).__module__ == "numpy" else ""
    return f"{where} holds a {type(value).__module__}.{type(value).__qualname__} ({short(value, 40)}), which is not JSON{hint}"


_LABELS = {"advantage_estimators": "advantage estimator", "losses": "loss", "optimizers": "optimizer"}


def resolve_callable(target: object, kind: str) -> tuple[Callable[..., Any], str, Entry[Any] | None]:
    """A name in the ``kind`` registry (``advantage_estimators``, ``losses``, ``optimizers``) or a
    callable -> (callable, plugin label, its registry entry: None for a callable)."""
    label = _LABELS[kind]
    if isinstance(target, str):
        from tinker_core.registry import get_registry

        try:
            entry = get_registry(kind).get(target)
        except KeyError as e:  # UnknownNameError is a KeyError with a did-you-mean message
            raise ConformanceError(
                str(e), plugin=f"{label} {target!r}", check="registered",
                fix=f"install the plugin that registers it, or pass the {label} callable itself",
            ) from e
        return entry.obj, f"{label} {target!r} (distribution {entry.distribution})", entry
    if not callable(target):
        raise ConformanceError(
            f"expected a registered {label} name or a callable, got {type(target).__name__}",
            plugin=f"{label} {short(target, 40)}", check="callable",
            fix=f"pass the name the {label} was registered under, or the function itself",
        )
    return target, f"{label} {callable_name(target)}", None
