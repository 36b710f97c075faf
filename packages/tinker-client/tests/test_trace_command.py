"""``opentinker trace RUN_DIR``: the phase table of a run's trace, and its JSON."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tinker_client.cli import app
from tinker_core.traces import TraceWriter


def run_with_trace(tmp_path):
    w = TraceWriter(tmp_path / "trace.json", process_name="job on host")
    for k, ms in enumerate((100, 200, 300), 1):
        args = {"stage": "rl", "step": k}
        w.complete("step", k * 1e6, ms * 1000, args)
        w.complete("rollout", k * 1e6, ms * 600, args)
        w.complete("optim_step", k * 1e6 + ms * 600, ms * 100, args)
    w.complete("step", 9e6, 50_000, {"stage": "sft", "step": 0})
    w.flush()
    return tmp_path


def test_trace_prints_each_phase_with_its_percentiles_and_share(tmp_path):
    result = CliRunner().invoke(app, ["trace", str(run_with_trace(tmp_path)), "--stage", "rl"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]] for line in result.output.splitlines() if line.startswith("│")}
    assert rows["step"] == ["3", "200.0", "200.0", "290.0", "100.0%"]
    assert rows["rollout"] == ["3", "120.0", "120.0", "174.0", "60.0%"]
    assert rows["optim_step"] == ["3", "20.0", "20.0", "29.0", "10.0%"]
    assert list(rows) == ["step", "rollout", "optim_step"]  # step first, then by share
    assert "ui.perfetto.dev" in result.output


def test_trace_json_is_the_summary_as_machine_output(tmp_path):
    result = CliRunner().invoke(app, ["trace", str(run_with_trace(tmp_path) / "trace.json"), "--json"])
    assert result.exit_code == 0, result.output
    stats = {s["name"]: s for s in json.loads(result.output)}
    assert stats["step"]["count"] == 4 and stats["step"]["total_ms"] == 650.0
    assert set(stats["rollout"]) == {"name", "count", "total_ms", "mean_ms", "p50_ms", "p95_ms", "share", "peak_rss_gib", "peak_cuda_gib"}


def test_trace_of_a_run_without_one_exits_2_with_a_hint(tmp_path):
    result = CliRunner().invoke(app, ["trace", str(tmp_path)])
    assert result.exit_code == 2 and "no trace at" in result.output and "logging.trace" in result.output
    (tmp_path / "trace.json").write_text("not a trace")
    result = CliRunner().invoke(app, ["trace", str(tmp_path)])
    assert result.exit_code == 2 and "is not a trace" in result.output


def test_trace_of_deeply_nested_json_is_one_error_line(tmp_path):
    """Issue 43: 200,000-deep JSON gave a RecursionError traceback."""
    (tmp_path / "trace.json").write_text("[" * 200_000)
    result = CliRunner().invoke(app, ["trace", str(tmp_path)])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "nests JSON too deeply to parse" in result.output and "Traceback" not in result.output
