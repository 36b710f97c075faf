"""What the two harnesses beside TRL share (``bench_vs_trl.py``, the tiny model, and
``bench_vs_trl_smollm2.py``, SmolLM2-135M-Instruct): presets, the interleaved run order, one run
per subprocess with the load around it (:func:`run_child`), a run's clock (:class:`Clock`), and
the aggregation of repeated runs into medians (with min and max), per-pair ratios and the load.

The aggregation is pure functions of the run records (dicts as the harnesses write them), so a
test checks it without running either trainer. A run record holds at least ``trainer``, ``threads``,
``seed``, ``repeat``, ``steps_per_s``, ``rollout_median_s``, ``update_median_s``,
``best_accuracy``, ``final_accuracy``, ``load_before`` and ``load_after`` (each a
``{"loadavg_1m": ...}`` dict), and optionally ``peak_rss_gib`` (the run's peak resident set).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from _common import load_snapshot

BASELINE = "trl"


@dataclass(frozen=True)
class Preset:
    """One named set of benchmark settings; every field can be overridden on the command line."""

    threads: str = "1,2"
    seeds: str = "0,1"
    repeats: int = 3
    steps: int = 200
    eval_every: int = 10
    eval_size: int = 500
    stop: str = "eos"  # "eos": no stop strings, eos only; "newline": stop at "\n" (TRL: "\n" as eos)
    sft_steps: int = 250
    staleness: str = "0"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, Preset] = {
    # issue 31: the settings it measured with (2 threads as torch's default, and 1), 200 steps,
    # 500 held-out problems every 10 steps, eos only, >= 3 interleaved repeats per configuration
    "issue31": Preset(),
    # issue 13's table: one run per side, 80 steps, 200 held-out problems every 5, stop at "\n"
    "issue13": Preset(threads="2", repeats=1, steps=80, eval_every=5, eval_size=200, stop="newline"),
    # a smoke run of the whole harness (numbers not for the docs)
    "quick": Preset(threads="1,2", seeds="0", repeats=2, steps=4, eval_every=2, eval_size=50, stop="eos", sft_steps=20),
}
DEFAULT_PRESET = "issue31"


def resolve_preset(name: str, overrides: dict[str, Any]) -> Preset:
    """The preset ``name`` with the non-None ``overrides`` applied; an unknown name is refused
    with the known ones."""
    if name not in PRESETS:
        raise SystemExit(f"--preset {name!r} is not a preset; choose one of {', '.join(sorted(PRESETS))}")
    preset = replace(PRESETS[name], **{k: v for k, v in overrides.items() if v is not None})
    if preset.stop not in ("eos", "newline"):
        raise SystemExit(f"--stop {preset.stop!r}: use 'eos' (no stop strings) or 'newline'")
    if preset.repeats < 1:
        raise SystemExit(f"--repeats {preset.repeats}: at least 1")
    return preset


def int_list(text: str) -> list[int]:
    """``"0,1"`` -> ``[0, 1]``."""
    return [int(x) for x in str(text).split(",") if x.strip()]


def sides(only: str | None, staleness: Sequence[int]) -> list[str]:
    """The trainers one configuration runs, in order: TRL, then OpenTinker at each staleness
    (``opentinker`` for 0, ``opentinker-staleness<k>`` above); ``only`` keeps one side."""
    trl = [BASELINE] if only in (None, BASELINE) else []
    ours = [("opentinker" if k == 0 else f"opentinker-staleness{k}") for k in staleness] if only in (None, "opentinker") else []
    return trl + ours


def staleness_of(trainer: str) -> int:
    """The ``rollout.max_staleness`` of an OpenTinker side's name (0 for ``opentinker``)."""
    return int(trainer.removeprefix("opentinker-staleness")) if trainer.startswith("opentinker-staleness") else 0


def run_order(threads: Sequence[int], seeds: Sequence[int], repeats: int, sides: Sequence[str]) -> list[dict[str, Any]]:
    """Every run of an invocation, in the order it runs: for each thread count and seed, the
    sides alternate repeat by repeat (A B A B ...), so drifting load hits both sides alike."""
    return [
        {"threads": t, "seed": s, "repeat": r, "trainer": side}
        for t in threads for s in seeds for r in range(repeats) for side in sides
    ]


def spread(values: Iterable[float | None]) -> dict[str, Any]:
    """Median, min, max and count of the values that are not None/NaN (all None when none is)."""
    xs = [float(v) for v in values if v is not None and v == v]
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


