"""Time to first step: from launching ``opentinker train CONFIG`` to its first completed step.

The command runs as a child process on a pseudo-terminal (on a terminal the run prints a
time-stamped status line for each phase before the first step; piped it prints only the bar).
The parent stamps, with its own ``time.perf_counter``, the moment each status line arrives and the
moment ``<run dir>/metrics.jsonl`` gets its first line (the first step's metrics, written when the
step ends), then stops the child. Phases, from the launch:

* start and CLI: the interpreter, ``opentinker``'s entry point, the typer app and its plugins,
  reading the config -- until "importing torch and transformers";
* imports: torch, transformers and the training modules -- until "loading model";
* model: building or loading the model -- until "model ... loaded";
* set-up: the stage's trainer, optimizer, env and algorithm -- until "first step of stage 0";
* first step: until the first metrics line (the step's own ``time/step_s`` is beside it; the rest
  is writing that line; the trackers, e.g. TensorBoard's writer, open during set-up); the second step's
  ``time/step_s`` is recorded too, so the first step's warm-up cost is their difference.

Beside the wall time, the child's CPU time (user + system, all its threads, from
``/proc/<pid>/stat``) at each phase end: on a shared machine the wall time grows with the load,
the CPU time much less, so the CPU seconds are the figure to compare across runs.

Cases: ``examples/arithmetic.yaml`` (the tiny preset; its first stage is SFT) and the same job with
its GRPO stage only (the first step samples). ``REPEATS`` launches each, interleaved; medians.
The load is recorded before and after each launch.

    uv run --no-sync python bench/bench_first_step.py [--quick]
"""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _common import BENCH_DIR, load_snapshot, parse_args, print_table, write_results

ROOT = BENCH_DIR.parent
EXAMPLE = ROOT / "examples" / "arithmetic.yaml"
REPEATS = 3
TIMEOUT_S = 300.0
MARKS = (  # (phase that ends, text of the status line that ends it)
    ("start and CLI", "importing torch and transformers"),
    ("imports", "loading model"),
    ("model", "loaded in"),
    ("set-up", "first step of stage 0"),
)
PHASES = (*(p for p, _ in MARKS), "first step")


