"""Moved in wave 4: the record models are in :mod:`tinker_core.episodes` (a record is an
:class:`~tinker_core.episodes.Episode`'s JSON form) and their readers in
:mod:`tinker_core.run_files` (one reader per run file). This path imports them with a
:class:`DeprecationWarning` and goes in the next release.
"""

from __future__ import annotations

import warnings

from tinker_core.episodes import VERSION, RolloutRecord, RolloutTurn
from tinker_core.run_files import ROLLOUTS_FILE, iter_rollouts, keep_until, read_rollouts

warnings.warn(
    "tinker_core.rollout_records moved: import RolloutRecord, RolloutTurn and VERSION from tinker_core.episodes, "
    "read_rollouts, iter_rollouts and keep_until from tinker_core.run_files (the old path goes in the next release)",
    DeprecationWarning, stacklevel=2,
)

__all__ = ["ROLLOUTS_FILE", "VERSION", "RolloutRecord", "RolloutTurn", "iter_rollouts", "keep_until", "read_rollouts"]
