"""The arithmetic of ``bench_vs_trl.py``'s report: presets, the interleaved run order, and the
aggregation of repeated runs into medians (with min and max), per-pair ratios and the load.

Pure functions of the run records (dicts as ``bench_vs_trl.py`` writes them), so a test checks
them without running either trainer. A run record holds at least ``trainer``, ``threads``,
``seed``, ``repeat``, ``steps_per_s``, ``rollout_median_s``, ``update_median_s``,
``best_accuracy``, ``final_accuracy``, ``load_before`` and ``load_after`` (each a
``{"loadavg_1m": ...}`` dict).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

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


METRICS = ("steps_per_s", "samples_per_s", "rollout_median_s", "update_median_s", "best_accuracy", "final_accuracy", "start_accuracy")


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


def _fmt(s: dict[str, Any], scale: float = 1.0, digits: int = 2, suffix: str = "") -> str:
    if s["median"] is None:
        return "-"
    if s["n"] == 1:
        return f"{s['median'] * scale:.{digits}f}{suffix}"
    return f"{s['median'] * scale:.{digits}f}{suffix} ({s['min'] * scale:.{digits}f}-{s['max'] * scale:.{digits}f})"


COLUMNS = ["threads", "seed", "trainer", "n", "steps/s", "vs TRL (per pair)", "rollout ms/step", "update ms/step",
           "best acc %", "final acc %", "load 1m"]


def markdown_rows(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The aggregate rows as table cells: ``median (min-max)`` for every spread."""
    return [[
        str(r["threads"]), str(r["seed"]), r["trainer"], str(r["repeats"]),
        _fmt(r["steps_per_s"]),
        _fmt(r["vs_baseline"], suffix="x") if r["trainer"] != BASELINE else "1.00x",
        _fmt(r["rollout_median_s"], 1e3, 0), _fmt(r["update_median_s"], 1e3, 0),
        _fmt(r["best_accuracy"], 100, 1), _fmt(r["final_accuracy"], 100, 1),
        _fmt(r["load_1m"]),
    ] for r in rows]


def markdown(title: str, rows: Sequence[dict[str, Any]]) -> str:
    """A GitHub-flavoured markdown table of the aggregate rows under a ``title`` line."""
    cells = markdown_rows(rows)
    lines = [f"**{title}**", "", "| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(c) + " |" for c in cells]
    return "\n".join(lines) + "\n"
