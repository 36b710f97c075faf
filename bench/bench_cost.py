"""How the cost of a GRPO step grows: with group size, prompts per step, new tokens and model width.

Each configuration runs in its own child process (so peak memory does not accumulate across
configurations): ``tinker_algos.train`` runs a GRPO job of ``1 + REPEATS`` steps (the first is a
warm-up and is not reported) on ``bench/cost-v0``, an env registered here whose prompts look like
``math/arithmetic-v0``'s (``"37+45="``) and whose reward is a hash of the answer, a number in
[0, 1) that differs between the samples of a group, so no group is tied and every row takes the
gradient pass (a real task's untrained model gets reward 0 everywhere, and tied groups skip it).
No stop strings (the end-of-sequence token still stops a row; the new tokens are counted, not
assumed). Full fine-tuning, AdamW, fp32, no KL, plain text prompts (no chat template).

Per step, by wrapping the functions the step calls (as ``bench_step_real.py`` does): sampling
(``tinker_algos.sampling.sampler.sample`` as the rollout calls it), update (``Trainer.forward_backward`` +
``Trainer.optim_step``), other no-grad passes (``Trainer.forward``), and the rest (env calls,
bookkeeping, advantages); the step's wall time is ``GRPO.step``'s (evaluation and checkpoints
are outside it).

FLOPs, estimated from the parameter count ``N`` (all parameters, the tied embedding counted once:
it is the output head's matmul) and the tokens each phase processes:

* update: ``6 N x`` the real (unpadded) tokens of the trained batch (forward + backward);
* sampling: ``2 N x`` (new tokens + prompt tokens / group size; each distinct prompt is prefilled once);
* other forward-only passes: ``2 N x`` their real tokens.

Attention's own FLOPs are left out (under 3% at these lengths). The machine's rate is fp32
``torch.matmul`` of two 2048 x 2048 matrices (``2 n^3`` FLOPs) at the same thread count, measured
in this process before and after the grid; "of matmul" is the step's estimated FLOP/s over the
best of those. On a shared machine the wall-clock rates fall with the load, so the same ratio is
also given per CPU second ("of matmul (CPU)": FLOPs over the step's CPU time, against the matmul's
FLOPs over its CPU time), which the load changes much less. Peak memory is the child's ``ru_maxrss`` (the whole process: Python, torch and
transformers take about 0.6 GiB before any model exists; that baseline is reported too).

Grid (one axis at a time around the base ``tiny``, 8 prompts x group 8, 16 new tokens): group
size 4, 8, 16; prompts per step 4, 8, 16, 32; new tokens 8, 16, 32, 64; model ``tiny`` (1.0M),
``mid-256`` (4.0M), ``mid-512`` (15.8M), ``smollm2-135m-instruct`` (134.5M, the cached preset).

    uv run --no-sync python bench/bench_cost.py --threads 1 [--quick]
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from _common import (
    BENCH_DIR,
    MID_CONFIGS,
    PhaseTimer,
    build_variant,
    load_snapshot,
    matmul_flops,
    parse_args,
    print_table,
    set_threads,
    write_results,
)

BASE = {"model": "tiny", "prompts": 8, "group": 8, "new_tokens": 16}
AXES: dict[str, list[Any]] = {
    "group": [4, 8, 16],
    "prompts": [4, 8, 16, 32],
    "new_tokens": [8, 16, 32, 64],
    "model": ["tiny", "mid-256", "mid-512", "smollm2-135m-instruct"],
}
QUICK_AXES: dict[str, list[Any]] = {"group": [4, 8], "prompts": [8], "new_tokens": [16], "model": ["tiny"]}
REPEATS = 2
IMAGE = BENCH_DIR.parent / "docs" / "images" / "grpo-step-cost.png"


def grid(axes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every configuration of the one-axis-at-a-time grid, the base once."""
    configs: list[dict[str, Any]] = []
    for axis, values in axes.items():
        for v in values:
            cfg = {**BASE, axis: v}
            if cfg not in configs:
                configs.append(cfg)
    return configs


