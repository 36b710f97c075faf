"""How the viewer reads a run dir's files safely: whatever a file holds, a route answers.

A run dir is written by a job, and on a scheduler by a tenant's job, so the viewer treats its
files as untrusted input:

- **JSON** is parsed by :func:`loads`: NaN, infinities and numbers out of float range (a step of
  ``1e400``) become None, and a document nested deeper than Python can parse (200,000 ``[``) or
  not JSON at all is :class:`Unreadable`, with the reason. The caller skips it and shows a
  warning; no route answers 500 for a file's content.
- **Links out of the run dir are not followed** (:func:`inside`): a ``metrics.jsonl`` or a
  ``checkpoints/step-N`` that is a symbolic link to ``/usr`` is skipped with a warning, and a
  checkpoint's files are walked without following links (:func:`walk_files`, at most
  :data:`MAX_CHECKPOINT_FILES` per checkpoint).
- **Reads are bounded**: a JSON document over :data:`MAX_JSON_BYTES` is not read, and a JSON line
  over :data:`MAX_LINE_BYTES` is skipped (:class:`tinker_client.viewer.data.JsonLines`), so a
  150 MB line without its newline is neither held in memory nor read again on every poll.
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["MAX_CHECKPOINT_FILES", "MAX_JSON_BYTES", "MAX_LINE_BYTES", "PolledFile", "Unreadable", "inside", "loads", "read_document",
           "walk_files"]

#: The largest JSON document (config.json, result.json, report.json...) the viewer reads.
MAX_JSON_BYTES = 32 * 1024 * 1024
#: The longest line of a JSON-lines file (metrics, rollouts) or trace event the viewer parses.
MAX_LINE_BYTES = 32 * 1024 * 1024
#: The most files counted in one checkpoint directory.
MAX_CHECKPOINT_FILES = 10_000


class Unreadable(ValueError):  # noqa: N818 - what the file is, as the warning reads
    """A file (or line) the viewer skips; the text says why."""


def _float(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _constant(_text: str) -> None:  # NaN, Infinity, -Infinity: JSON has none of them
    return None


DECODER = json.JSONDecoder(parse_float=_float, parse_constant=_constant)
"""The decoder of every document the viewer reads (finite numbers, no NaN)."""


def loads(data: str | bytes | bytearray) -> Any:
    """``data`` parsed as JSON with :data:`DECODER`; :class:`Unreadable` naming why not."""
    try:
        text = data.decode("utf-8", errors="replace") if isinstance(data, bytes | bytearray) else data
        return DECODER.decode(text)
    except RecursionError:
        raise Unreadable("nested too deeply to parse") from None
    except ValueError as e:  # not JSON; an integer of more than 4300 digits
        raise Unreadable(f"not JSON ({str(e).split(':')[0]})") from None


def inside(root: Path, path: Path) -> bool:
    """Whether ``path``, its links followed, lies in ``root`` (a resolved directory)."""
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):  # a link loop
        return False


def read_document(root: Path, name: str, kind: type = dict, limit: int = MAX_JSON_BYTES) -> tuple[Any, str | None]:
    """``(value, warning)`` of the JSON document ``root/name``: ``(None, None)`` when it is
    missing, ``(None, why)`` when it is a link out of ``root``, larger than ``limit`` bytes
    (default :data:`MAX_JSON_BYTES`), not JSON or not a ``kind``."""
    path = root / name
    if not os.path.lexists(path):
        return None, None
    if not inside(root, path):
        return None, "a link out of the run dir; not read"
    try:
        size = path.stat().st_size
        if size > limit:
            return None, f"{size / 1e6:.{0 if size >= 1e7 else 2}f} MB, more than the viewer reads ({limit / 2**20:g} MiB); not read"
        value = loads(path.read_bytes())
    except OSError as e:
        return None, f"cannot be read ({e.strerror or e})"
    except Unreadable as e:
        return None, f"{e}; ignored"
    if not isinstance(value, kind):
        return None, f"a JSON {type(value).__name__}, not {'an object' if kind is dict else kind.__name__}; ignored"
    return value, None


def walk_files(top: Path, limit: int = MAX_CHECKPOINT_FILES) -> tuple[int, int, bool]:
    """``(files, bytes, complete)`` of the regular files under ``top``, links neither followed
    nor counted, at most ``limit`` files (``complete`` False beyond)."""
    files = size = 0
    todo = [top]
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    files += 1
                    size += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
            if files >= limit:
                return files, size, False
    return files, size, True


class PolledFile:
    """A run file the viewer polls: :meth:`refresh` parses what was appended since the last call
    (the subclass's ``_refresh``), one caller at a time; with ``root``, a file that is a link out
    of that directory is not read (:attr:`problem` says so)."""

    problem: str

    def __init__(self, path: Path, root: Path | None) -> None:
        self.path, self.root = path, root
        self._lock = threading.Lock()

    def refresh(self) -> bool:
        """Parse what was appended since the last call; True when anything changed. Thread-safe:
        a second caller waits for the first one's parse."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> bool:  # pragma: no cover - subclasses implement
        raise NotImplementedError

    def _stat(self) -> os.stat_result | None:
        """The file's ``stat``; None for a link out of ``root``; ``OSError`` when it cannot be read."""
        if self.root is not None and os.path.lexists(self.path) and not inside(self.root, self.path):
            self.problem = "a link out of the run dir; not read"
            return None
        return self.path.stat()
