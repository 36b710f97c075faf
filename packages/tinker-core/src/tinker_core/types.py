"""Deprecated: :class:`Trajectory` and :class:`Batch` live in :mod:`tinker_core.contracts`.

Import them from ``tinker_core`` (``from tinker_core import Batch, Trajectory``); this module
re-exports them until the next minor release.
"""

from __future__ import annotations

from tinker_core.contracts import Batch, Trajectory, TrajectoryGroup

__all__ = ["Batch", "Trajectory", "TrajectoryGroup"]
