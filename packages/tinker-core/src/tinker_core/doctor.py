"""What one check of ``opentinker doctor`` found: :class:`Finding`.

Plugins add checks through :func:`tinker_core.hookspecs.opentinker_register_doctor_checks`;
``check()`` returns an iterable of findings, each one line. A problem always names its fix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Severity = Literal["ok", "warning", "error"]


@dataclass(frozen=True)
class Finding:
    """One line of ``opentinker doctor``.

    :param check: what was checked (``torch``, ``plugins``, ``port 50051``).
    :param detail: what was found, one line.
    :param severity: ``ok``; ``warning`` (works, but something is missing or slow; doctor still
        exits 0 unless ``--strict``); ``error`` (something will fail; doctor exits 1).
    :param fix: for a warning or an error, the one thing to do about it (a command where there
        is one).
    """

    check: str
    detail: str
    severity: Severity = "ok"
    fix: str | None = None

    def __post_init__(self) -> None:
        if self.severity not in ("ok", "warning", "error"):
            raise ValueError(f"Finding.severity must be 'ok', 'warning' or 'error', not {self.severity!r}")
        if self.severity != "ok" and not self.fix:
            raise ValueError(f"Finding {self.check!r}: a {self.severity} must name its fix")

    @property
    def problem(self) -> bool:
        return self.severity != "ok"

    def line(self) -> str:
        """``ok: torch: 2.9.0, cpu`` or ``error: torch: cannot be imported; fix: pip install ...``."""
        text = f"{self.severity}: {self.check}: {self.detail}"
        return f"{text}; fix: {self.fix}" if self.fix else text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
