"""Reading run dirs for the viewer, while a run may still be writing them.

Every file is read incrementally, with tinker-core's one reader per run file
(:mod:`tinker_core.run_files`, the readers ``opentinker compare`` and ``opentinker eval`` use too):
:class:`JsonLines` keeps what its reader parsed and on each :meth:`~JsonLines.refresh` takes only
what was appended, a partial last line (one still being written) left for the next call; a file
that shrank or was replaced (``--fresh``) is read again from the start; a file that did not change
is not read at all, and a line longer than :data:`~tinker_client.viewer.files.MAX_LINE_BYTES` is
skipped (scanned past in chunks, never held).
Every file is untrusted input (:mod:`tinker_client.viewer.files`): what cannot be read — a line
or document that is not JSON, nested too deeply or of the wrong shape, a link out of the run dir
— is skipped and listed in the run's ``warnings``, never a 500. ``rollouts.jsonl`` is indexed, not held: each episode's summary
(step, group, reward, stop reason, length) and its byte range, the record read back on demand,
so a 10,000-step run costs megabytes, not its whole transcript. ``trace.json`` (Chrome trace-event
JSON Array Format) is parsed event by event, so a trace without its closing ``]`` or with a
half-written last event reads fine.

The files (see docs/guides/viewer.md): ``metrics.jsonl``, ``rollouts.jsonl``, ``trace.json``,
``config.json``, ``result.json``, ``checkpoints/step-NNNNNN/`` and, for an ``opentinker compare``
report dir, ``report.json`` and ``report.md``.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_client.viewer.files import (
    DECODER,
    MAX_LINE_BYTES,
    PolledFile,
    Unreadable,
    inside,
    loads,
    read_document,
    walk_files,
)
from tinker_core.run_files import (
    METRICS_FILE,
    ROLLOUTS_FILE,
    TRACE_FILE,
    JsonLinesReader,
    TraceReader,
)
from tinker_core.traces import MEMORY_ARGS, STEP, summarise

__all__ = ["JsonLines", "Rollout", "RunDir", "TraceEvents", "is_run_dir", "phase_summary"]

#: Files any of which makes a directory a run dir (or a compare report dir).
RUN_FILES = (METRICS_FILE, ROLLOUTS_FILE, "config.json", "result.json", TRACE_FILE, ".opentinker-run",
             "report.json")
#: The most episodes a text search decodes for one request (beyond it the answer says so).
MAX_SCAN = 20_000


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is a directory that holds a run's files (or a compare report)."""
    return path.is_dir() and any((path / name).exists() for name in RUN_FILES)


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None (JSON has neither)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class JsonLines(PolledFile):
    """The parsed lines of an append-only JSON-lines file, followed with tinker-core's reader
    (:class:`tinker_core.run_files.JsonLinesReader`, module docstring).

    ``parse(obj, offset, length)`` turns each JSON object into what is kept (default: the object);
    a line that is not a JSON object (or that ``parse`` refuses) is skipped and counted in
    :attr:`skipped`. :attr:`items` holds the kept values in order; :attr:`generation` grows each
    time the file starts over. With ``root``, a file that is a link out of that directory is not
    read (:attr:`problem` says so)."""

    def __init__(self, path: Path, parse: Callable[[dict[str, Any], int, int], Any] | None = None,
                 root: Path | None = None) -> None:
        super().__init__(path, root)
        self.parse = parse or (lambda obj, _offset, _length: obj)
        self.reader = JsonLinesReader(path, decoder=DECODER)
        self.items: list[Any] = []
        self.generation, self.skipped, self.problem = 0, 0, ""

    @property
    def offset(self) -> int:
        """The byte offset parsed up to."""
        return self.reader.offset

    def warning(self) -> str | None:
        """What the viewer could not read of this file, or None."""
        if self.problem:
            return self.problem
        return f"{self.skipped} line{'s' if self.skipped != 1 else ''} skipped (not a JSON object, unreadable or over " \
               f"{MAX_LINE_BYTES // 2**20} MiB)" if self.skipped else None

    def _refresh(self) -> bool:
        try:
            if self._stat() is None:
                return False  # a link out of the run dir (problem says so)
        except OSError:
            pass  # gone: the reader starts over
        self.problem = ""
        read = self.reader.read()
        changed = False
        if read.restarted:
            changed = bool(self.items)
            self.items, self.skipped = [], 0
            self.generation += 1
        self.skipped += len(read.skipped)
        for row in read.rows:
            try:
                self.items.append(self.parse(row.value, row.offset, row.length))
            except (TypeError, ValueError, OverflowError):
                self.skipped += 1
        return changed or bool(read.rows) or bool(read.skipped)


