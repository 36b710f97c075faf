"""Resident memory of LoRA jobs on one shared model host vs one model copy per job.

A ~100M-parameter Llama (hidden 768, 16 layers, the tiny preset's shape otherwise) is built from
a config and saved locally. Four LoRA SFT jobs (rank 8, batch 8, the same base model, seeds 0-3)
go through a real :class:`tinker_scheduler.Scheduler` on a local Ray, twice:

* ``shared``: ``max_jobs_per_host=8`` -- the jobs run on one model host (one Ray actor, one
  copy of the base weights, one adapter and optimizer per job), taking turns step by step;
* ``separate``: ``max_jobs_per_host=0`` -- every job gets its own worker actor and model copy.

and once with a single job in each mode for the baseline. While the jobs run the script polls
every process that runs them (``/proc/<pid>/status``) and keeps its peak resident set
(``VmHWM``); a configuration's memory is the sum over its processes. Memory, not time, is the
point here; the wall times are reported for what they are.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import BenchArgs, build_variant, parse_args, print_table, write_results

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

#: ~100M parameters: the tiny preset's layout (GQA 3:1 here, tied embeddings) at GPT-2-small width
BIG = {"hidden_size": 768, "num_hidden_layers": 16, "num_attention_heads": 12, "num_key_value_heads": 4,
       "intermediate_size": 2048}
MIB = 1024 * 1024


def peak_rss_bytes(pid: int) -> int:
    """``VmHWM`` (peak resident set) of a live process, in bytes; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def job_config(i: int, model_dir: str, data: str, steps: int) -> dict[str, Any]:
    return {
        "name": f"mem-{i}",
        "seed": i,
        "model": {"name": model_dir, "device": "cpu", "dtype": "float32"},
        "lora": {"rank": 8, "alpha": 16},
        "algorithm": {"name": "sft", "steps": steps, "batch_size": 8, "data": data},
        "optimizer": {"name": "adamw", "lr": 1e-4},
        "checkpoint": {"every": 0, "keep": 1},
        "logging": {"tensorboard": False, "plot": False},
        "resources": {"cpus": 1},
    }


def run_configuration(root: Path, configs: list[dict[str, Any]], *, share: bool) -> dict[str, Any]:
    import ray

    from tinker_core.proto import jobs_pb2
    from tinker_scheduler import Scheduler
    from tinker_scheduler.testing import JobStub

    work = Path(tempfile.mkdtemp(dir=root))
    scheduler = Scheduler(
        port=0, db=work / "jobs.db", runs_dir=work / "runs", metrics_port=None, tick_s=0.05,
        max_jobs_per_host=8 if share else 0, host_idle_timeout_s=600, model_roots=[root],  # the model and data
    ).start()
    pids: dict[Any, int] = {}
    peaks: dict[int, int] = {}
    terminal = {jobs_pb2.JOB_STATE_SUCCEEDED, jobs_pb2.JOB_STATE_FAILED, jobs_pb2.JOB_STATE_CANCELLED}
    t0 = time.perf_counter()
    try:
        with JobStub(scheduler.address) as client:
            ids = [client.submit(json.dumps(c)).id for c in configs]
            while True:
                for run in list(scheduler._runs.values()):
                    key = run.host_key or run.job_id
                    if key not in pids:
                        try:
                            pids[key] = int(ray.get(run.actor.pid.remote(), timeout=10))
                        except Exception:  # noqa: BLE001 - the actor is still starting or already gone
                            continue
                for pid in set(pids.values()):
                    peaks[pid] = max(peaks.get(pid, 0), peak_rss_bytes(pid))
                states = [client.get(i) for i in ids]
                if all(s.state in terminal for s in states):
                    break
                time.sleep(0.1)
        failed = [(s.id, s.reason) for s in states if s.state != jobs_pb2.JOB_STATE_SUCCEEDED]
        if failed:
            raise RuntimeError(f"jobs failed: {failed}")
    finally:
        scheduler.stop()
    seconds = time.perf_counter() - t0
    per_process = sorted(peaks.values(), reverse=True)
    return {
        "jobs": len(configs),
        "mode": "shared" if share else "separate",
        "processes": len(per_process),
        "peak_rss_mib_per_process": [round(b / MIB, 1) for b in per_process],
        "peak_rss_mib_total": round(sum(per_process) / MIB, 1),
        "wall_s": round(seconds, 1),
    }


def main(args: BenchArgs) -> None:
    import ray
    import torch

    from tinker_algos.model.models import PolicyModel

    root = Path(tempfile.mkdtemp(prefix="otb-shared-"))
    overrides = dict(BIG)
    if args.quick:
        overrides.update(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=1024)
    model_dir = build_variant(root / "model", **overrides)
    params = sum(p.numel() for p in PolicyModel.load(str(model_dir), device="cpu", precision="fp32").model.parameters())
    data = root / "sft.jsonl"
    data.write_text("".join(
        json.dumps({"prompt": f"{a}+{b}=", "completion": f"{a + b}\n"}) + "\n" for a in range(10, 18) for b in range(20, 24)
    ))
    steps = 2 if args.quick else 4
    os.environ.setdefault("RAY_TMPDIR", "/tmp/otb-ray")
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, namespace="opentinker-bench")
    runs: list[dict[str, Any]] = []
    try:
        for share in (True, False):
            for n in (1, 4):
                configs = [job_config(i, str(model_dir), str(data), steps) for i in range(n)]
                result = run_configuration(root, configs, share=share)
                print(json.dumps(result), flush=True)
                runs.append(result)
    finally:
        ray.shutdown()
    by = {(r["mode"], r["jobs"]): r for r in runs}
    one = by[("shared", 1)]["peak_rss_mib_total"]
    rows = [
        [r["mode"], r["jobs"], r["processes"], r["peak_rss_mib_total"], r["peak_rss_mib_total"] / one, r["wall_s"]]
        for r in runs
    ]
    print_table(
        f"Peak resident memory, LoRA r=8 SFT jobs on a {params / 1e6:.1f}M-parameter model (fp32)",
        ["mode", "jobs", "processes", "peak RSS MiB (sum)", "x one job", "wall s"],
        rows,
    )
    ratio = by[("shared", 4)]["peak_rss_mib_total"] / one
    print(f"four jobs on one host: {ratio:.2f}x one job (target <= 1.5x); "
          f"four separate hosts: {by[('separate', 4)]['peak_rss_mib_total'] / one:.2f}x")
    write_results(args, "shared_hosts", {
        "model": {"params": params, **overrides, "dtype": "float32", "torch_threads": torch.get_num_threads()},
        "jobs": {"algorithm": "sft", "lora_rank": 8, "batch_size": 8, "steps": steps},
        "runs": runs,
        "four_on_one_host_vs_one_job": ratio,
    })


if __name__ == "__main__":
    main(parse_args(__doc__.splitlines()[0]))