def configs(tmp: Path) -> dict[str, Path]:
    job = yaml.safe_load(EXAMPLE.read_text())
    grpo = dict(job, name="arithmetic-grpo", stages=[s for s in job["stages"] if s["algorithm"]["name"] == "grpo"])
    out = {"arithmetic.yaml (SFT first)": EXAMPLE, "arithmetic.yaml, GRPO stage only": tmp / "grpo.yaml"}
    out["arithmetic.yaml, GRPO stage only"].write_text(yaml.safe_dump(grpo))
    return out


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` (all its threads) so far; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def launch(config: Path, run_dir: Path, threads: int | None) -> dict[str, Any]:
    """One ``opentinker train`` launch; the arrival time of each phase's end, from the launch."""
    exe = shutil.which("opentinker", path=str(Path(sys.executable).parent)) or "opentinker"
    env = dict(os.environ, COLUMNS="200", TERM="xterm")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    master, slave = pty.openpty()
    t0 = time.perf_counter()
    proc = subprocess.Popen([exe, "train", str(config), "--run-dir", str(run_dir)], stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, env=env, cwd=str(ROOT), close_fds=True)
    os.close(slave)
    metrics = run_dir / "metrics.jsonl"
    seen: dict[str, float] = {}
    cpu: dict[str, float | None] = {}
    text, first, rows = "", None, []
    try:
        while time.perf_counter() - t0 < TIMEOUT_S:
            ready, _, _ = select.select([master], [], [], 0.01)
            if ready:
                try:
                    chunk = os.read(master, 65536).decode(errors="replace")
                except OSError:
                    chunk = ""
                text += chunk
                now = time.perf_counter() - t0
                for phase, mark in MARKS:
                    if phase not in seen and mark in text:
                        seen[phase], cpu[phase] = now, cpu_seconds(proc.pid)
            if metrics.exists() and metrics.stat().st_size > 0:
                lines = [json.loads(x) for x in metrics.read_text().splitlines() if x.endswith("}")]
                if first is None and lines:
                    first = {"at_s": time.perf_counter() - t0, "cpu_s": cpu_seconds(proc.pid)}
                    cpu["first step"] = first["cpu_s"]
                if len(lines) >= 2:
                    rows = lines[:2]
                    break
            if proc.poll() is not None and not ready:
                break
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
    if first is None or not rows:
        raise RuntimeError(f"no first step from {config} within {TIMEOUT_S:.0f} s; output:\n{text[-3000:]}")
    ends = [seen.get(p) for p, _ in MARKS] + [first["at_s"]]
    phases, last = {}, 0.0
    for name, end in zip(PHASES, ends, strict=True):
        if end is None:
            phases[name] = None
            continue
        phases[name] = end - last
        last = end
    cpu_ends = [cpu.get(p) for p in PHASES]
    phases_cpu, last_cpu = {}, 0.0
    for name, end in zip(PHASES, cpu_ends, strict=True):
        phases_cpu[name] = None if end is None else end - last_cpu
        last_cpu = end if end is not None else last_cpu
    return {"total_s": first["at_s"], "total_cpu_s": first["cpu_s"], "phases_s": phases, "phases_cpu_s": phases_cpu,
            "ends_s": dict(zip(PHASES, ends, strict=True)), "first_step_time_s": rows[0].get("time/step_s"),
            "second_step_time_s": rows[1].get("time/step_s")}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    threads = args.threads[0] if "--threads" in " ".join(sys.argv) else None  # default: the command's own
    repeats = 1 if args.quick else REPEATS
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-first-step-") as tmp:
        cases = configs(Path(tmp))
        for r in range(repeats):
            for name, config in cases.items():
                before = load_snapshot()
                out = launch(config, Path(tmp) / f"run-{len(results.get(name, []))}-{abs(hash(name))}", threads)
                out.update(load_before=before, load_after=load_snapshot(), repeat=r)
                results.setdefault(name, []).append(out)
                print(f"{name}: first step at {out['total_s']:.2f} s, {out['total_cpu_s']:.2f} CPU s ("
                      + ", ".join(f"{p} {v:.2f}/{out['phases_cpu_s'][p] or 0:.2f}" for p, v in out["phases_s"].items() if v is not None)
                      + f"; steps {out['first_step_time_s']:.2f} then {out['second_step_time_s']:.2f} s), "
                      f"load {before['loadavg_1m']:.2f}", flush=True)
    rows, summary = [], {}
    for name, runs in results.items():
        def median(key: str, phase: str | None = None, runs: list[dict[str, Any]] = runs) -> float:
            vals = [x[key] if phase is None else x[key][phase] for x in runs]
            return statistics.median(v for v in vals if v is not None)

        summary[name] = {
            "total_s": median("total_s"), "total_cpu_s": median("total_cpu_s"),
            "phases_s": {p: median("phases_s", p) for p in PHASES}, "phases_cpu_s": {p: median("phases_cpu_s", p) for p in PHASES},
            "first_step_time_s": median("first_step_time_s"), "second_step_time_s": median("second_step_time_s"),
        }
        m = summary[name]
        loads = [x["load_before"]["loadavg_1m"] for x in runs] + [x["load_after"]["loadavg_1m"] for x in runs]
        for kind, key in (("wall", "phases_s"), ("CPU", "phases_cpu_s")):
            rows.append([name, kind, len(runs), *(m[key][p] for p in PHASES),
                         m["total_s" if kind == "wall" else "total_cpu_s"],
                         f"{m['first_step_time_s']:.2f} / {m['second_step_time_s']:.2f}", f"{min(loads):.2f}-{max(loads):.2f}"])
    print_table(
        "opentinker train: launch to the first completed step (median seconds)",
        ["config", "s", "runs", *PHASES, "total", "time/step_s 1st / 2nd", "load 1m"],
        rows,
    )
    write_results(args, "first_step", {"threads": threads, "repeats": repeats, "summary": summary, "runs": results})


if __name__ == "__main__":
    main()
