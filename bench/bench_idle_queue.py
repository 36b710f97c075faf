"""Idle cost of a long queue: the scheduler's CPU and memory while jobs wait and nothing changes.

A scheduler process whose only CPU a running blocker job holds (as in ``bench_load.py``); N jobs
with a config of S bytes are queued behind it; then the scheduler's CPU time over 10 s of
waiting is measured (the share of one core) with its resident memory. Cases: 0, 1,000 small
jobs, and 200 jobs of 1 MB configs (``--quick``: 0 and 100 small jobs).

    uv run --no-sync python bench/bench_idle_queue.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BenchArgs, parse_args, print_table, write_results  # noqa: E402
from bench_load import job_text, process_usage, start_scheduler  # noqa: E402

WINDOW_S = 10.0


def measure(args: BenchArgs, jobs: int, config_bytes: int) -> dict[str, float]:
    from tinker_scheduler.testing import JobStub

    with tempfile.TemporaryDirectory(prefix="ot-idle-") as tmp:
        scheduler, keys, blocker = start_scheduler(Path(tmp), 1)
        try:
            with JobStub(scheduler.address, keys[0]) as client:
                padding = "# " + "x" * max(config_bytes - 200, 0) + "\n"
                for i in range(jobs):
                    client.submit(padding + job_text(f"queued-{i}", steps=1, step_s=0.0), request_id=f"q{i}")
                time.sleep(3.0)  # let the loop see the queue once
                before = process_usage(scheduler.pid)
                time.sleep(WINDOW_S)
                after = process_usage(scheduler.pid)
                client.cancel(blocker, "bench over")
        finally:
            scheduler.cleanup()
    return {
        "jobs": jobs,
        "config_bytes": config_bytes,
        "core_share": (after["cpu_s"] - before["cpu_s"]) / WINDOW_S,
        "peak_rss_mb": after["peak_rss_mb"],
    }


def main(args: BenchArgs) -> None:
    cases = [(0, 0), (100, 0)] if args.quick else [(0, 0), (1000, 0), (200, 1_000_000)]
    results = [measure(args, n, size) for n, size in cases]
    print_table(
        f"scheduler while jobs wait ({WINDOW_S:g} s window)",
        ["queued", "config bytes", "CPU (share of a core)", "peak RSS MB"],
        [[r["jobs"], r["config_bytes"], r["core_share"], r["peak_rss_mb"]] for r in results],
    )
    write_results(args, "idle_queue", {"window_s": WINDOW_S, "cases": results}, with_torch=False)


if __name__ == "__main__":
    main(parse_args(__doc__.splitlines()[0]))
