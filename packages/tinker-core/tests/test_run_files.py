"""The one incremental reader per run file (tinker_core.run_files): offsets, partial last lines,
files that start over, and the whole-file readers built on them."""

from __future__ import annotations

import json
import math
import os

from tinker_core.run_files import JsonLinesReader, TraceReader, keep_lines, read_metrics
from tinker_core.traces import TraceWriter


def test_a_read_returns_the_new_rows_and_the_offset_the_next_one_starts_from(tmp_path):
    path = tmp_path / "metrics.jsonl"
    first = '{"step": 1}\n'
    path.write_text(first + '{"step": 2')  # the second line is being written
    reader = JsonLinesReader(path)
    read = reader.read()
    assert [r.value for r in read.rows] == [{"step": 1}] and read.offset == len(first) and not read.restarted
    assert (read.rows[0].offset, read.rows[0].length, read.rows[0].number) == (0, len(first), 1)
    assert reader.read().rows == [] and reader.read().offset == len(first)  # nothing new: the partial line waits
    with path.open("a") as f:
        f.write(', "x": 1}\nnot json\n[1]\n{"step": 3}\n')
    read = reader.read()
    assert [r.value for r in read.rows] == [{"step": 2, "x": 1}, {"step": 3}]
    assert [r.number for r in read.rows] == [2, 5] and [s.number for s in read.skipped] == [3, 4]
    assert read.offset == path.stat().st_size
    raw = path.read_bytes()
    assert all(json.loads(raw[r.offset:r.offset + r.length]) == r.value for r in read.rows)  # where each line is
    # a second reader started at the first one's offset sees the same rows after it
    later = JsonLinesReader(path, offset=len(first), line=2).read()
    assert [(r.value, r.number) for r in later.rows] == [(r.value, r.number) for r in read.rows]


def test_a_replaced_truncated_or_removed_file_starts_over(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n')
    reader = JsonLinesReader(path)
    reader.read()
    path.write_text('{"step": 9}\n')  # shorter: a --fresh run
    read = reader.read()
    assert read.restarted and [r.value["step"] for r in read.rows] == [9]
    os.replace(path, tmp_path / "old")
    path.write_text('{"step": 7}\n{"step": 8}\n')  # another file under that name
    read = reader.read()
    assert read.restarted and [r.value["step"] for r in read.rows] == [7, 8] and read.rows[0].number == 1
    path.unlink()
    read = reader.read()
    assert read.restarted and read.rows == [] and read.offset == 0


def test_read_metrics_stops_at_a_line_cut_by_a_crash_and_keeps_nan(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "x": NaN}\n{"step": 2}\n{"step": 3, "x"\n{"step": 4}\n{"step": 5')
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2] and math.isnan(rows[0]["x"])
    assert read_metrics(tmp_path / "missing") == []


def test_a_trace_is_followed_event_by_event_while_it_is_written(tmp_path):
    path = tmp_path / "trace.json"
    writer = TraceWriter(path, process_name="job", pid=1)
    writer.complete("step", 0, 10, {"step": 1})
    writer.flush()
    reader = TraceReader(path)
    assert [e["name"] for e in reader.read().events] == ["process_name", "thread_name", "step"]
    with path.open("a") as f:
        f.write('{"name": "sample", "ph": "X", "ts": 0, "du')  # half an event
    assert reader.read().events == []
    with path.open("a") as f:
        f.write('r": 5, "args": {}},\n')
    read = reader.read()
    assert [e["name"] for e in read.events] == ["sample"] and read.offset == path.stat().st_size and not reader.problem
    TraceWriter(path, process_name="again", pid=1, fresh=True).flush()  # a fresh run: shorter, read again
    read = reader.read()
    assert read.restarted and [e["args"]["name"] for e in read.events] == ["again"]


def test_keep_lines_keeps_the_chosen_lines_byte_for_byte(tmp_path):
    src = tmp_path / "metrics.jsonl"
    lines = ['{"step": 1, "x": 0.10000000000000001}\n', '{"step": 2}\n', 'cut by a crash\n', '{"step": 3}\n', '{"step": 1']
    src.write_text("".join(lines))
    assert keep_lines(src, lambda row: row["step"] <= 2, tmp_path / "copy", stop_at_bad=True) == 2
    assert (tmp_path / "copy").read_text() == lines[0] + lines[1]  # the numbers as written, not re-encoded
    assert keep_lines(src, lambda row: row["step"] != 2) == 2  # in place; the bad and the partial line dropped
    assert src.read_text() == lines[0] + lines[3]
