"""Where model files live on disk: the cache directory, atomic directory writes, a file lock.

* :func:`cache_root`: ``$OPENTINKER_CACHE`` or ``~/.cache/opentinker`` (the tiny preset and the
  registry presets are built there once, then reused offline).
* :func:`atomic_dir`: readers never see a half-written directory (models, checkpoints, imports);
  :func:`clean_atomic_leftovers` removes what a process killed mid-write left behind.
* :func:`share_readable`: the ordinary modes (files 0644, folders 0755) for a directory others
  load or serve (some writers leave a weights file at 0600).
* :func:`file_lock`: one process at a time builds a cached model; the others wait, then reuse it.
* :class:`ModelLoadError`: a model or tokenizer that cannot be used, said in one line.

The lowest layer of :mod:`tinker_algos.hub` and of :mod:`tinker_algos.model.model_files` (which
re-exports these names): it imports nothing else of tinker-algos.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from tinker_core.errors import OpenTinkerError

CACHE_ENV = "OPENTINKER_CACHE"


class ModelLoadError(OpenTinkerError, ValueError):
    """A model or tokenizer that cannot be used (missing, or they do not fit together)."""


def cache_root() -> Path:
    """``$OPENTINKER_CACHE`` or ``~/.cache/opentinker``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "opentinker"


def atomic_dir(final: Path, write: Callable[[Path], object], *, overwrite: bool) -> Path:
    """Run ``write(tmp_dir)`` then rename the temp dir (same parent) to ``final``.

    When ``write`` fails, the temp dir is removed and ``final`` is left as it was.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} already exists; pass overwrite=True or choose another path")
    tmp = final.parent / f".{final.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        write(tmp)
        old = None
        if final.exists():
            old = final.parent / f".{final.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(final, old)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


FILE_MODE, DIR_MODE = 0o644, 0o755
"""The modes :func:`share_readable` gives: what ``umask 022`` gives a plain write."""


def share_readable(root: Path) -> None:
    """Give every file under ``root`` mode :data:`FILE_MODE` and every folder (``root`` too)
    :data:`DIR_MODE`: an exported or imported model is read by other users and servers, and
    writers that go through a temp file (safetensors' save, ``mkstemp``) leave 0600 behind."""
    root.chmod(DIR_MODE)
    for path in root.rglob("*"):
        if not path.is_symlink():
            path.chmod(DIR_MODE if path.is_dir() else FILE_MODE)


_LEFTOVER = re.compile(r"\.(?P<name>.+)\.(?P<kind>tmp|old)-[0-9a-f]{8}")


def clean_atomic_leftovers(parent: Path) -> list[str]:
    """Tidy what :func:`atomic_dir` calls killed mid-write (``kill -9``, a lost node) left in
    ``parent``: a half-written ``.NAME.tmp-XXXXXXXX`` is removed; a ``.NAME.old-XXXXXXXX`` (the
    previous ``NAME``, moved aside just before the new one was renamed in) is put back when ``NAME``
    is missing, else removed. Call it only where no other process writes (a run's checkpoints at
    start). Returns a line per directory tidied."""
    notes: list[str] = []
    if not parent.is_dir():
        return notes
    for path in sorted(parent.iterdir()):
        match = _LEFTOVER.fullmatch(path.name)
        if match is None or not path.is_dir() or path.is_symlink():
            continue
        final = parent / match["name"]
        if match["kind"] == "old" and not final.exists():
            os.replace(path, final)
            notes.append(f"restored {final.name} from {path.name} (a write of it was interrupted)")
        else:
            shutil.rmtree(path, ignore_errors=True)
            notes.append(f"removed {path.name}, left by an interrupted write")
    return notes


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) while the block runs.

    Another process asking for the same lock waits until this block ends. The lock is
    ``filelock``'s (``fcntl`` on POSIX, ``msvcrt`` on Windows), so it holds on every platform.
    """
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path)):
        yield
