"""Run directories the project creates, marked so that only those are ever removed.

:func:`make_run_dir` creates a run directory and, when it is new (or empty), writes the marker
file ``.opentinker-run`` into it. :func:`remove_run_dir` (``opentinker train --fresh``) removes
a directory only when it holds that marker, is not a symbolic link, and -- given ``within`` --
resolves inside that parent; anything else is a :class:`RunDirError` naming the directory and why.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tinker_core.errors import OpenTinkerError

RUN_MARKER = ".opentinker-run"
"""The file every run directory the project creates holds."""


class RunDirError(OpenTinkerError, ValueError):
    """A run directory that may not be used or removed (the message names it and why)."""


def make_run_dir(path: Path) -> Path:
    """Create the run directory ``path`` (and its parents); a new or empty one gets the marker."""
    new = not path.exists() or not any(path.iterdir())
    path.mkdir(parents=True, exist_ok=True)
    if new:
        (path / RUN_MARKER).write_text(json.dumps({"created_by": "opentinker"}) + "\n", encoding="utf-8")
    return path


def check_inside(path: Path, within: Path) -> Path:
    """``path`` resolved (symbolic links followed); a :class:`RunDirError` unless it lies strictly
    inside ``within`` (also resolved)."""
    real, root = path.resolve(), within.resolve()
    if real == root or root not in real.parents:
        raise RunDirError(f"run dir {path}: resolves to {real}, outside {within}/; pass --run-dir to choose a directory")
    return real


def remove_run_dir(path: Path, *, within: Path | None = None) -> bool:
    """Remove the run directory ``path`` if it exists; returns whether it did.

    Refuses (a :class:`RunDirError`) a symbolic link, something that is not a directory, a
    directory outside ``within``, the current directory or one of its parents, and a directory
    without the :data:`RUN_MARKER` file (one the project did not create).
    """
    if not os.path.lexists(path):
        return False
    if path.is_symlink():
        raise RunDirError(f"--fresh: {path} is a symbolic link; it removes only a run directory itself")
    if not path.is_dir():
        raise RunDirError(f"--fresh: {path} is not a directory")
    real = check_inside(path, within) if within is not None else path.resolve()
    cwd = Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        raise RunDirError(f"--fresh: {path} is the current directory or one of its parents; it is not removed")
    marker = path / RUN_MARKER
    if marker.is_symlink() or not marker.is_file():
        raise RunDirError(
            f"--fresh: {path} has no {RUN_MARKER} marker, so opentinker did not create it; it is not removed "
            "(remove it yourself, or pick another --run-dir)"
        )
    shutil.rmtree(real)
    return True
