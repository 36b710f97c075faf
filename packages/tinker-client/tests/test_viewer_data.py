"""Reading run dirs while they are written: partial lines, replaced files, a trace without its
closing ``]``, and the phase table."""

from __future__ import annotations

import json
import os

import pytest
from viewer_runs import append_step, write_run

from tinker_client.viewer.data import JsonLines, RunDir, TraceEvents, is_run_dir, phase_summary


def test_a_partial_last_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2')
    lines = JsonLines(path)
    assert lines.refresh() and lines.items == [{"step": 1}]
    assert not lines.refresh()
    with path.open("a") as f:
        f.write(', "x": 1}\nnot json\n[1, 2]\n{"step": 3}\n')
    assert lines.refresh()
    assert lines.items == [{"step": 1}, {"step": 2, "x": 1}, {"step": 3}]  # bad and non-object lines skipped


def test_a_large_file_is_read_in_chunks_even_a_line_longer_than_one(tmp_path, monkeypatch):
    monkeypatch.setattr("tinker_core.run_files.CHUNK_BYTES", 64)
    rows = [{"step": i, "text": "x" * (300 if i == 3 else 5)} for i in range(20)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 20')
    lines = JsonLines(path, lambda obj, offset, length: (obj, offset, length))
    lines.refresh()
    assert [item[0] for item in lines.items] == rows
    raw = path.read_bytes()
    assert all(json.loads(raw[o:o + n]) == obj for obj, o, n in lines.items)  # where each line is
    assert lines.offset == raw.rindex(b"\n") + 1


def test_a_replaced_or_truncated_file_is_read_again(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n')
    lines = JsonLines(path)
    lines.refresh()
    generation = lines.generation
    path.write_text('{"step": 9}\n')  # shorter: a --fresh run started over
    assert lines.refresh() and lines.items == [{"step": 9}] and lines.generation > generation
    os.replace(path, tmp_path / "old")
    path.write_text('{"step": 7}\n{"step": 8}\n')  # another file under the same name
    assert lines.refresh() and [r["step"] for r in lines.items] == [7, 8]
    path.unlink()
    assert lines.refresh() and lines.items == []


@pytest.mark.parametrize("tail", ["", "\n", ",\n", ',\n{"name": "b", "ph": "X", "ts": 0, "du', "]", ",{}]\n"])
def test_a_trace_reads_without_its_closing_bracket_or_with_a_half_written_event(tmp_path, tail):
    path = tmp_path / "trace.json"
    event = {"name": "a", "cat": "phase", "ph": "X", "ts": 0, "dur": 1500, "pid": 1, "tid": 1, "args": {"stage": "s", "step": 1}}
    path.write_text("[" + json.dumps(event) + tail)
    trace = TraceEvents(path)
    trace.refresh()
    assert trace.events == [("a", 1500.0, "s", 1, {})]
    if tail.startswith(',\n{"name": "b"'):
        with path.open("a") as f:
            f.write('r": 500, "args": {"step": 2}}')
        assert trace.refresh() and trace.events[-1] == ("b", 500.0, None, 2, {})


def test_the_phase_table_gives_mean_percentiles_and_share_of_the_step():
    events = [("step", 1000.0, "s", i, {}) for i in range(4)]
    events += [("rollout", d, "s", i, {"peak_rss_gib": 1.0 + i}) for i, d in enumerate([500.0, 500.0, 700.0, 300.0])]
    events += [("optimizer", 100.0, "s", i, {}) for i in range(4)]
    table = phase_summary(events)
    rows = {r["name"]: r for r in table["phases"]}
    assert set(rows) == {"rollout", "optimizer"} and table["steps"] == 4
    assert rows["rollout"]["mean_ms"] == pytest.approx(0.5) and rows["rollout"]["share"] == pytest.approx(0.5)
    assert rows["rollout"]["p50_ms"] == pytest.approx(0.5) and rows["rollout"]["p95_ms"] == pytest.approx(0.67)  # interpolated (tinker_core.traces)
    assert rows["optimizer"]["share"] == pytest.approx(0.1)
    assert rows["rollout"]["peak_rss_gib"] == 4.0 and rows["optimizer"]["peak_rss_gib"] is None  # the largest peak; none where unmeasured
    assert table["phases"][0]["name"] == "rollout"  # the largest share first
    assert table["step_total_ms"] == pytest.approx(4.0)
    no_steps = {r["name"]: r["share"] for r in phase_summary(events[4:])["phases"]}
    assert no_steps == {"rollout": None, "optimizer": None}  # a share is of the step time: none without steps


def test_a_run_dir_indexes_episodes_and_reads_them_back(tmp_path):
    path = write_run(tmp_path / "run", steps=2)
    run = RunDir(path, "run")
    index = run.rollout_index()
    assert index["steps"] == {"train": [1, 2], "eval": [2]} and index["count"] == 2 * 12 + 3
    assert index["stop_reasons"] == ["length", "stop"]
    chosen = run.select(lambda r: r.step == 2 and r.group == 1 and r.kind == "train")
    records = [rec for _, rec in run.records(chosen)]
    assert [r["episode"] for r in records] == [0, 1, 2, 3] and all(r["group"] == 1 for r in records)
    append_step(path, 3)
    assert run.rollout_index()["steps"]["train"] == [1, 2, 3]
    assert run.summary()["last_step"] == 3 and run.summary()["status"] == "running"
    assert is_run_dir(path) and not is_run_dir(tmp_path) and not is_run_dir(tmp_path / "missing")
