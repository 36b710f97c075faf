"""Which code a job may import: :class:`ImportPolicy` (a scheduler's ``allowed_imports``).

A job config names code in a few env arguments: ``agent/program-v0``'s ``entry``, ``tasks`` and
``reward`` (``"module:attr"``), ``openenv/env-v0``'s ``environment`` and ``action``,
``verifiers/env-v0``'s ``environment`` (a module). Each env declares them in its registered spec
(:attr:`tinker_core.env.EnvSpec.import_kwargs`). ``opentinker train`` on the user's own machine
imports them as they are. A scheduler would import and run them on its hosts, as its user, for
any tenant, so a scheduler allows only what its operator lists (``--allow-import PATTERN``,
repeatable; ``SchedulerConfig.allowed_imports``):

- ``pkg.module:name``: that object;
- ``pkg.module`` or ``pkg.module:*``: any object of that module;
- ``pkg.*`` (or ``pkg.*:name``): ``pkg`` and every module under it;
- ``*``: anything (every caller may run code as the scheduler's user).

Registered env plugins need no pattern: the operator installed them. Two checks use the policy.
The scheduler's Submit refuses a job that names anything else (:func:`refused_import`), before
anything is imported; and where a job runs, the worker enforces the scheduler's policy on its
process (:func:`enforced`), so that the loaders (:func:`check_import`, called by
``tinker_algos``' ``load_ref`` and the env adapters) refuse a ref that got past Submit (a job
stored before the check existed). While a policy is enforced, no folder is put on ``sys.path``
for an env's code (:func:`import_folders`: its ``path`` argument, the working directory): allowed
code comes from the installed packages, not from files a tenant could place.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tinker_core.errors import ConfigError

if TYPE_CHECKING:
    from tinker_core.config import JobConfig

__all__ = [
    "ALLOW_ALL",
    "SETTING",
    "ImportPolicy",
    "ImportRef",
    "ImportRefused",
    "active_patterns",
    "check_import",
    "enforced",
    "import_folders",
    "import_refs",
    "policy_enforced",
    "refused_import",
]

ALLOW_ALL = "*"
"""The pattern that allows every import (a scheduler whose callers may all run code as its user)."""
SETTING = "--allow-import (SchedulerConfig.allowed_imports)"
"""How a refusal names the scheduler setting that would allow the code."""

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_MODULE = rf"{_IDENT}(?:\.{_IDENT})*"
_REF_RE = re.compile(rf"(?P<module>{_MODULE})(?::(?P<attr>{_IDENT}))?")
_PATTERN_RE = re.compile(rf"(?P<module>{_MODULE})(?P<tree>\.\*)?(?::(?P<attr>{_IDENT}|\*))?")


class ImportRefused(ConfigError):
    """Code a config names that the enforced :class:`ImportPolicy` does not allow: one problem,
    naming the config field and the setting that would allow it, which is also its text (a
    failed job's reason reads as one line)."""

    def __str__(self) -> str:
        return "; ".join(self.problems)


@dataclass(frozen=True)
class _Pattern:
    module: str
    tree: bool  # ``pkg.*``: the module and every module under it
    attr: str  # a name, or ``*``

    def allows(self, module: str, attr: str | None) -> bool:
        if module != self.module and not (self.tree and module.startswith(self.module + ".")):
            return False
        return self.attr == "*" or self.attr == attr  # a bare module (attr None): any of its names


def _parse_pattern(text: str) -> _Pattern | None:
    m = _PATTERN_RE.fullmatch(text)
    if m is None:
        return None
    return _Pattern(m["module"], bool(m["tree"]), m["attr"] or "*")


@dataclass(frozen=True)
class ImportPolicy:
    """The code a scheduler's jobs may import: its operator's ``patterns`` (the module docstring).

    No patterns: none (only registered plugins run). A malformed pattern is a ValueError naming it.
    """

    patterns: tuple[str, ...] = ()
    _parsed: tuple[_Pattern, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        patterns = (self.patterns,) if isinstance(self.patterns, str) else tuple(self.patterns)
        object.__setattr__(self, "patterns", patterns)
        for p in patterns:
            if not isinstance(p, str) or (p != ALLOW_ALL and _parse_pattern(p) is None):
                raise ValueError(f"allowed_imports: {p!r} is not a pattern; use 'pkg.module:name', 'pkg.module' "
                                 "(any name in it), 'pkg.*' (the package and its modules) or '*' (anything)")
        object.__setattr__(self, "_parsed", tuple(p for p in map(_parse_pattern, patterns) if p is not None))

    @property
    def allows_all(self) -> bool:
        """Whether the operator allowed every import (``*``)."""
        return ALLOW_ALL in self.patterns

    def allows(self, ref: str) -> bool:
        """Whether ``ref`` is code this policy allows: ``"module:attr"``, or a module name (then any
        of its names may be used, so it needs a pattern that allows them all)."""
        if self.allows_all:
            return True
        m = _REF_RE.fullmatch(ref) if isinstance(ref, str) else None
        if m is None:
            return False
        return any(p.allows(m["module"], m["attr"]) for p in self._parsed)

    def refusal(self, ref: Any, field: str) -> str:
        """The one-line refusal of ``ref`` named by config field ``field``."""
        allowed = ", ".join(repr(p) for p in self.patterns) or "none"
        return (f"{field}: {ref!r} is not code this scheduler lets jobs import (it would run on its hosts); it runs "
                f"its registered env plugins and what its operator allows with {SETTING}, now: {allowed}; run your "
                "own code on your own machine ('opentinker train' without --scheduler)")

    def check(self, ref: Any, field: str) -> None:
        """Raise :class:`ImportRefused` unless ``ref`` is allowed."""
        if not self.allows(ref):
            raise ImportRefused([self.refusal(ref, field)])

    def folder_refusal(self, folder: Any, field: str) -> str:
        """The one-line refusal of a folder an env would put on ``sys.path``."""
        return (f"{field}: {folder!r}: on a scheduler an env's code is imported from the installed packages only, not "
                f"from a folder on sys.path; drop {field.rsplit('.', 1)[-1]}, and have the operator install the "
                f"package and allow it with {SETTING}")


# ---- where a job runs: the process-wide policy ---------------------------------------------------

_active: list[ImportPolicy] = []
_lock = threading.Lock()


@contextlib.contextmanager
def enforced(policy: ImportPolicy) -> Iterator[None]:
    """Enforce ``policy`` on this process while the block runs (a scheduler's worker runs its
    job inside it). Policies nest and overlap (several jobs share a model host's process): a ref
    must pass every enforced one."""
    with _lock:
        _active.append(policy)
    try:
        yield
    finally:
        with _lock:
            _active.remove(policy)


def policy_enforced() -> bool:
    """Whether a scheduler's policy is enforced on this process now: it runs a scheduler's job
    (the worker enforces one for every job, :func:`enforced`)."""
    with _lock:
        return bool(_active)


def active_patterns() -> list[tuple[str, ...]]:
    """The patterns of each policy enforced now ([] when none): what a child process re-enforces."""
    with _lock:
        return [p.patterns for p in _active]


def check_import(ref: Any, field: str) -> None:
    """Refuse ``ref`` (``"module:attr"`` or a module), named by config field ``field``, unless
    every enforced policy allows it (nothing is enforced outside a scheduler's jobs). Call it
    before importing code that a config names."""
    with _lock:
        policies = list(_active)
    for policy in policies:
        policy.check(ref, field)


def import_folders(path: str | None, field: str = "env.kwargs.path") -> list[str]:
    """The folders to put on ``sys.path`` before importing an env's code: ``path`` (when given)
    and the working directory; none while a policy that does not allow everything is enforced,
    which refuses a given ``path`` (:class:`ImportRefused` naming ``field``)."""
    with _lock:
        strict = [p for p in _active if not p.allows_all]
    if strict:
        if path:
            raise ImportRefused([strict[0].folder_refusal(path, field)])
        return []
    return [folder for folder in (path, os.getcwd()) if folder]


# ---- at Submit: the code a job config names ----------------------------------------------------


@dataclass(frozen=True)
class ImportRef:
    """Code a job config names: the config ``field`` and its ``value``, a ref (``"module:attr"``
    or a module) or, with ``folder``, a folder the env puts on ``sys.path`` before importing."""

    field: str
    value: Any
    folder: bool = False


def import_refs(config: JobConfig) -> Iterator[ImportRef]:
    """Every import a job config names: the string values of the kwargs each env's registered
    spec declares (:attr:`~tinker_core.env.EnvSpec.import_kwargs`; a value of another type, such
    as a list of tasks, is data) and such an env's ``path`` (a folder), in ``kwargs`` and
    ``eval_kwargs``, of the job's env and of each stage's. Envs served from an ``address`` run
    elsewhere and env ids no plugin registers run nowhere: both are skipped."""
    from tinker_core.registry import env_spec, get_registry

    envs = [("env", config.env)] + [(f"stages[{i}].env", s.env) for i, s in enumerate(config.stages)]
    for where, env in envs:
        if env is None or env.address or env.id not in get_registry("envs"):
            continue
        declared = env_spec(env.id).import_kwargs
        if not declared:
            continue
        for part, kwargs in (("kwargs", env.kwargs), ("eval_kwargs", env.eval_kwargs or {})):
            for name in declared:
                if isinstance(kwargs.get(name), str):
                    yield ImportRef(f"{where}.{part}.{name}", kwargs[name])
            if kwargs.get("path") is not None:
                yield ImportRef(f"{where}.{part}.path", kwargs["path"], folder=True)


def refused_import(config: JobConfig, policy: ImportPolicy) -> str | None:
    """The refusal of the first import of ``config`` that ``policy`` does not allow, else None."""
    for ref in import_refs(config):
        if ref.folder:
            if not policy.allows_all:
                return policy.folder_refusal(ref.value, ref.field)
        elif not policy.allows(ref.value):
            return policy.refusal(ref.value, ref.field)
    return None
