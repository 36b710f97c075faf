"""One incremental reader per run file: ``metrics.jsonl``, ``rollouts.jsonl`` and ``trace.json``.

A run appends to these files while it trains, and several readers follow them: the run viewer
polls them, ``opentinker compare`` and ``opentinker eval`` read them when a run is done, and so
do tests and scripts. They all read through the readers here, so a file is parsed one way:

* :class:`JsonLinesReader` -- an append-only JSON-lines file (``metrics.jsonl``,
  ``rollouts.jsonl``). Each :meth:`~JsonLinesReader.read` parses what was appended since the last
  one, from the byte offset it stopped at, and returns the new rows with the new offset
  (:class:`LinesRead`). A last line without its newline is being written: it is left for the next
  read. A file that shrank or was replaced (a ``--fresh`` run) is read again from its start
  (``restarted``); a file that did not change is not read at all. A line that is not a JSON
  object, or longer than :data:`MAX_LINE_BYTES`, is skipped and reported (``skipped``: its line
  number, offset and why), scanned past in chunks of :data:`CHUNK_BYTES`, never held whole.
* :class:`TraceReader` -- a Chrome trace-event file in the "JSON Array Format" that
  :class:`tinker_core.traces.TraceWriter` writes (``[`` then one event per line, each followed by
  a comma, no closing ``]`` while the run trains). It parses event by event, so a missing ``]``,
  a trailing comma or a half-written last event wait for the next read.

Both read through a ``decoder`` (default :data:`JSON`, which keeps ``NaN`` as Python does); the
viewer passes its own, which turns NaN and out-of-range numbers into None. The whole-file readers
(:func:`read_metrics`, :func:`read_rollouts`,
:func:`tinker_core.traces.read_trace`) are one :meth:`read` from offset 0, and :func:`keep_lines`
(a resumed or forked run cutting its records after a step) keeps lines through it. No torch here.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from tinker_core.episodes import RolloutRecord

__all__ = [
    "CHUNK_BYTES", "JSON", "MAX_LINE_BYTES", "METRICS_FILE", "ROLLOUTS_FILE", "TRACE_FILE", "JsonLinesReader", "Line",
    "LinesRead", "Skipped", "TraceRead", "TraceReader", "iter_rollouts", "keep_lines", "keep_until", "read_metrics",
    "read_rollouts",
]

METRICS_FILE = "metrics.jsonl"
"""A run's metrics: one JSON object per logged step."""
ROLLOUTS_FILE = "rollouts.jsonl"
"""A run's recorded episodes (:class:`tinker_core.episodes.RolloutRecord`, one per line)."""
TRACE_FILE = "trace.json"
"""A run's phases as trace events (:mod:`tinker_core.traces`)."""

MAX_LINE_BYTES = 32 * 1024 * 1024
"""The longest line (or trace event) that is parsed; a longer one is skipped."""
CHUNK_BYTES = 8 * 1024 * 1024
"""How much of a file is read (and held) at once."""
JSON = json.JSONDecoder()
"""The default decoder: Python's, NaN and infinities kept as floats."""


@dataclass(frozen=True)
class Line:
    """One parsed line: its JSON object, where it is in the file (``offset``, ``length`` in bytes,
    newline included) and its line ``number`` (1 for the file's first line)."""

    value: dict[str, Any]
    offset: int
    length: int
    number: int


@dataclass(frozen=True)
class Skipped:
    """A line that was not read: its ``number``, its ``offset`` and ``why``."""

    number: int
    offset: int
    why: str


@dataclass(frozen=True)
class LinesRead:
    """What one :meth:`JsonLinesReader.read` found: the new ``rows``, the lines it ``skipped``,
    the ``offset`` the next read starts from, and ``restarted`` when the file was replaced, shrank
    or vanished, so that the rows start over from its beginning (earlier rows are gone)."""

    rows: list[Line] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    offset: int = 0
    restarted: bool = False


