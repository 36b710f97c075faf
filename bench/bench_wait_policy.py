"""OpenMP wait policy and threads on a shared machine: one SmolLM2 ``sample`` call per setting.

Each setting runs in a fresh child process (libgomp reads ``OMP_WAIT_POLICY`` when torch loads):
the model loads, one warm-up ``sample`` of 16 arithmetic prompts x 32 new tokens (the batch of
``bench_sampler_real.py``), then the median of 2 timed calls. Settings: 2 threads with libgomp's
default (``OMP_WAIT_POLICY`` empty: spin a while, then sleep), 2 threads with ``PASSIVE``, and 1
thread; each alone and beside 1 busy-loop process (a Python ``while True``). A child that does not
finish within ``TIMEOUT_S`` is reported as timed out. The load average is recorded per case.

    uv run --no-sync python bench/bench_wait_policy.py [--quick]
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from _common import load_snapshot, parse_args, print_table, write_results

TIMEOUT_S = 300
SETTINGS = ((2, ""), (2, "PASSIVE"), (1, ""))


def child(threads: int) -> dict[str, Any]:  # runs in the child process
    import torch
    from bench_sampler_real import chat_prompts, make_calls

    from tinker_algos.model.models import PolicyModel

    torch.set_num_threads(threads)
    policy = PolicyModel.load("smollm2-135m-instruct", device="cpu", precision="fp32")
    policy.module.eval()
    calls = make_calls(policy, chat_prompts(policy.tokenizer, 16))
    calls["sample"]()
    secs = []
    for _ in range(2):
        t0 = time.perf_counter()
        calls["sample"]()
        secs.append(time.perf_counter() - t0)
    return {"threads": torch.get_num_threads(), "sample_s": secs}


def _busy() -> None:  # pragma: no cover - a child process
    while True:
        pass


def run_case(threads: int, policy: str, busy: int) -> dict[str, Any]:
    env = dict(os.environ, OMP_WAIT_POLICY=policy, HF_HUB_DISABLE_PROGRESS_BARS="1")
    procs = [mp.Process(target=_busy, daemon=True) for _ in range(busy)]
    for p in procs:
        p.start()
    before = load_snapshot()
    try:
        out = subprocess.run([sys.executable, __file__, "--child", str(threads)], env=env,
                             capture_output=True, text=True, timeout=TIMEOUT_S)
        data = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"error": out.stderr[-500:]}
    except subprocess.TimeoutExpired:
        data = {"timed_out_s": TIMEOUT_S}
    finally:
        for p in procs:
            p.terminate()
            p.join()
    row = {"threads": threads, "omp_wait_policy": policy or "libgomp default", "busy_processes": busy,
           **data, "load_before": before, "load_after": load_snapshot()}
    row["median_s"] = statistics.median(data["sample_s"]) if "sample_s" in data else None
    return row


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(child(int(sys.argv[2]))), flush=True)
        return
    args = parse_args(__doc__.splitlines()[0])
    rows = []
    for busy in (0,) if args.quick else (0, 1):
        for threads, policy in SETTINGS:
            row = run_case(threads, policy, busy)
            print(f"busy={busy} threads={threads} {row['omp_wait_policy']}: {row['median_s']}", flush=True)
            rows.append(row)
    print_table(
        "SmolLM2 sample (16 x 32) by OpenMP wait policy and threads (median of 2, fresh process each)",
        ["busy", "threads", "OMP_WAIT_POLICY", "sample s", "loadavg before/after"],
        [[r["busy_processes"], r["threads"], r["omp_wait_policy"],
          r["median_s"] if r["median_s"] is not None else "timed out",
          f"{r['load_before']['loadavg_1m']:.2f}/{r['load_after']['loadavg_1m']:.2f}"] for r in rows],
    )
    write_results(args, "wait_policy", {"model": "smollm2-135m-instruct", "cases": rows})


if __name__ == "__main__":
    main()
