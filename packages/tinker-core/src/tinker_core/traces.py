"""Per-phase traces of a run's steps: ``trace.json`` in the Chrome trace-event format.

A run writes its phases (``rollout``, ``sample``, ``env``, ``logprobs``, ``forward_backward``,
``optim_step``, ``evaluate``, ``checkpoint``, ``record``, each inside its ``step``) as complete
events (``"ph": "X"``, ``ts`` and ``dur`` in microseconds, ``args: {"stage", "step"}`` and the
phase's peak memory where it was measured, ``peak_rss_gib`` and ``peak_cuda_gib``) in the
"JSON Array Format": the file starts with ``[`` and holds one event per line, each followed by a
comma; the closing ``]`` is left out so the file can grow while the run trains (the format allows
it, and ui.perfetto.dev and chrome://tracing load it). ``"ph": "M"`` metadata events name the
process (the job, the host) and the thread.

:class:`TraceWriter` writes one; :func:`read_trace` reads one whole (a missing ``]``, a trailing
comma, a last line cut short, or the "JSON Object Format" ``{"traceEvents": [...]}``), with the
incremental reader the viewer follows one with (:class:`tinker_core.run_files.TraceReader`); :func:`summarise`
gives each phase's count, mean, p50, p95, share of the step time and peak memory, which ``opentinker trace
RUN_DIR`` prints. No torch here.
"""

from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tinker_core.run_files import TRACE_FILE, TraceReader

STEP = "step"
"""The phase every other phase of a step lies inside; shares are of its total time."""
MEMORY_ARGS = ("peak_rss_gib", "peak_cuda_gib")
"""The args of an event that hold its phase's peak memory (GiB), where it was measured."""


class TraceWriter:
    """Appends trace events to ``path``: ``fresh`` starts the file over, else events are added
    after those already there (a resumed run). :meth:`complete` buffers an event; :meth:`flush`
    writes the buffer (one write per step keeps the cost low). Thread-safe."""

    def __init__(self, path: str | Path, *, process_name: str, fresh: bool = True, pid: int | None = None) -> None:
        self.path = Path(path)
        self.pid = os.getpid() if pid is None else pid
        self.lock = threading.Lock()
        self.buffer: list[str] = []
        self.threads: dict[int, str] = {}
        if fresh or not self.path.is_file() or self.path.stat().st_size == 0:
            self.path.write_text("[\n", encoding="utf-8")
        self.metadata("process_name", {"name": process_name})

    def metadata(self, name: str, args: dict[str, Any], tid: int = 0) -> None:
        """A ``"ph": "M"`` event (``process_name``, ``thread_name``, ...)."""
        self._add({"name": name, "ph": "M", "pid": self.pid, "tid": tid, "args": args})

    def complete(self, name: str, ts_us: float, dur_us: float, args: dict[str, Any], *, cat: str = STEP) -> None:
        """A ``"ph": "X"`` event of this thread: ``name`` from ``ts_us`` for ``dur_us`` microseconds."""
        tid = threading.get_native_id()
        if tid not in self.threads:
            self.threads[tid] = threading.current_thread().name
            self.metadata("thread_name", {"name": self.threads[tid]}, tid=tid)
        self._add({
            "name": name, "cat": cat, "ph": "X", "ts": round(ts_us, 1), "dur": round(max(dur_us, 0.0), 1),
            "pid": self.pid, "tid": tid, "args": args,
        })

    def _add(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, separators=(",", ":")) + ",\n"
        with self.lock:
            self.buffer.append(line)

    def flush(self) -> None:
        with self.lock:
            text, self.buffer = "".join(self.buffer), []
        if text:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(text)


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    """The events of a trace file (``RUN_DIR/trace.json`` for a directory), read with
    :class:`tinker_core.run_files.TraceReader`; see the module docstring for what it tolerates.
    Raises ``ValueError`` naming the file when it is no trace."""
    p = Path(path)
    if p.is_dir():
        p = p / TRACE_FILE
    with p.open("rb") as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"{"):
        return _read_object_format(p)
    if not head.startswith(b"["):
        raise ValueError(f"{p} is not a trace: a trace-event file starts with '[' or '{{'")
    reader = TraceReader(p)
    events = reader.read().events
    if reader.problem:
        raise ValueError(f"{p} is not a trace: {reader.problem.split(';')[0]}")
    line, rest = reader.pending()
    rest = rest.strip().removeprefix("]").strip()
    if "\n" in rest:  # more than a last event cut short while the run writes it
        bad = rest.splitlines()[0].rstrip(",")
        raise ValueError(f"{p}:{line} is not a trace event: {bad[:80]!r}")
    return events


def _read_object_format(p: Path) -> list[dict[str, Any]]:
    """The events of a trace in the "JSON Object Format" (``{"traceEvents": [...]}``)."""
    try:
        document = json.loads(p.read_text(encoding="utf-8"))
    except RecursionError:  # 100,000 '[': json gives up with a RecursionError, not a JSONDecodeError
        raise ValueError(f"{p} is not a trace: it nests JSON too deeply to parse") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{p} is not a trace: {e}") from None
    events = document.get("traceEvents") if isinstance(document, dict) else None
    if not isinstance(events, list):
        raise ValueError(f"{p} is not a trace: the object has no 'traceEvents' list")
    return [e for e in events if isinstance(e, dict)]


@dataclass(frozen=True)
class PhaseStats:
    """One phase of :func:`summarise`: durations in milliseconds; ``share`` of the total step time;
    the largest peak memory of its events in GiB (None where none was measured): the process's
    resident set (``peak_rss_gib``) and torch's CUDA allocation (``peak_cuda_gib``)."""

    name: str
    count: int
    total_ms: float
    mean_ms: float
    p50_ms: float
    p95_ms: float
    share: float
    peak_rss_gib: float | None = None
    peak_cuda_gib: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, linearly interpolated (NaN for none)."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarise(events: list[dict[str, Any]], *, stage: str | None = None) -> list[PhaseStats]:
    """Per phase (the names of the complete events; ``stage``: only that stage's): count, total,
    mean, p50, p95, share of the summed ``step`` time and peak memory; ``step`` first, then the largest share."""
    durations: dict[str, list[float]] = {}
    peaks: dict[tuple[str, str], float] = {}
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X" or not isinstance(ev.get("dur"), int | float):
            continue
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        if stage is not None and args.get("stage") != stage:
            continue
        name = str(ev.get("name"))
        durations.setdefault(name, []).append(float(ev["dur"]) / 1000.0)
        for key in MEMORY_ARGS:
            value = args.get(key)
            if isinstance(value, int | float) and math.isfinite(value):
                peaks[name, key] = max(peaks.get((name, key), 0.0), float(value))
    step_total = sum(durations.get(STEP, [])) or math.nan
    out = [
        PhaseStats(name, len(d), sum(d), sum(d) / len(d), percentile(d, 50), percentile(d, 95), sum(d) / step_total,
                   peaks.get((name, "peak_rss_gib")), peaks.get((name, "peak_cuda_gib")))
        for name, d in durations.items()
    ]
    return sorted(out, key=lambda s: (s.name != STEP, -s.total_ms))


__all__ = ["MEMORY_ARGS", "STEP", "TRACE_FILE", "PhaseStats", "TraceWriter", "percentile", "read_trace", "summarise"]