class JsonLinesReader:
    """Reads the JSON objects appended to ``path`` since the last :meth:`read` (module docstring);
    ``offset`` (and the ``line`` number there) start it part-way, at a line boundary."""

    def __init__(self, path: str | Path, *, offset: int = 0, line: int = 1, decoder: json.JSONDecoder = JSON) -> None:
        self.path = Path(path)
        self.offset, self.line = offset, line
        self.decoder = decoder
        self._inode: int | None = None
        self._seen: tuple[int, int] | None = None  # (inode, size) at the last read: unchanged, not read again
        self._long_from: int | None = None  # a line over MAX_LINE_BYTES starts at offset: scanned up to here

    def read(self) -> LinesRead:
        """The rows appended since the last call (see :class:`LinesRead`)."""
        try:
            st = self.path.stat()
        except OSError:  # gone: a later file of that name is read from its start
            restarted = self.offset > 0 or self._inode is not None
            self._restart(None)
            return LinesRead(restarted=restarted)
        if self._seen == (st.st_ino, st.st_size):
            return LinesRead(offset=self.offset)  # nothing new (a half-written line is not read again on every poll)
        restarted = (self._inode is not None and st.st_ino != self._inode) or st.st_size < self.offset
        if restarted:  # replaced or truncated: start over
            self._restart(st.st_ino)
        self._inode = st.st_ino
        self._seen = (st.st_ino, st.st_size)
        rows: list[Line] = []
        skipped: list[Skipped] = []
        with self.path.open("rb") as f:
            while self.offset < st.st_size and self._read_lines(f, st.st_size, rows, skipped):
                pass
        return LinesRead(rows, skipped, self.offset, restarted)

    def _restart(self, inode: int | None) -> None:
        self.offset, self.line, self._inode, self._seen, self._long_from = 0, 1, inode, None, None

    def _read_lines(self, f: BinaryIO, size: int, rows: list[Line], skipped: list[Skipped]) -> bool:
        """Parse the whole lines from :attr:`offset` (at most a chunk of them, or skip one line over
        :data:`MAX_LINE_BYTES`); False when the rest is a line still being written."""
        if self._long_from is not None:
            return self._skip_long_line(f, size, skipped)
        f.seek(self.offset)
        chunk = bytearray(f.read(min(CHUNK_BYTES, size - self.offset)))
        while b"\n" not in chunk and len(chunk) < min(size - self.offset, MAX_LINE_BYTES + 1):  # a line longer than a chunk
            chunk += f.read(min(CHUNK_BYTES, size - self.offset - len(chunk)))  # in place: one copy held
        end = chunk.rfind(b"\n") + 1  # a last line without its newline is still being written
        if end == 0:
            if len(chunk) > MAX_LINE_BYTES:  # too long to parse: scan past it, never holding it
                self._long_from = self.offset + len(chunk)
                return self._skip_long_line(f, size, skipped)
            return False
        self._parse_lines(chunk, end, rows, skipped)
        self.offset += end
        return True

    def _skip_long_line(self, f: BinaryIO, size: int, skipped: list[Skipped]) -> bool:
        assert self._long_from is not None
        f.seek(self._long_from)
        while self._long_from < size:
            chunk = f.read(min(CHUNK_BYTES, size - self._long_from))
            newline = chunk.find(b"\n")
            if newline >= 0:
                skipped.append(Skipped(self.line, self.offset, f"longer than {MAX_LINE_BYTES // 2**20} MiB"))
                self.offset, self._long_from, self.line = self._long_from + newline + 1, None, self.line + 1
                return True
            self._long_from += len(chunk)
        return False

    def _parse_lines(self, chunk: bytes | bytearray, end: int, rows: list[Line], skipped: list[Skipped]) -> None:
        start = 0
        while start < end:
            stop = chunk.index(b"\n", start) + 1
            line, at = chunk[start:stop], self.offset + start
            if len(line) > MAX_LINE_BYTES:
                skipped.append(Skipped(self.line, at, f"longer than {MAX_LINE_BYTES // 2**20} MiB"))
            elif line.strip():
                try:
                    value = self.decoder.decode(line.decode("utf-8", errors="replace"))
                    if not isinstance(value, dict):
                        raise ValueError(f"a JSON {type(value).__name__}, not an object")
                    rows.append(Line(value, at, stop - start, self.line))
                except RecursionError:
                    skipped.append(Skipped(self.line, at, "nested too deeply to parse"))
                except ValueError as e:  # not JSON; an integer of more than 4300 digits
                    skipped.append(Skipped(self.line, at, str(e)))
            start, self.line = stop, self.line + 1


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` file (``RUN_DIR/metrics.jsonl`` for a directory; none when
    it is missing), up to the first line that does not parse: a line cut by a crash, after which
    nothing is trusted. A last line being written is left out."""
    p = Path(path)
    if p.is_dir():
        p = p / METRICS_FILE
    if not p.is_file():
        return []
    read = JsonLinesReader(p).read()
    first_bad = min((s.offset for s in read.skipped), default=None)
    return [row.value for row in read.rows if first_bad is None or row.offset < first_bad]


def keep_lines(src: str | Path, keep: Callable[[dict[str, Any]], bool], dst: str | Path | None = None, *,
               stop_at_bad: bool = False) -> int:
    """Write to ``dst`` (default: ``src`` itself) the lines of the JSON-lines file ``src`` whose
    object ``keep`` accepts, byte for byte; a line ``keep`` raises on is dropped, and so is one
    that does not parse (with ``stop_at_bad``, it and every line after it: a line cut by a crash).
    How a resumed or forked run cuts its records after a step. Returns the lines kept."""
    src = Path(src)
    read = JsonLinesReader(src).read()
    first_bad = min((s.offset for s in read.skipped), default=None) if stop_at_bad else None
    kept = []
    with src.open("rb") as f:  # the kept lines' bytes only, not the whole file a second time
        for row in read.rows:
            if first_bad is not None and row.offset > first_bad:
                break
            try:
                if not keep(row.value):
                    continue
            except (ValueError, KeyError, TypeError):
                continue
            f.seek(row.offset)
            kept.append(f.read(row.length))
    Path(dst if dst is not None else src).write_bytes(b"".join(kept))
    return len(kept)


def iter_rollouts(path: str | Path) -> Iterator[RolloutRecord]:
    """The records of a ``rollouts.jsonl`` file, in order, read with
    :class:`tinker_core.run_files.JsonLinesReader`. A last line cut short (the run is writing it)
    is skipped; a blank line is skipped; a line that is not a record raises ``ValueError`` naming
    the file and the line."""
    p = Path(path)
    read = JsonLinesReader(p).read()
    first_bad = min(read.skipped, key=lambda s: s.number, default=None)
    for row in read.rows:
        if first_bad is not None and row.number > first_bad.number:
            break
        try:
            yield RolloutRecord.model_validate(row.value)
        except ValueError as e:
            raise ValueError(f"{p}:{row.number} is not a rollout record: {e}") from None
    if first_bad is not None:
        raise ValueError(f"{p}:{first_bad.number} is not a rollout record: {first_bad.why}")


def read_rollouts(path: str | Path) -> list[RolloutRecord]:
    """Every record of a ``rollouts.jsonl`` file (or of ``RUN_DIR/rollouts.jsonl`` for a directory);
    an empty list when there is none."""
    p = Path(path)
    if p.is_dir():
        p = p / ROLLOUTS_FILE
    if not p.is_file():
        return []
    return list(iter_rollouts(p))


def keep_until(path: str | Path, step: int) -> None:
    """Drop the records after ``step`` (a run resuming from the checkpoint of ``step`` writes them
    again); lines that do not parse are dropped too."""
    if Path(path).is_file():
        keep_lines(path, lambda row: int(row["step"]) <= step)


@dataclass(frozen=True)
class TraceRead:
    """What one :meth:`TraceReader.read` found: the new ``events`` (JSON objects; other values are
    left out), the ``offset`` read up to, and ``restarted`` as for :class:`LinesRead`."""

    events: list[dict[str, Any]] = field(default_factory=list)
    offset: int = 0
    restarted: bool = False


class TraceReader:
    """Reads the events appended to a trace-event JSON array since the last :meth:`read` (module
    docstring). When the rest cannot be read (it is no array, or an event is over
    :data:`MAX_LINE_BYTES` or nested too deeply), :attr:`problem` says why and reading stops;
    :meth:`pending` is the text not parsed yet (an event being written, or one that is no JSON)."""

    def __init__(self, path: str | Path, *, decoder: json.JSONDecoder = JSON) -> None:
        self.path = Path(path)
        self.decoder = decoder
        self._restart(None)

    def _restart(self, inode: int | None) -> None:
        self.offset, self._buffer, self._inode, self._started, self._consumed = 0, "", inode, False, 0
        self.problem = ""
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def pending(self) -> tuple[int, str]:
        """``(line, text)``: the text read but not parsed, and the line of the file it starts on."""
        return self._consumed + 1, self._buffer

    def read(self) -> TraceRead:
        """The events appended since the last call (see :class:`TraceRead`)."""
        try:
            st = self.path.stat()
        except OSError:
            restarted = self._inode is not None
            self._restart(None)
            return TraceRead(restarted=restarted)
        restarted = False
        if st.st_ino != self._inode or st.st_size < self.offset:
            restarted = self._inode is not None
            self._restart(st.st_ino)
        if st.st_size == self.offset or self.problem:
            return TraceRead([], self.offset, restarted)
        events: list[dict[str, Any]] = []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            while self.offset < st.st_size and not self.problem:  # in chunks: the buffer holds one event at most
                data = f.read(min(CHUNK_BYTES, st.st_size - self.offset))
                self.offset += len(data)
                self._buffer += self._text.decode(data)
                self._parse(events)
                if len(self._buffer) > MAX_LINE_BYTES:
                    self.problem = f"not trace-event JSON, or an event over {MAX_LINE_BYTES // 2**20} MiB; the rest is not read"
        return TraceRead(events, self.offset, restarted)

    def _parse(self, events: list[dict[str, Any]]) -> None:
        text, pos = self._buffer, 0
        while True:
            while pos < len(text) and (text[pos].isspace() or text[pos] == ","):
                pos += 1
            if not self._started:
                if pos < len(text) and text[pos] == "[":
                    self._started, pos = True, pos + 1
                    continue
                break
            if pos >= len(text) or text[pos] == "]":
                break
            try:
                event, end = self.decoder.raw_decode(text, pos)
            except ValueError:
                break  # the rest is still being written
            except RecursionError:
                self.problem = "it nests JSON too deeply to parse; the rest is not read"
                break
            pos = end
            if isinstance(event, dict):
                events.append(event)
        self._consumed += text.count("\n", 0, pos)
        self._buffer = text[pos:]

