"""The torch-free readers of a run's ``trace.json`` and ``rollouts.jsonl`` (tinker_core.traces,
tinker_core.run_files' read_rollouts): what they tolerate, what they compute."""

from __future__ import annotations

import json
import math

import pytest

from tinker_core.config import RolloutsLogConfig, parse_config
from tinker_core.episodes import RolloutRecord
from tinker_core.run_files import keep_until, read_rollouts
from tinker_core.traces import TraceWriter, percentile, read_trace, summarise


def write_steps(path, durations_ms, *, fresh=True):
    w = TraceWriter(path, process_name="job on host", fresh=fresh, pid=7)
    for k, d in enumerate(durations_ms, 1):
        w.complete("step", k * 1e6, d * 1000, {"stage": "rl", "step": k})
        w.complete("sample", k * 1e6, d * 500, {"stage": "rl", "step": k})
    w.flush()
    return w


def test_the_writer_leaves_the_array_open_and_a_resume_appends(tmp_path):
    path = tmp_path / "trace.json"
    write_steps(path, [10, 20])
    text = path.read_text()
    assert text.startswith("[\n") and text.endswith(",\n") and "]" not in text.splitlines()[-1][-1]
    events = read_trace(path)
    assert [e["ph"] for e in events] == ["M", "M", "X", "X", "X", "X"]
    assert events[0] == {"name": "process_name", "ph": "M", "pid": 7, "tid": 0, "args": {"name": "job on host"}}
    write_steps(path, [30], fresh=False)
    assert sum(e["name"] == "step" for e in read_trace(path)) == 3
    write_steps(path, [30], fresh=True)
    assert sum(e["name"] == "step" for e in read_trace(path)) == 1


def test_read_trace_tolerates_what_a_live_or_finished_trace_holds(tmp_path):
    ev = {"name": "step", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 1, "args": {}}
    line = json.dumps(ev)
    cases = {
        "closed": f"[\n{line},\n{line}\n]\n",
        "open": f"[\n{line},\n{line},\n",
        "cut": f"[\n{line},\n{line},\n{line[:10]}",
        "object": json.dumps({"traceEvents": [ev, ev], "displayTimeUnit": "ms"}),
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        assert read_trace(tmp_path / name) == [ev, ev], name
    (tmp_path / "bad").write_text("step,1,2\n")
    with pytest.raises(ValueError, match="is not a trace"):
        read_trace(tmp_path / "bad")
    (tmp_path / "middle").write_text(f"[\n{line},\n{{oops,\n{line},\n")
    with pytest.raises(ValueError, match="middle:3 is not a trace event"):
        read_trace(tmp_path / "middle")


def test_summarise_gives_each_phase_its_percentiles_and_share_of_the_step(tmp_path):
    write_steps(tmp_path / "trace.json", [10, 20, 30, 40])
    stats = {s.name: s for s in summarise(read_trace(tmp_path))}
    step, sample = stats["step"], stats["sample"]
    assert (step.count, step.total_ms, step.mean_ms, step.p50_ms, step.share) == (4, 100.0, 25.0, 25.0, 1.0)
    assert step.p95_ms == pytest.approx(38.5)  # linear interpolation between 30 and 40
    assert sample.share == pytest.approx(0.5) and sample.p50_ms == pytest.approx(12.5)
    assert [s.name for s in summarise(read_trace(tmp_path))][0] == "step"
    assert summarise(read_trace(tmp_path), stage="sft") == []
    assert math.isnan(percentile([], 50)) and percentile([3.0], 95) == 3.0


def record(step, **over):
    base = {
        "kind": "train", "stage": "rl", "step": step, "group": 0, "episode": 0, "prompt": "Say: ab\n",
        "messages": [{"role": "user", "content": "Say: ab\n"}, {"role": "assistant", "content": "ab"}],
        "turns": [{"role": "policy", "text": "ab", "tokens": 2, "token_texts": ["a", "b"], "logprobs": [-0.1, -0.2]}],
        "reward": 1.0, "advantage": 0.5, "stop_reason": "stop_string", "new_tokens": 2,
    }
    return RolloutRecord.model_validate({**base, **over})


def test_records_round_trip_and_a_line_being_written_is_skipped(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    recs = [record(1), record(2, kind="eval", advantage=None, extra_field="kept")]
    path.write_text("".join(r.to_json_line() for r in recs) + '{"v": 1, "kind": "tr')
    back = read_rollouts(tmp_path)
    assert back == recs and back[1].model_extra == {"extra_field": "kept"}
    assert json.loads(recs[0].to_json_line())["turns"][0]["tool_calls"] is None
    keep_until(path, 1)
    assert [r.step for r in read_rollouts(path)] == [1]
    assert read_rollouts(tmp_path / "none") == []
    path.write_text('{"v": 1}\n' + record(1).to_json_line())
    with pytest.raises(ValueError, match="rollouts.jsonl:1 is not a rollout record"):
        read_rollouts(path)


def test_logging_rollouts_is_typed_in_the_config():
    job = parse_config({"name": "j", "algorithm": {"name": "sft"}}, check_plugins=False)
    assert job.logging.rollouts == RolloutsLogConfig(every=1, per_step=16, keep="all") and job.logging.trace is True
    with pytest.raises(ValueError, match="keep"):
        parse_config({"name": "j", "algorithm": {"name": "sft"}, "logging": {"rollouts": {"keep": "best"}}}, check_plugins=False)


def test_a_deeply_nested_or_odd_trace_is_a_clean_error(tmp_path) -> None:
    """Issue 43: ``opentinker trace`` on 200,000-deep JSON printed a RecursionError traceback."""
    for name, text in (("array.json", "[" * 200_000), ("object.json", '{"traceEvents": ' + "[" * 200_000 + "]" * 200_000 + "}")):
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match="nests JSON too deeply to parse"):
            read_trace(tmp_path / name)
    (tmp_path / "odd.json").write_text('[1, "x", {"ph": "X", "dur": "slow", "name": "a", "args": []}, '
                                       '{"ph": "X", "dur": 1000, "name": "step", "args": ["not", "a", "dict"]}]')
    events = read_trace(tmp_path / "odd.json")
    assert len(events) == 2 and [s.name for s in summarise(events)] == ["step"]
    assert summarise(events, stage="x") == []
