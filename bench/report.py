"""Print the tables of docs/explanation/experiments/engine.md from bench/results/*.json (Markdown, to paste).

    uv run --no-sync python bench/report.py [--results DIR]

Not a benchmark (the nox session runs ``bench_*.py`` only): it reads what they wrote.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, fmt


def table(columns: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table; numeric columns right-aligned."""
    numeric = [bool(rows) and isinstance(rows[0][i], int | float) for i in range(len(columns))]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def conditions(doc: dict[str, Any]) -> str:
    m, a, b = doc["machine"], doc["load_at_start"], doc["load_at_end"]
    return (
        f"_{doc['date_utc']}, git {doc.get('git_revision')}, {m['nproc']} x {m['cpu_model']}, "
        f"torch {m.get('torch', '-')}; load average at start {a['loadavg_1m']:.2f}, "
        f"CPUs busy just before {100 * a['cpu_busy_1s']:.0f}%, at end {100 * b['cpu_busy_1s']:.0f}%._"
    )


def trainer(doc: dict[str, Any]) -> str:
    mm = [
        [int(t), m["n"], m.get("when", "-"), m["gflops"], m["median_s"] * 1e3]
        for t, p in doc["matmul_peak"].items() for m in p["matmul"]
    ]
    runs = [
        [
            r["model"], r["shape"]["params_total"], r["mode"], r["trainable_params"], r["threads"],
            r["step"]["median_s"] * 1e3, r["tokens_per_s"], r["achieved_gflops"],
            f"{100 * r['fraction_of_matmul']:.0f}%", r["step"].get("cpu_per_wall", float("nan")),
        ]
        for r in doc["runs"]
    ]
    return "\n\n".join([
        "fp32 `torch.matmul`, n x n (2n^3 FLOPs per call):",
        table(["threads", "n", "measured", "GFLOP/s", "ms per call"], mm),
        f"Training steps, batch {doc['batch']} x {doc['seq_len']} tokens, AdamW, fp32:",
        table(
            ["model", "params", "mode", "trainable", "threads", "step ms", "tokens/s", "GFLOP/s", "of matmul peak", "CPU/wall"],
            runs,
        ),
        conditions(doc),
    ])


def sampler(doc: dict[str, Any]) -> str:
    rows = [
        [
            r["model"], r["threads"], r["impl"], r["decoding"], r["call"]["median_s"] * 1e3,
            r["new_tokens_per_s"], r["call"].get("cpu_per_wall", float("nan")),
        ]
        for r in doc["runs"]
    ]
    same = sorted({(r["model"], r["greedy_identical"]) for r in doc["runs"]})
    note = "; ".join(f"{m}: {'identical' if s else 'different'}" for m, s in same)
    return "\n\n".join([
        f"Batch {doc['batch']}, {doc['max_new_tokens']} new tokens per row:",
        table(["model", "threads", "implementation", "decoding", "ms per call", "new tokens/s", "CPU/wall"], rows),
        f"Greedy `sample` vs greedy `generate` tokens: {note}.",
        conditions(doc),
    ])


def imports(doc: dict[str, Any]) -> str:
    rows = [
        [
            f"`{r['statement']}`" if r["statement"] != "pass" else "(interpreter only)", r["repeats"],
            r["import_s_median"], r["process_s_median"],
            ", ".join(m for m, on in r["loaded"].items() if on) or "-",
        ]
        for r in doc["results"]
    ]
    return "\n\n".join([
        table(["statement", "runs", "import s", "whole process s", "pulls in"], rows),
        conditions(doc),
    ])


def remote_env(doc: dict[str, Any]) -> str:
    rows = []
    for setup, kinds in doc["latency"].items():
        for kind, s in kinds.items():
            rows.append([setup, kind, s["calls"], s["median_ms"] * 1e3, s["p90_ms"] * 1e3, s["p99_ms"] * 1e3])
    return "\n\n".join([
        table(["setup", "call", "calls", "median µs", "p90 µs", "p99 µs"], rows),
        conditions(doc),
    ])


def training_service(doc: dict[str, Any]) -> str:
    rows = [
        [
            r["threads"], c["case"], c["call"]["median_s"] * 1e3, c["call"]["min_s"] * 1e3, c["call"]["max_s"] * 1e3,
            c["ratio_to_in_process"], c["paired_ratio_median"], c["overhead_ms"],
        ]
        for r in doc["runs"] for c in r["cases"]
    ]
    lora = doc["lora"]
    return "\n\n".join([
        f"`forward_backward`, `{doc['loss']}`, LoRA r={lora['rank']} on `{doc['model']}`, batch "
        f"{doc['batch']} x {doc['seq_len']} tokens ({doc['repeats']} interleaved repeats, median):",
        table(
            ["threads", "case", "ms per call", "min ms", "max ms", "x in-process", "paired ratio", "overhead ms"],
            rows,
        ),
        conditions(doc),
    ])


def shared_hosts(doc: dict[str, Any]) -> str:
    runs = doc["runs"]
    one = next(r["peak_rss_mib_total"] for r in runs if r["mode"] == "shared" and r["jobs"] == 1)
    rows = [
        [r["mode"], r["jobs"], r["processes"], r["peak_rss_mib_total"], r["peak_rss_mib_total"] / one, r["wall_s"]]
        for r in runs
    ]
    model = doc["model"]
    return "\n\n".join([
        f"Peak resident memory, LoRA r={doc['jobs']['lora_rank']} {doc['jobs']['algorithm']} jobs on a "
        f"{model['params'] / 1e6:.1f}M-parameter model ({model['dtype']}):",
        table(["mode", "jobs", "processes", "peak RSS MiB (sum)", "x one job", "wall s"], rows),
        conditions(doc),
    ])


def learning(doc: dict[str, Any]) -> str:
    """bench_learning.py's summary table (compare's numbers, written by the script itself)."""
    return "\n\n".join([doc["summary_table_md"].strip(), conditions(doc)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    ns = parser.parse_args()
    for name, render in (
        ("trainer", trainer), ("sampler", sampler), ("imports", imports), ("remote_env", remote_env),
        ("training_service", training_service), ("shared_hosts", shared_hosts), ("learning", learning),
    ):
        doc = load(ns.results, name)
        print(f"### {name}\n")
        print(render(doc) if doc else f"(no {name}.json in {ns.results})")
        print()


if __name__ == "__main__":
    main()
