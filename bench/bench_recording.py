"""What recording costs: rollout records and the per-phase trace on the tiny model's GRPO step.

The job: the ``tiny`` preset on ``math/arithmetic-v0`` (2 digits), GRPO with 32 prompts x group 8,
at most 4 new tokens, temperature 1, stop at ``"\\n"`` (the step of "GRPO beside TRL"), 2 torch
threads. Two settings: recording at its default (``logging.rollouts: {every: 1, per_step: 16,
keep: all}``, ``logging.trace: true``) and off (``per_step: 0``, ``trace: false``). Runs of the two
alternate (the order flips every repeat), each a fresh ``train()`` of ``--steps`` steps; a step's
time is the wall time between consecutive step reports (``on_metrics``), so it includes writing
the records and the trace; steps 2..N-1 count (the first warms up, the last evaluates and
checkpoints). The overhead is the ratio of the medians, minus 1. The machine's load is recorded
before and after: on a shared machine the spread of the repeats says how far to trust it.

A measure that load disturbs far less: in the runs with recording on, the time the ``record``
phase took (choosing the episodes, decoding their tokens one by one, writing the lines) as a
share of the same steps' time, from the run's own ``trace.json`` -- numerator and denominator
come from the same steps, so another process slowing both cancels out. The trace's own cost is
measured as the time of one ``phase()`` block (an event buffered) times the events a step writes.

    uv run --no-sync python bench/bench_recording.py [--repeats 5] [--steps 6] [--quick]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_snapshot, parse_args, print_table, write_results  # noqa: E402


def job(recording: bool, steps: int) -> dict:
    logging = {"tensorboard": False, "plot": False}
    if not recording:
        logging.update(rollouts={"per_step": 0}, trace=False)
    return {
        "name": "recording-bench", "seed": 0, "model": {"name": "tiny", "threads": 2},
        "env": {"id": "math/arithmetic-v0"},
        "algorithm": {"name": "grpo", "steps": steps, "eval_size": 8, "loss": "ppo"},
        "rollout": {"prompts_per_step": 32, "group_size": 8, "max_new_tokens": 4, "temperature": 1.0, "stop": ["\n"]},
        "optimizer": {"lr": 5e-4},
        "logging": logging,
    }


class StepClock:
    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_metrics(self, step: int, metrics: dict) -> None:
        self.ends.append(time.perf_counter())


def main() -> None:
    import argparse

    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--repeats", type=int, default=5)
    extra.add_argument("--steps", type=int, default=6)
    ns, rest = extra.parse_known_args()
    args = parse_args(__doc__.splitlines()[0], rest)
    repeats, steps = (2, 4) if args.quick else (ns.repeats, ns.steps)
    from tinker_algos import train
    from tinker_core.traces import read_trace

    per_step: dict[str, list[float]] = {"on": [], "off": []}
    record_share: list[float] = []
    events_per_step: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                clock = StepClock()
                train(job(mode == "on", steps), run_dir=Path(tmp) / f"{mode}-{r}", callbacks=clock)
                gaps = [b - a for a, b in zip(clock.ends, clock.ends[1:], strict=False)]
                per_step[mode] += gaps[: steps - 2]  # steps 2..N-1
                print(f"repeat {r} {mode}: " + ", ".join(f"{g:.3f}" for g in gaps[: steps - 2]), flush=True)
                if mode == "on":
                    events = [e for e in read_trace(Path(tmp) / f"{mode}-{r}") if e.get("ph") == "X"]
                    mid = [e for e in events if 2 <= e["args"]["step"] < steps]
                    step_us = sum(e["dur"] for e in mid if e["name"] == "step")
                    record_share.append(sum(e["dur"] for e in mid if e["name"] == "record") / step_us)
                    events_per_step.append(len(mid) / (steps - 2))
        phase_us = _phase_cost_us(Path(tmp) / "phase-cost.json")
    trace_share = phase_us * statistics.median(events_per_step) / (statistics.median(per_step["on"]) * 1e6)
    med = {m: statistics.median(v) for m, v in per_step.items()}
    overhead = med["on"] / med["off"] - 1
    load_after = load_snapshot()
    print_table(
        "GRPO step of the tiny model, recording on (default) and off",
        ["setting", "median s/step", "min", "max", "steps"],
        [[m, med[m], min(per_step[m]), max(per_step[m]), len(per_step[m])] for m in ("on", "off")],
    )
    print(f"record phase: {100 * statistics.median(record_share):.2f}% of the step (median of {len(record_share)} runs); "
          f"trace events: {statistics.median(events_per_step):.0f} a step at {phase_us:.1f} us each = {100 * trace_share:.3f}%")
    print(f"overhead: {100 * overhead:+.1f}% (load before {args.load_at_start['loadavg_1m']:.1f}, after {load_after['loadavg_1m']:.1f})")
    write_results(args, "recording", {
        "steps": steps, "repeats": repeats, "seconds_per_step": per_step, "median_s": med, "overhead": overhead,
        "load_after": load_after, "record_share": record_share, "events_per_step": events_per_step,
        "phase_cost_us": phase_us, "trace_share": trace_share,
    })


def _phase_cost_us(path: Path, n: int = 20000) -> float:
    """Microseconds one ``phase()`` block costs with a recorder active (the event buffered, and
    written at the end of the step as the run does)."""
    from tinker_algos.records.recording import Recorder, phase
    from tinker_core.config import RolloutsLogConfig
    from tinker_core.traces import TraceWriter

    rec = Recorder(None, RolloutsLogConfig(per_step=0), TraceWriter(path, process_name="bench"))
    with rec.active("bench", 1):
        t0 = time.perf_counter()
        for _ in range(n):
            with phase("x"):
                pass
        seconds = time.perf_counter() - t0
    return seconds / n * 1e6


if __name__ == "__main__":
    main()