# ---------------------------------------------------------------------------------------------
# the child: one configuration
# ---------------------------------------------------------------------------------------------
def _cost_env_plugin() -> Any:
    from tinker_core import EnvSpec, TextEnv, hookimpl

    class CostEnv(TextEnv):
        """``"37+45="``-style prompts; the reward is a hash of the answer in [0, 1)."""

        env_spec = EnvSpec(id="bench/cost-v0", description="sums as prompts, a hash as the reward", max_turns=1)

        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
            super().reset(seed=seed)
            s = 0 if seed is None else int(seed)
            return f"{10 + s * 37 % 90}+{10 + s * 53 % 90}=", {}

        def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
            return "", zlib.crc32(action.encode()) / 2**32, True, False, {}

    class Plugin:
        @hookimpl
        def opentinker_register_envs(self, register: Any) -> None:
            register(CostEnv.env_spec, CostEnv)

    return Plugin()


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(spec["threads"])
    import tinker_algos.rollout.episodes as rollout_mod
    import tinker_core.registry
    from tinker_algos import train
    from tinker_algos.algorithms.grpo import GRPO
    from tinker_algos.training.trainer import Trainer

    rss_imports_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tinker_core.registry.register_plugin(_cost_env_plugin(), name="bench-cost")
    timer = PhaseTimer("sample", "forward", "update")
    spent, timed = timer.spent, timer.wrap
    count = {"new": 0, "fb_real": 0, "fb_padded": 0, "fb_prompt": 0, "fwd_real": 0}
    info: dict[str, Any] = {}

    def count_new(a: Any, k: Any, out: Any) -> None:
        for group in out:
            for s in group if isinstance(group, list | tuple) else [group]:
                count["new"] += len(s.tokens)

    def count_batch(kind: str) -> Any:
        def counter(a: Any, k: Any, out: Any) -> None:
            trainer, batch = a[0], a[1]
            if "params" not in info:
                info["params"] = sum(p.numel() for p in trainer.policy.model.parameters())
            real = int(batch.attention_mask_B_T.sum())
            count[f"{kind}_real"] += real
            if kind == "fb":
                count["fb_padded"] += int(batch.tokens_B_T.size)
                count["fb_prompt"] += real - int((batch.loss_mask_B_T * batch.attention_mask_B_T).sum())

        return counter

    rollout_mod.sample = timed("sample", rollout_mod.sample, counter=count_new)
    Trainer.forward = timed("forward", Trainer.forward, "trainer", count_batch("fwd"))
    Trainer.forward_backward = timed("update", Trainer.forward_backward, "trainer", count_batch("fb"))
    Trainer.optim_step = timed("update", Trainer.optim_step, "trainer")

    mm = matmul_flops(1024, repeats=3, warmup=1)  # this process's rate just before its steps
    steps: list[dict[str, Any]] = []
    real_step = GRPO.step

    def grpo_step(self: Any, step: int) -> dict[str, float]:
        # what the step itself spent (the last step's evaluation comes after it and is left out)
        for key in spent:
            spent[key] = 0.0
        for key in count:
            count[key] = 0
        t0, c0 = time.perf_counter(), time.process_time()
        metrics = real_step(self, step)
        steps.append({"step": step, "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, **{f"{k}_s": v for k, v in spent.items()}, **count})
        return metrics

    GRPO.step = grpo_step
    with tempfile.TemporaryDirectory(prefix="bench-cost-") as tmp:
        name = spec["model"]
        model = str(build_variant(Path(tmp) / name, **MID_CONFIGS[name])) if name in MID_CONFIGS else name
        job = {
            "name": "bench-cost",
            "seed": 0,
            "model": {"name": model, "device": "cpu", "dtype": "float32", "chat_template": "none"},
            "env": {"id": "bench/cost-v0"},
            "algorithm": {"name": "grpo", "steps": 1 + spec["repeats"], "estimator": "grpo", "loss": "ppo",
                          "eval_every": 0, "eval_size": 1},
            "optimizer": {"name": "adamw", "lr": 1e-5, "schedule": "constant"},
            "rollout": {"prompts_per_step": spec["prompts"], "group_size": spec["group"],
                        "max_new_tokens": spec["new_tokens"], "temperature": 1.0, "stop": []},
            "checkpoint": {"every": 0, "keep": 1},
            "logging": {"every": 1, "jsonl": False, "tensorboard": False, "plot": False},
        }
        result = train(job, run_dir=Path(tmp) / "run")
    if result.status != "completed":
        raise RuntimeError(f"the run ended {result.status!r}")
    return {
        "params": info["params"],
        "threads": torch.get_num_threads(),
        "matmul_1024_gflops": mm["gflops"],
        "rss_after_imports_mib": rss_imports_mib,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "steps": steps[1:],  # the first step warms up
    }


# ---------------------------------------------------------------------------------------------
# the parent
# ---------------------------------------------------------------------------------------------
def summarise(cfg: dict[str, Any], data: dict[str, Any], peak_gflops: float, peak_cpu_gflops: float) -> dict[str, Any]:
    """A configuration's means over its measured steps; ``peak_*``: the matmul rate per wall and per CPU second."""
    steps, n = data["steps"], data["params"]

    def mean(key: str) -> float:
        return sum(s[key] for s in steps) / len(steps)

    wall, cpu, group = mean("wall_s"), mean("cpu_s"), cfg["group"]
    flops = {
        "update": 6 * n * mean("fb_real"),
        "sampling": 2 * n * (mean("new") + mean("fb_prompt") / group),
        "forward": 2 * n * mean("fwd_real"),
    }
    total = sum(flops.values())
    return {
        **cfg,
        "params": n,
        "rows": cfg["prompts"] * group,
        "step_s": wall,
        "step_cpu_s": cpu,
        "sampling_s": mean("sample_s"),
        "update_s": mean("update_s"),
        "forward_s": mean("forward_s"),
        "other_s": wall - mean("sample_s") - mean("update_s") - mean("forward_s"),
        "new_tokens_per_row": mean("new") / (cfg["prompts"] * group),
        "trained_tokens": mean("fb_real"),
        "flops": flops,
        "gflops_per_s": total / wall / 1e9,
        "update_gflops_per_s": flops["update"] / mean("update_s") / 1e9 if mean("update_s") else None,
        "sampling_gflops_per_s": flops["sampling"] / mean("sample_s") / 1e9 if mean("sample_s") else None,
        "of_matmul": total / wall / 1e9 / peak_gflops,
        "gflops_per_cpu_s": total / cpu / 1e9,
        "of_matmul_cpu": total / cpu / 1e9 / peak_cpu_gflops,
        "update_of_matmul": flops["update"] / mean("update_s") / 1e9 / peak_gflops if mean("update_s") else None,
        "sampling_of_matmul": flops["sampling"] / mean("sample_s") / 1e9 / peak_gflops if mean("sample_s") else None,
        "peak_rss_mib": data["peak_rss_mib"],
        "rss_after_imports_mib": data["rss_after_imports_mib"],
        "child_matmul_1024_gflops": data["matmul_1024_gflops"],
        "raw_steps": steps,
    }


def run_config(cfg: dict[str, Any], threads: int, repeats: int) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.setdefault("OPENTINKER_CACHE", str(Path.home() / ".cache" / "opentinker"))
    spec = {**cfg, "threads": threads, "repeats": repeats}
    out = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"{cfg}: child failed\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def plot(rows: list[dict[str, Any]], image: Path = IMAGE) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    fig, grid_axes = plt.subplots(2, 4, figsize=(15, 6.5), sharex="col")
    labels = {"group": "group size", "prompts": "prompts per step", "new_tokens": "max new tokens", "model": "parameters (M)"}
    for col, axis in enumerate(AXES):
        ax, mem = grid_axes[0][col], grid_axes[1][col]
        pts = [r for r in rows if all(r[k] == BASE[k] for k in BASE if k != axis)]
        pts.sort(key=lambda r: r["params"] if axis == "model" else r[axis])
        xs = [r["params"] / 1e6 if axis == "model" else r[axis] for r in pts]
        ax.plot(xs, [r["step_s"] for r in pts], "o-", label="step")
        ax.plot(xs, [r["sampling_s"] for r in pts], "s--", label="sampling")
        ax.plot(xs, [r["update_s"] for r in pts], "^--", label="update")
        mem.plot(xs, [r["peak_rss_mib"] for r in pts], "o-", color="tab:purple")
        for a in (ax, mem):
            a.set_xscale("log", base=2 if axis != "model" else 10)
            a.xaxis.set_major_formatter(ScalarFormatter())
            a.grid(alpha=0.3, which="both")
        ax.set_yscale("log")
        mem.set_xlabel(labels[axis])
        for x, r in zip(xs, pts, strict=True):
            ax.annotate(f"{100 * r['of_matmul_cpu']:.0f}%", (x, r["step_s"]), textcoords="offset points", xytext=(0, 6),
                        fontsize=7, ha="center")
    grid_axes[0][0].set_ylabel("seconds per GRPO step")
    grid_axes[1][0].set_ylabel("peak RSS, MiB (whole process)")
    grid_axes[0][0].legend(fontsize=8)
    fig.suptitle("GRPO step time; labels: estimated FLOPs per CPU second as a share of fp32 matmul's; "
                 "base: tiny, 8 prompts x 8, 16 new tokens")
    fig.tight_layout()
    image.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(image, dpi=100)
    return image


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))), flush=True)
        return
    args = parse_args(__doc__.splitlines()[0])
    threads = set_threads(args.threads[0])
    configs = grid(QUICK_AXES if args.quick else AXES)
    repeats = 1 if args.quick else REPEATS
    n = 1024 if args.quick else 2048
    matmul = [{"when": "before", **matmul_flops(n, repeats=3)}]

    def peaks() -> tuple[float, float]:  # the matmul rate per wall second and per CPU second, best seen
        return (max(m["gflops"] for m in matmul), max(m["gflops"] / m["cpu_per_wall"] for m in matmul))

    runs = []
    for cfg in configs:
        before = load_snapshot()
        t0 = time.perf_counter()
        data = run_config(cfg, threads, 1 if cfg["model"].startswith("smollm2") else repeats)
        extra = {"load_before": before, "load_after": load_snapshot(), "child_wall_s": time.perf_counter() - t0}
        runs.append((cfg, data, extra))
        row = summarise(cfg, data, *peaks())
        print(f"{cfg}: {row['step_s']:.2f} s/step (sampling {row['sampling_s']:.2f}, update {row['update_s']:.2f}), "
              f"{row['gflops_per_s']:.1f} GFLOP/s, {row['gflops_per_cpu_s']:.1f} GFLOP per CPU s, "
              f"peak {row['peak_rss_mib']:.0f} MiB, load {before['loadavg_1m']:.2f}->{extra['load_after']['loadavg_1m']:.2f}",
              flush=True)
    matmul.append({"when": "after", **matmul_flops(n, repeats=3)})
    peak, peak_cpu = peaks()
    rows = [summarise(cfg, data, peak, peak_cpu) | extra for cfg, data, extra in runs]
    print_table(
        f"GRPO step cost, {threads} thread(s); fp32 matmul n={n}: {peak:.1f} GFLOP/s per wall s, "
        f"{peak_cpu:.1f} per CPU s (best of before/after)",
        ["model", "params", "prompts", "group", "new tok", "tok/row", "step s", "CPU s", "sampling s", "update s", "other s",
         "GFLOP/s", "of matmul", "of matmul (CPU)", "peak MiB", "load before/after"],
        [[r["model"], r["params"], r["prompts"], r["group"], r["new_tokens"], r["new_tokens_per_row"], r["step_s"],
          r["step_cpu_s"], r["sampling_s"], r["update_s"], r["other_s"] + r["forward_s"], r["gflops_per_s"],
          f"{100 * r['of_matmul']:.0f}%", f"{100 * r['of_matmul_cpu']:.0f}%", r["peak_rss_mib"],
          f"{r['load_before']['loadavg_1m']:.2f}/{r['load_after']['loadavg_1m']:.2f}"] for r in rows],
    )
    write_results(args, "cost", {"base": BASE, "axes": QUICK_AXES if args.quick else AXES, "threads": threads,
                                 "matmul": matmul, "matmul_peak_gflops": peak,
                                 "matmul_peak_gflops_per_cpu_s": peak_cpu, "configs": rows})
    if not args.quick:
        print(plot(rows))


if __name__ == "__main__":
    main()
