"""Peak memory per phase: the ``memory/`` sibling of ``time/`` in a run's metrics and trace.

Two measures, each honest about what it counts:

* **RSS** (``rss``, Linux): the process's peak resident set during the phase: the kernel's
  high-water mark ``VmHWM`` (``/proc/self/status``), reset at each phase boundary by writing ``5``
  to ``/proc/self/clear_refs`` (Linux 4.0+). It counts everything the process holds in RAM (the
  model's weights, Python, the allocator's caches), not only the phase's tensors, and nothing in
  other processes (Ray's rollout workers). Where the reset is refused, or off Linux, there is no
  RSS figure (a lifetime maximum is no phase's peak).
* **CUDA** (``cuda``): the peak of the bytes torch's caching allocator handed out on the current
  device during the phase (``torch.cuda.max_memory_allocated``, reset with
  ``reset_peak_memory_stats``): tensors only, not the allocator's reserve or the CUDA context.
  Measured only when the process has already initialised CUDA.

Both counters are process-wide and can only be reset, not nested, so one :class:`PeakWatch` per
process folds each reading into every phase open at the time before it resets (phases nest, and
jobs sharing a process each see the process's peak). A phase's reading and reset take about
10 microseconds.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["GIB", "PeakWatch", "Peaks", "watch"]

GIB = float(1 << 30)
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


@dataclass
class Peaks:
    """The peaks (bytes) of one open phase so far, by measure (``rss``, ``cuda``)."""

    bytes: dict[str, int] = field(default_factory=dict)

    def fold(self, reading: dict[str, int]) -> None:
        for k, v in reading.items():
            self.bytes[k] = max(self.bytes.get(k, 0), v)

    def gib(self) -> dict[str, float]:
        return {k: round(v / GIB, 4) for k, v in self.bytes.items()}


class _ProcFiles:
    """``/proc/self/status`` and ``/proc/self/clear_refs`` kept open (a read and a reset are then a
    few microseconds, not tens); reopened in a forked child, whose ``self`` is another process."""

    def __init__(self) -> None:
        self.pid = -1
        self.status = self.clear = -1

    def _open(self) -> None:
        if self.pid != os.getpid():
            self.pid = os.getpid()
            self.status = os.open(_STATUS, os.O_RDONLY)
            self.clear = os.open(_CLEAR_REFS, os.O_WRONLY)

    def hwm(self) -> int | None:
        try:
            self._open()
            text = os.pread(self.status, 1 << 14, 0)
            at = text.index(b"VmHWM:")
            return int(text[at + 6 : text.index(b"\n", at)].split()[0]) * 1024
        except (OSError, ValueError, IndexError):
            return None

    def reset(self) -> bool:
        try:
            self._open()
            os.write(self.clear, b"5")
        except OSError:
            return False
        return True


class PeakWatch:
    """The process's peak memory, folded into every open phase (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: set[int] = set()
        self.peaks: dict[int, Peaks] = {}
        self.next_id = 0
        self.proc = _ProcFiles()
        self.rss = sys.platform.startswith("linux") and self.proc.hwm() is not None and self.proc.reset()

    def _cuda(self):  # the torch.cuda module when this process uses CUDA already, else None
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        try:
            return cuda if cuda is not None and cuda.is_initialized() else None
        except Exception:  # a broken driver is no reason to fail a step
            return None

    def _read_and_reset(self) -> dict[str, int]:
        reading: dict[str, int] = {}
        if self.rss:
            hwm = self.proc.hwm()
            if hwm is not None and self.proc.reset():
                reading["rss"] = hwm
        cuda = self._cuda()
        if cuda is not None:
            reading["cuda"] = int(cuda.max_memory_allocated())
            cuda.reset_peak_memory_stats()
        return reading

    def _fold(self) -> None:
        reading = self._read_and_reset()
        for i in self.open:
            self.peaks[i].fold(reading)

    def begin(self) -> int:
        """Open a phase; its id for :meth:`end` / :meth:`peek`."""
        with self.lock:
            # the open phases' peak until now; the counters start over (at what the process holds
            # now) for the new one, so its first reading covers its start
            self._fold()
            i, self.next_id = self.next_id, self.next_id + 1
            self.open.add(i)
            self.peaks[i] = Peaks()
            return i

    def peek(self, i: int) -> Peaks:
        """The peaks of open phase ``i`` so far."""
        with self.lock:
            self._fold()
            return Peaks(dict(self.peaks[i].bytes))

    def end(self, i: int) -> Peaks:
        """Close phase ``i``: its peaks."""
        with self.lock:
            self._fold()
            self.open.discard(i)
            return self.peaks.pop(i)


_WATCH: PeakWatch | None = None
_WATCH_LOCK = threading.Lock()


def watch() -> PeakWatch:
    """The process's :class:`PeakWatch` (made on first use)."""
    global _WATCH
    with _WATCH_LOCK:
        if _WATCH is None:
            _WATCH = PeakWatch()
        return _WATCH
