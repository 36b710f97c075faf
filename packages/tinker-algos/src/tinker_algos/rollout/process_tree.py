"""Find and kill every process an isolated agent episode started (``isolation: process``).

Killing the child's process group is not enough: an agent can start a process in a session of
its own (``setsid``, ``start_new_session=True``, a daemon's double fork), which leaves the group
and, once its parent exits, is no longer anyone's descendant. So each episode's child carries a
random marker in its environment (:data:`MARKER_VAR`), which every process it starts inherits,
and asks the kernel to adopt its orphaned descendants (``PR_SET_CHILD_SUBREAPER``, Linux), so
that while it runs they stay in its tree. :func:`kill_episode` then kills, until none is left:
the child's process group, the child's descendants (read from ``/proc``) and every process of
this user whose environment holds the marker. A process that both leaves the session and clears
its environment after its parent has exited escapes; the isolation is against accidents, not a
sandbox (run the scheduler in a container for that).

Without ``/proc`` (macOS) only the process group is killed. This module is torch-free.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterator
from pathlib import Path

__all__ = ["MARKER_VAR", "adopt_orphans", "episode_pids", "kill_episode"]

MARKER_VAR = "OPENTINKER_AGENT_EPISODE"
"""The environment variable that marks an episode's processes (a random value per episode)."""

_PR_SET_CHILD_SUBREAPER = 36
_PROC = Path("/proc")


def adopt_orphans() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux; False where unsupported)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _processes() -> Iterator[tuple[int, int, str]]:
    """``(pid, parent pid, state)`` of each live process (none without ``/proc``)."""
    if not _PROC.is_dir():
        return
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        try:
            fields = (_PROC / entry.name / "stat").read_text().rsplit(")", 1)[1].split()
            yield int(entry.name), int(fields[1]), fields[0]
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        return marker in (_PROC / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:  # another user's process, or gone
        return False


def episode_pids(root: int | None, marker: str | None) -> set[int]:
    """Live (not zombie) processes of an episode: ``root``'s descendants (``root`` included) and
    those whose environment holds ``MARKER_VAR=marker``; never this process or its ancestors."""
    procs = [(pid, ppid) for pid, ppid, state in _processes() if state not in ("Z", "X")]
    children: dict[int, list[int]] = {}
    for pid, ppid in procs:
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [root] if root is not None and any(pid == root for pid, _ in procs) else []
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    if marker:
        tag = f"{MARKER_VAR}={marker}".encode()
        found |= {pid for pid, _ in procs if _has_marker(pid, tag)}
    return found - {os.getpid(), os.getppid()}


def kill_episode(root: int | None, marker: str | None, *, group: bool = True, rounds: int = 5) -> None:
    """SIGKILL ``root``'s process group (``group``; ``root`` must not be reaped yet, so that its
    id is not reused) and every process of :func:`episode_pids`, again until none is found (a
    process may fork while the last round ran)."""
    if group and root is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(root, signal.SIGKILL)
    for _ in range(rounds):
        pids = episode_pids(root, marker)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
