"""A GRPO step on SmolLM2-135M-Instruct, split into its phases, under torch thread settings.

Each case is a fresh child process (OpenMP reads ``OMP_WAIT_POLICY`` when torch loads) that runs
``tinker_algos.train`` on ``examples/smollm2-arithmetic.yaml`` shortened to ``STEPS`` GRPO steps of
4 prompts x 8 samples (LoRA r=16, 16 new tokens, temperature 0.7, through the chat template) and
times, per step, by wrapping the functions the step calls:

* sampling -- ``tinker_algos.sampling.sampler.sample`` as the rollout calls it;
* env and bookkeeping -- the rest of ``tinker_algos.rollout.rollout`` (rendering prompts, env
  ``reset``/``step``, trajectories);
* logprobs -- ``Trainer.forward`` (the no-grad passes: current and reference logprobs);
* update -- ``Trainer.forward_backward`` + ``Trainer.optim_step``;
* other -- the step's wall time minus those (advantages, metrics, logging).

The first step is a warm-up and the last holds the final evaluation: neither is reported. Cases: torch intra-op threads (1 and the core
count) x ``OMP_WAIT_POLICY`` (libgomp's spin-then-sleep default, and ``PASSIVE``, which importing
tinker_algos sets unless the variable is set) x 0
or 1 busy-loop processes beside (a Python ``while True``, standing for another job on the
machine). The machine's load average is recorded before and after each case.

    uv run --no-sync python bench/bench_step_real.py [--quick]

``--calculator`` times the multi-turn case instead: the GRPO stage of
``examples/smollm2-calculator.yaml`` (untrained: its episodes run all 3 turns) shortened to
``CALC_STEPS`` steps of 4 prompts x 8 at 2 threads (``--steps``, ``--prompts``, ``--group``,
``--threads`` change them), with ``rollout.reuse_kv_cache`` on and off (each turn prefills only
its new tokens, or the whole conversation), the runs interleaved (``--quick``: one run each, else
two), and reports the median sampling time and step time over the steps measured (the first of
each run left out; the final evaluation is left out of every phase).

    uv run --no-sync python bench/bench_step_real.py --calculator
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import BENCH_DIR, PhaseTimer, load_snapshot, parse_args, print_table, write_results

STEPS = 4
CALC_STEPS = 3
PHASES = ("sampling", "env", "logprobs", "update", "other")


def child(spec: dict[str, Any]) -> dict[str, Any]:  # runs in the child process
    import tempfile

    import torch
    import yaml

    torch.set_num_threads(spec["threads"])
    import tinker_algos.rollout.episodes as rollout_mod
    from tinker_algos import train
    from tinker_algos.training.trainer import Trainer

    timer = PhaseTimer("sample", "rollout", "forward", "update")
    spent, timed = timer.spent, timer.wrap
    rollout_mod.sample = timed("sample", rollout_mod.sample)
    rollout_mod.rollout = timed("rollout", rollout_mod.rollout)  # the algorithms import it when they call it
    rollout_mod.evaluate = _untimed(spent, rollout_mod.evaluate)  # the final evaluation is no step's time
    Trainer.forward = timed("forward", Trainer.forward, "trainer")
    Trainer.forward_backward = timed("update", Trainer.forward_backward, "trainer")
    Trainer.optim_step = timed("update", Trainer.optim_step, "trainer")
    if spec.get("path") == "rescore":
        _rescore_before_update()

    if spec.get("calculator"):  # the GRPO stage of the calculator recipe, from the untrained model
        cfg = yaml.safe_load((BENCH_DIR.parent / "examples" / "smollm2-calculator.yaml").read_text())
        cfg["stages"] = [s for s in cfg["stages"] if s["algorithm"]["name"] == "grpo"]
        cfg["stages"][0]["algorithm"].update(steps=spec["steps"], eval_every=0, eval_size=1)
        cfg["rollout"].update(
            prompts_per_step=spec["prompts"], group_size=spec["group"], max_turns=3, reuse_kv_cache=spec["reuse_kv_cache"]
        )
    else:
        cfg = yaml.safe_load((BENCH_DIR.parent / "examples" / "smollm2-arithmetic.yaml").read_text())
        cfg["stages"][0]["algorithm"].update(steps=STEPS, eval_every=0, eval_size=1)
        cfg["rollout"].update(prompts_per_step=4, group_size=8)
    cfg["checkpoint"] = {"every": 0}
    cfg["logging"] = {"tensorboard": False, "plot": False}
    steps: list[dict[str, float]] = []

    class Callbacks:
        def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
            wall = metrics["time/step_s"]
            row = {
                "step": step,
                "wall_s": wall,
                "sampling": spent["sample"],
                "env": spent["rollout"] - spent["sample"],
                "logprobs": spent["forward"],
                "update": spent["update"],
                "tokens": metrics.get("rollout/new_tokens", 0.0),
                "turns": metrics.get("env/turns_mean", 0.0),
            }
            row["other"] = wall - sum(row[p] for p in PHASES[:-1])
            steps.append(row)
            for k in spent:
                spent[k] = 0.0

    with tempfile.TemporaryDirectory() as tmp:
        result = train(cfg, run_dir=Path(tmp) / "run", callbacks=Callbacks())
    assert result.status == "completed", result
    # the first step warms up; the last also holds the final evaluation, which time/step_s leaves out
    # (the calculator mode leaves the evaluation out of the phases too, so it keeps the last step)
    return {"threads": torch.get_num_threads(), "steps": steps[1:] if spec.get("calculator") else steps[1:-1]}


def _untimed(spent: dict[str, float], fn: Any) -> Any:
    """``fn`` with the phase time it spends taken back out of ``spent``."""

    def wrapper(*a: Any, **k: Any) -> Any:
        saved = dict(spent)
        try:
            return fn(*a, **k)
        finally:
            spent.update(saved)

    return wrapper


def _rescore_before_update() -> None:
    """The path before the loss's pass scored at the sampling temperature: a no-grad ``forward``
    at that temperature re-scores the batch before every update (``--path rescore``)."""
    from tinker_algos.algorithms import update

    real = update.PolicyUpdate.behaviour

    def behaviour(self: Any, batch: Any, metrics: dict[str, float]) -> Any:
        out = real(self, batch, metrics)
        if out.logprobs_B_T is None:
            out.logprobs_B_T = self.ctx.trainer.forward(out.batch, temperature=self.ctx.rollout_cfg.temperature)
        return out

    update.PolicyUpdate.behaviour = behaviour  # type: ignore[method-assign]


def _busy() -> None:  # pragma: no cover - a child process
    while True:
        pass


def run_case(threads: int, policy: str | None, busy: int, path: str = "reuse", **extra: Any) -> dict[str, Any]:
    env = dict(os.environ)
    # empty: libgomp's own default (spin a while, then sleep); importing tinker_algos would set PASSIVE
    env["OMP_WAIT_POLICY"] = policy or ""
    procs = [mp.Process(target=_busy, daemon=True) for _ in range(busy)]
    for p in procs:
        p.start()
    before = load_snapshot()
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps({"threads": threads, "path": path, **extra})],
            env=env, capture_output=True, text=True, check=True,
        )
    finally:
        for p in procs:
            p.terminate()
            p.join()
    data = json.loads(out.stdout.strip().splitlines()[-1])
    steps = data["steps"]
    mean = {k: sum(s[k] for s in steps) / len(steps) for k in ("wall_s", "tokens", *PHASES)}
    return {"threads": threads, "omp_wait_policy": policy or "default", "busy_processes": busy, "path": path,
            "steps": steps, "mean": mean, "load_before": before, "load_after": load_snapshot()}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        print(json.dumps(child(json.loads(sys.argv[2]))), flush=True)
        return
    if "--calculator" in sys.argv[1:]:
        argv, sizes = [a for a in sys.argv[1:] if a != "--calculator"], {"steps": CALC_STEPS, "prompts": 4, "group": 8}
        for name in list(sizes):  # --steps N --prompts N --group N: a smaller case for a busy machine
            if f"--{name}" in argv:
                i = argv.index(f"--{name}")
                sizes[name] = int(argv[i + 1])
                del argv[i : i + 2]
        calculator(parse_args(__doc__.splitlines()[0], argv), sizes)
        return
    args = parse_args(__doc__.splitlines()[0])
    cores = os.cpu_count() or 1
    cases = [(cores, None), (cores, "PASSIVE"), (1, None)]
    rows = []
    for busy in (0,) if args.quick else (0, 1):
        for threads, policy in cases:
            row = run_case(threads, policy, busy)
            m = row["mean"]
            print(f"busy={busy} threads={threads} omp={row['omp_wait_policy']}: {m['wall_s']:.1f} s/step "
                  + ", ".join(f"{p} {m[p]:.1f}" for p in PHASES), flush=True)
            rows.append(row)
    print_table(
        f"GRPO step on smollm2-135m-instruct, 4 prompts x 8, 16 new tokens (mean of steps 2..{STEPS - 1})",
        ["busy", "threads", "OMP_WAIT_POLICY", "s/step", *PHASES, "loadavg before/after"],
        [[r["busy_processes"], r["threads"], r["omp_wait_policy"], r["mean"]["wall_s"],
          *(r["mean"][p] for p in PHASES),
          f"{r['load_before']['loadavg_1m']:.2f}/{r['load_after']['loadavg_1m']:.2f}"] for r in rows],
    )
    write_results(args, "step_real", {"model": "smollm2-135m-instruct", "cases": rows})


def calculator(args: Any, sizes: dict[str, int]) -> None:
    """``--calculator``: 3-turn calculator GRPO steps with the KV cache reused across turns and not."""
    import statistics

    threads = args.threads[-1] if "--threads" in sys.argv else 2
    rows: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for rep in range(1 if args.quick else 2):
        for reuse in (True, False) if rep % 2 == 0 else (False, True):  # interleaved, alternating order
            # OMP_WAIT_POLICY fixed for both (PASSIVE: what tinker_algos picks on a busy machine)
            row = run_case(threads, "PASSIVE", 0, reuse_kv_cache=reuse, calculator=True, **sizes)
            rows[reuse].append(row)
            m = row["mean"]
            print(f"run {rep}, reuse_kv_cache={reuse}: {m['wall_s']:.1f} s/step, sampling {m['sampling']:.1f} s "
                  f"(load {row['load_before']['loadavg_1m']:.2f} -> {row['load_after']['loadavg_1m']:.2f})", flush=True)
    table = []
    for reuse in (False, True):
        steps = [s for r in rows[reuse] for s in r["steps"]]
        loads = [f"{r['load_before']['loadavg_1m']:.2f}/{r['load_after']['loadavg_1m']:.2f}" for r in rows[reuse]]
        table.append([
            "on" if reuse else "off", len(steps),
            statistics.median(s["sampling"] for s in steps), statistics.median(s["wall_s"] for s in steps),
            statistics.median(s["tokens"] for s in steps), statistics.median(s["turns"] for s in steps), ", ".join(loads),
        ])
    print_table(
        f"GRPO step of examples/smollm2-calculator.yaml (untrained, {sizes['prompts']} prompts x {sizes['group']}, "
        f"3 turns of up to 40 tokens, {threads} thread(s)), medians of steps 2..{sizes['steps']}",
        ["reuse_kv_cache", "steps", "sampling s", "step s", "new tokens", "turns", "loadavg before/after (per run)"],
        table,
    )
    write_results(args, "step_real_calculator", {
        "model": "smollm2-135m-instruct", "threads": threads, **sizes, "reuse_on": rows[True], "reuse_off": rows[False],
    })


if __name__ == "__main__":
    main()
