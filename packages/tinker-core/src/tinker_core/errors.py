"""Exceptions raised by tinker-core.

Every error says what was wrong, where, and what to do about it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class OpenTinkerError(Exception):
    """Base class of every error OpenTinker raises on purpose."""


class PluginError(OpenTinkerError):
    """A plugin could not be loaded or registered something invalid."""


class DuplicateNameError(PluginError):
    """Two plugins registered the same name for the same kind."""


class UnknownNameError(OpenTinkerError, KeyError):
    """A name (env id, estimator, loss, optimizer) that no plugin registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.known = sorted(known)
        super().__init__(self.message)

    @property
    def message(self) -> str:
        msg = f"unknown {self.kind} {self.name!r}"
        close = did_you_mean(self.name, self.known)
        if close:
            msg += f"; did you mean {close!r}?"
        elif self.known:
            shown = ", ".join(self.known[:12]) + (", ..." if len(self.known) > 12 else "")
            msg += f"; registered: {shown}"
        else:
            msg += "; no plugin registers any (is the plugin package installed?)"
        return msg

    def __str__(self) -> str:  # KeyError would quote the whole message otherwise
        return self.message


class FSMError(OpenTinkerError):
    """An illegal transition of the turn state machine."""


class PreconditionError(OpenTinkerError, RuntimeError):
    """A valid request that the current state cannot serve (e.g. a model whose weights diverged
    to NaN); a server answers FAILED_PRECONDITION."""


class ConfigError(OpenTinkerError, ValueError):
    """A job configuration that failed validation; ``problems`` lists each one."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"{len(problems)} problem(s){where}:"] + [f"  - {p}" for p in problems]
        super().__init__("\n".join(lines))

    def report_lines(self, file: object) -> list[str]:
        """How the CLI reports it: ``'FILE: N problem(s)'``, then ``'  - problem'`` per problem."""
        return [f"{file}: {len(self.problems)} problem(s)"] + [f"  - {p}" for p in self.problems]


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """The closest known name to ``name``, or None when nothing is close."""
    known = list(known)
    matches = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if matches:
        return matches[0]
    # env ids: compare the part after the namespace too
    tail = {k.split("/")[-1]: k for k in known}
    matches = difflib.get_close_matches(name.split("/")[-1], list(tail), n=1, cutoff=0.6)
    return tail[matches[0]] if matches else None