METRICS = ("steps_per_s", "samples_per_s", "rollout_median_s", "update_median_s", "best_accuracy", "final_accuracy", "start_accuracy",
           "peak_rss_gib")


def aggregate(runs: Sequence[dict[str, Any]], baseline: str = BASELINE) -> list[dict[str, Any]]:
    """One row per (threads, seed, trainer), in first-run order: the spread of each metric over
    the repeats, the per-pair steps/s ratio against ``baseline`` (each repeat's run divided by the
    baseline's run of the same threads, seed and repeat), and the 1-minute load before and after."""
    keys: list[tuple[int, int, str]] = []
    for r in runs:
        key = (r["threads"], r["seed"], r["trainer"])
        if key not in keys:
            keys.append(key)
    base = {(r["threads"], r["seed"], r["repeat"]): r for r in runs if r["trainer"] == baseline}
    rows = []
    for threads, seed, trainer in keys:
        mine = [r for r in runs if (r["threads"], r["seed"], r["trainer"]) == (threads, seed, trainer)]
        row: dict[str, Any] = {"threads": threads, "seed": seed, "trainer": trainer, "repeats": len(mine)}
        for m in METRICS:
            row[m] = spread(r.get(m) for r in mine)
        ratios = []
        for r in mine:
            b = base.get((threads, seed, r["repeat"]))
            ratios.append(r["steps_per_s"] / b["steps_per_s"] if b and b.get("steps_per_s") else None)
        row["ratios"] = ratios
        row["vs_baseline"] = spread(ratios)
        row["load_1m"] = spread([r["load_before"]["loadavg_1m"] for r in mine] + [r["load_after"]["loadavg_1m"] for r in mine])
        rows.append(row)
    return rows


def pooled(runs: Sequence[dict[str, Any]], baseline: str = BASELINE) -> list[dict[str, Any]]:
    """:func:`aggregate` over all seeds at once: one row per (threads, trainer), seed ``"all"``;
    a pair is still a run and the baseline run of the same threads, seed and repeat."""
    return aggregate([{**r, "seed": "all", "repeat": (r["seed"], r["repeat"])} for r in runs], baseline)


def _fmt(s: dict[str, Any], scale: float = 1.0, digits: int = 2, suffix: str = "") -> str:
    if s["median"] is None:
        return "-"
    if s["n"] == 1:
        return f"{s['median'] * scale:.{digits}f}{suffix}"
    return f"{s['median'] * scale:.{digits}f}{suffix} ({s['min'] * scale:.{digits}f}-{s['max'] * scale:.{digits}f})"


COLUMNS = ["threads", "seed", "trainer", "n", "steps/s", "vs TRL (per pair)", "rollout ms/step", "update ms/step",
           "best acc %", "final acc %", "peak RSS GiB", "load 1m"]


def markdown_rows(rows: Sequence[dict[str, Any]], sps_digits: int = 2) -> list[list[str]]:
    """The aggregate rows as table cells: ``median (min-max)`` for every spread; steps/s with
    ``sps_digits`` decimals (3 for a real model's fraction of a step a second)."""
    return [[
        str(r["threads"]), str(r["seed"]), r["trainer"], str(r["repeats"]),
        _fmt(r["steps_per_s"], digits=sps_digits),
        _fmt(r["vs_baseline"], suffix="x") if r["trainer"] != BASELINE else "1.00x",
        _fmt(r["rollout_median_s"], 1e3, 0), _fmt(r["update_median_s"], 1e3, 0),
        _fmt(r["best_accuracy"], 100, 1), _fmt(r["final_accuracy"], 100, 1),
        _fmt(r["peak_rss_gib"]), _fmt(r["load_1m"]),
    ] for r in rows]