@dataclass(frozen=True, slots=True)
class Rollout:
    """One indexed episode of ``rollouts.jsonl``: what filters need, and where its record is."""

    index: int
    offset: int
    length: int
    kind: str
    stage: str
    step: int
    group: int
    episode: int
    reward: float | None
    advantage: float | None
    stop_reason: str
    new_tokens: int


def _num(obj: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = obj.get(key)
    try:
        return kind(value) if value is not None else default
    except (TypeError, ValueError, OverflowError):  # OverflowError: int of an infinity
        return default


class TraceEvents(PolledFile):
    """The complete events (``"ph": "X"``) of a Chrome trace-event JSON array, followed with
    tinker-core's reader (:class:`tinker_core.run_files.TraceReader`): a missing closing ``]`` or
    a half-written last event is waited for, not an error. Each event is kept as
    ``(name, dur_us, stage, step, peak memory)``; the table is :func:`phase_summary`."""

    def __init__(self, path: Path, root: Path | None = None) -> None:
        super().__init__(path, root)
        self.reader = TraceReader(path, decoder=DECODER)
        self.events: list[tuple[str, float, Any, Any, dict[str, float]]] = []  # (name, dur_us, stage, step, peak memory)
        self.problem = ""

    @property
    def offset(self) -> int:
        """The byte offset read up to."""
        return self.reader.offset

    def _refresh(self) -> bool:
        try:
            if self._stat() is None:
                return False
        except OSError:
            return False
        read = self.reader.read()
        if read.restarted:
            self.events = []
        before = len(self.events)
        for event in read.events:
            if event.get("ph") == "X" and isinstance(event.get("dur"), int | float):
                args = event.get("args") if isinstance(event.get("args"), dict) else {}
                peaks = {k: float(v) for k in MEMORY_ARGS if isinstance(v := args.get(k), int | float)}
                self.events.append((str(event.get("name", "?")), float(event["dur"]), args.get("stage"), args.get("step"), peaks))
        self.problem = self.reader.problem
        return read.restarted or len(self.events) != before


def phase_summary(events: list[tuple[str, float, Any, Any, dict[str, float]]]) -> dict[str, Any]:
    """The phase table of :func:`tinker_core.traces.summarise` (the one ``opentinker trace``
    prints): per phase name its count, mean/p50/p95/total milliseconds and share of the summed
    ``step`` time (None when the trace has no ``step`` events), largest first; ``step`` itself is
    not a row but gives ``step_total_ms``. ``steps`` counts the (stage, step) pairs seen."""
    stats = summarise([{"name": name, "ph": "X", "dur": dur, "args": {"stage": stage, **peaks}} for name, dur, stage, _step, peaks in events])
    rows = [{k: _finite(v) for k, v in s.to_dict().items()} for s in stats if s.name != STEP]
    step_total = sum(s.total_ms for s in stats if s.name == STEP)
    steps = {(stage, step) for _n, _d, stage, step, _p in events if step is not None}
    return {"phases": rows, "events": len(events), "steps": len(steps), "step_total_ms": step_total}


class RunDir:
    """One run dir (or compare report dir) the viewer serves; thread-safe."""

    def __init__(self, path: Path, name: str) -> None:
        self.path, self.name = path, name
        self.root = path.resolve()  # nothing is read through a link out of it (tinker_client.viewer.files)
        self.metrics = JsonLines(path / METRICS_FILE, lambda obj, _o, _l: {k: _finite(v) for k, v in obj.items()}, self.root)
        self.rollouts = JsonLines(path / ROLLOUTS_FILE, self._index_rollout, self.root)
        self.trace = TraceEvents(path / TRACE_FILE, self.root)
        self._cache: dict[str, tuple[Any, Any]] = {}
        #: what could not be read, by file (shown on the page): set and cleared as files are read
        self.problems: dict[str, str] = {}

    def cached(self, name: str, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``, again only when ``key`` (what the value depends on) changed: the page
        polls, and a 10,000-step run's episodes are not walked on every poll."""
        hit = self._cache.get(name)
        if hit is None or hit[0] != key:
            hit = self._cache[name] = (key, compute())
        return hit[1]

    def _rollouts_key(self) -> tuple[int, int]:
        return self.rollouts.generation, len(self.rollouts.items)

    def _index_rollout(self, obj: dict[str, Any], offset: int, length: int) -> Rollout:
        return Rollout(
            index=len(self.rollouts.items), offset=offset, length=length, kind=sys.intern(str(obj.get("kind", "train"))),
            stage=sys.intern(str(obj.get("stage", ""))), step=_num(obj, "step", int, 0), group=_num(obj, "group", int, 0),
            episode=_num(obj, "episode", int, 0), reward=_finite(_num(obj, "reward", float, None)),
            advantage=_finite(_num(obj, "advantage", float, None)), stop_reason=sys.intern(str(obj.get("stop_reason", ""))),
            new_tokens=_num(obj, "new_tokens", int, 0))

    def refresh(self) -> None:
        """Read what every file gained since the last call."""
        self.metrics.refresh()
        self.rollouts.refresh()
        self.trace.refresh()

    def read_json(self, name: str, kind: type = dict) -> Any:
        """The JSON document ``name`` of the run dir (a ``kind``), or None when it is missing or
        unreadable (then :meth:`warnings` says why: :func:`~tinker_client.viewer.files.read_document`)."""
        value, problem = read_document(self.root, name, kind)
        if problem and not (name == "result.json" and problem.startswith("not JSON")):  # result.json may be half-written
            self.problems[name] = problem
        else:
            self.problems.pop(name, None)
        return value

    def read_text(self, name: str, limit: int = MAX_LINE_BYTES) -> str | None:
        """The text file ``name`` of the run dir (at most ``limit`` bytes), or None when it is
        missing, a link out of the run dir or unreadable."""
        path = self.path / name
        if not os.path.lexists(path) or not inside(self.root, path):
            return None
        try:
            with path.open("rb") as f:
                return f.read(limit).decode("utf-8", errors="replace")
        except OSError:
            return None

    def warnings(self) -> list[str]:
        """``"<file>: <why>"`` for each file (or part of one) that could not be read."""
        found = dict(self.problems)
        for lines in (self.metrics, self.rollouts):
            if (why := lines.warning()) is not None:
                found[lines.path.name] = why
        if self.trace.problem:
            found[self.trace.path.name] = self.trace.problem
        return [f"{name}: {why}" for name, why in sorted(found.items())]

    def summary(self) -> dict[str, Any]:
        """What the run list shows, and what tells the polling page that something changed. Only
        ``metrics.jsonl`` is read here (it is small); the episodes and the trace are indexed by
        the requests that need them (and once at start-up, in the background), so the counts of
        ``rollouts`` and ``trace_events`` are those indexed so far, and the sizes of their files
        (``rollouts_bytes``, ``trace_bytes``) say when there is more."""
        self.metrics.refresh()
        result = self.read_json("result.json")
        rows = self.metrics.items
        items: list[Rollout] = self.rollouts.items
        stages = self.cached("stages", (self.metrics.generation, len(rows)),
                              lambda: list(dict.fromkeys(str(r.get("stage", "")) for r in rows)))
        evals = self.cached("evals", self._rollouts_key(), lambda: sum(1 for r in items if r.kind == "eval"))
        return {
            "name": self.name, "path": str(self.path), "report": (self.path / "report.json").is_file(),
            "status": (result or {}).get("status", "running" if rows else "empty"),
            "metrics_rows": len(rows), "last_step": rows[-1].get("step") if rows else None,
            "stages": stages, "rollouts": len(items), "eval_rollouts": evals,
            "trace_events": len(self.trace.events), "generation": self.metrics.generation + self.rollouts.generation,
            "rollouts_bytes": _size(self.rollouts.path), "trace_bytes": _size(self.trace.path),
            "warnings": self.warnings(),
        }

    def metric_columns(self, since: int = 0) -> dict[str, Any]:
        """The metrics rows from ``since`` on, by column: ``steps``, ``stages`` and ``series`` (key ->
        values, None where a row lacks the key); ``next`` is the ``since`` of the next call."""
        self.metrics.refresh()
        rows = self.metrics.items[since:]
        keys = sorted({k for r in rows for k in r if k not in ("stage", "step")})
        return {
            "start": since, "next": since + len(rows), "generation": self.metrics.generation,
            "steps": [r.get("step") for r in rows], "stages": [r.get("stage") for r in rows],
            "series": {k: [r.get(k) for r in rows] for k in keys},
        }

    def rollout_index(self) -> dict[str, Any]:
        """The steps that have episodes (per kind), the stop reasons seen and the longest episode."""
        self.refresh()
        return self.cached("index", self._rollouts_key(), self._rollout_index)

    def _rollout_index(self) -> dict[str, Any]:
        items: list[Rollout] = self.rollouts.items
        steps: dict[str, set[int]] = {}
        for r in items:
            steps.setdefault(r.kind, set()).add(r.step)
        return {"count": len(items), "steps": {k: sorted(v) for k, v in steps.items()},
                "stop_reasons": sorted({r.stop_reason for r in items}),
                "max_new_tokens": max((r.new_tokens for r in items), default=0)}

    def select(self, keep: Callable[[Rollout], bool], step: int | None = None) -> list[Rollout]:
        """The indexed episodes ``keep`` accepts, in file order; with ``step``, only that step's
        are looked at (through a by-step index, so a step's page does not walk the whole run)."""
        self.refresh()
        if step is None:
            return [r for r in self.rollouts.items if keep(r)]
        by_step = self.cached("by_step", self._rollouts_key(), self._by_step)
        return [r for r in by_step.get(step, ()) if keep(r)]

    def _by_step(self) -> dict[int, list[Rollout]]:
        out: dict[int, list[Rollout]] = {}
        for r in self.rollouts.items:
            out.setdefault(r.step, []).append(r)
        return out

    def records(self, rollouts: list[Rollout]) -> Iterator[tuple[Rollout, dict[str, Any]]]:
        """Each of ``rollouts`` with its full record read back from ``rollouts.jsonl``."""
        if not rollouts:
            return
        if not inside(self.root, self.rollouts.path):
            return
        with self.rollouts.path.open("rb") as f:
            for r in rollouts:
                f.seek(r.offset)
                try:
                    record = loads(f.read(r.length))
                except Unreadable:
                    continue
                if isinstance(record, dict):
                    yield r, record

    def checkpoints(self) -> list[dict[str, Any]]:
        """The ``checkpoints/step-NNNNNN`` dirs: name, step, files, bytes, modification time
        (``complete``: False when more files than are counted). A link out of the run dir is
        skipped with a warning; links inside a checkpoint are neither followed nor counted."""
        out, outside = [], []
        root = self.path / "checkpoints"
        if root.is_dir() and not inside(self.root, root):
            self.problems["checkpoints"] = "a link out of the run dir; not read"
            return []
        for d in sorted(root.glob("step-*")) if root.is_dir() else []:
            if not inside(self.root, d):
                outside.append(d.name)
                continue
            if not d.is_dir():
                continue
            files, size, complete = walk_files(d)
            try:
                step = int(d.name.removeprefix("step-"))
                mtime = os.path.getmtime(d)
            except (ValueError, OSError):
                step, mtime = None, None
            out.append({"name": d.name, "step": step, "files": files, "bytes": size, "mtime": mtime, "complete": complete})
        if outside:
            self.problems["checkpoints"] = f"{', '.join(outside)}: a link out of the run dir; not read"
        else:
            self.problems.pop("checkpoints", None)
        return out

    def trace_summary(self) -> dict[str, Any]:
        """:func:`phase_summary` of the trace's events (an empty table when there is no trace)."""
        self.refresh()
        table = self.cached("trace", (self.trace.offset, len(self.trace.events)), lambda: phase_summary(self.trace.events))
        return {"present": self.trace.path.is_file(), **table}