def markdown(title: str, rows: Sequence[dict[str, Any]], sps_digits: int = 2) -> str:
    """A GitHub-flavoured markdown table of the aggregate rows under a ``title`` line."""
    cells = markdown_rows(rows, sps_digits)
    lines = [f"**{title}**", "", "| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(c) + " |" for c in cells]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# a run's timings
# ---------------------------------------------------------------------------------------------
GAINS = (10, 20)  # "time to +N points"


class Clock:
    """Step ends, evaluation time and rollout time per step; the figures of one run of
    ``episodes_per_step`` episodes a step."""

    def __init__(self, episodes_per_step: int) -> None:
        self.episodes_per_step = episodes_per_step
        self.t_start = time.perf_counter()
        self.ends: list[float] = []
        self.eval_s: list[float] = []  # evaluation time inside each step's interval
        self.pending = 0.0  # evaluation time since the last step end
        self.rollout_s: list[float] = []
        self.curve: list[tuple[int, float, float]] = []  # (step, 0, accuracy)

    def add_eval(self, seconds: float) -> None:
        self.pending += seconds

    def step_end(self) -> None:
        self.ends.append(time.perf_counter())
        self.eval_s.append(self.pending)
        self.pending = 0.0

    def step_times(self) -> list[float]:
        starts = [self.t_start, *self.ends[:-1]]
        return [e - s - ev for s, e, ev in zip(starts, self.ends, self.eval_s, strict=True)]

    def summary(self, acc0: float) -> dict[str, Any]:
        times = self.step_times()
        steady = times[1:-1] if len(times) > 2 else times
        mean = statistics.fmean(steady)
        roll = self.rollout_s[1:-1] if len(self.rollout_s) > 2 else self.rollout_s
        rollout = statistics.fmean(roll) if roll else float("nan")
        # per step: the median step, rollout and update (= step - rollout) over steps 2..N-1
        updates = [t - r for t, r in zip(steady, roll, strict=True)] if len(roll) == len(steady) else []
        trained = [sum(times[: s]) for s in range(len(times) + 1)]
        curve = [(0, 0.0, acc0)] + [(s, trained[s], a) for s, _, a in self.curve]
        out: dict[str, Any] = {
            "steps": len(times),
            "step_s": [round(t, 4) for t in times],
            "rollout_s": [round(t, 4) for t in self.rollout_s],
            "steps_per_s": 1.0 / mean,
            "samples_per_s": self.episodes_per_step / mean,
            "step_mean_s": mean,
            "step_median_s": statistics.median(steady),
            "rollout_mean_s": rollout,
            "update_mean_s": mean - rollout,
            "rollout_median_s": statistics.median(roll) if roll else None,
            "update_median_s": statistics.median(updates) if updates else None,
            "curve": [{"step": s, "train_s": round(t, 3), "accuracy": a} for s, t, a in curve],
            "start_accuracy": acc0,
            "final_accuracy": curve[-1][2],
            "best_accuracy": max(a for _, _, a in curve),
        }
        for gain in GAINS:
            hit = next(((s, t) for s, t, a in curve if a >= acc0 + gain / 100 - 1e-9), None)
            out[f"plus{gain}_step"] = hit[0] if hit else None
            out[f"plus{gain}_train_s"] = hit[1] if hit else None
        return out


def run_child(script: Path, spec: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """``spec`` run by ``script --child SPEC OUT`` in a fresh subprocess (``OMP_NUM_THREADS`` and
    ``MKL_NUM_THREADS`` set to ``spec["threads"]``); its record with the wall time and the load
    before and after it."""
    spec_path = tmp / f"spec-{spec['index']}.json"
    out_path = tmp / f"run-{spec['index']}.json"
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"]), "MKL_NUM_THREADS": str(spec["threads"])}
    before = load_snapshot()
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(script), "--child", str(spec_path), str(out_path)], check=True, env=env)
    r = json.loads(out_path.read_text())
    r.update(trainer=spec["trainer"], seed=spec["seed"], threads=spec["threads"], repeat=spec["repeat"],
             wall_s=time.perf_counter() - t0, load_before=before, load_after=load_snapshot())
    return r


def trl_fixed(seed: int) -> dict[str, Any]:
    """The ``GRPOConfig`` settings every harness gives TRL whatever its task: one update per batch
    with no KL term (``beta=0``), group-scaled advantages and the token-mean clipped loss
    (``dapo``), fp32 on the CPU without gradient checkpointing, no sampling cut-off by top-k, the
    seed for both the model and the data order, and nothing written or shown but the step logs."""
    return {
        "gradient_accumulation_steps": 1, "top_k": 0, "beta": 0.0, "num_iterations": 1, "loss_type": "dapo",
        "scale_rewards": "group", "gradient_checkpointing": False, "use_cpu": True, "bf16": False, "fp16": False,
        "seed": seed, "data_seed": seed, "logging_steps": 1, "save_strategy": "no", "report_to": "none",
        "disable_tqdm": True, "dataloader_num_workers": 0, "log_completions": False,
    }
