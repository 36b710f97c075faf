"""GRPO beside TRL: OpenTinker's GRPO and TRL's ``GRPOTrainer``, same model, task and settings.

Start model: the ``tiny`` preset (a Llama of about 1M parameters with the character tokenizer,
built with seed 0), SFT-warmed here on 2-digit addition (``math/arithmetic-v0`` training-split
problems ``"12+35=" -> "47\\n"``, ``--sft-steps`` (default 250) x 128 examples, AdamW 2e-3 with
50 warm-up steps: 250 steps reach about 30% held-out, 200 about 12%, where GRPO at these settings
gains little) and saved once; both trainers load that copy.

The same for both (the settings of issue 13):

* task: ``math/arithmetic-v0`` (2 digits, ``+``), training-split prompts; reward
  :func:`tinker_env_math.arithmetic.score_answer` (1 for the right number, else 0);
* 32 prompts x group 8 per step, at most 4 new tokens, temperature 1, stop at ``"\\n"``
  (TRL: its tokenizer copy has ``"\\n"`` as eos, so generation stops and the completion mask
  ends there, as the OpenTinker rollout's ``stop: ["\\n"]``);
* AdamW lr 5e-4 constant, betas (0.9, 0.99), eps 1e-8, no weight decay, gradient clipping 1.0;
  no KL term; one update per batch; group-normalised advantages; token-mean clipped loss
  (TRL ``loss_type="dapo"``, epsilon 0.2; OpenTinker ``loss: ppo``, ``aggregation: token-mean``);
  fp32 on the CPU; ``--threads`` torch threads (default 2); TRL's gradient checkpointing off;
* held-out accuracy: greedy on 200 test-split problems (seeded like OpenTinker's evaluation),
  with the same function (:func:`tinker_algos.rollout.evaluate`) for both, before training and
  every ``--eval-every`` steps; evaluation time is not training time.

Per run: steps/s and samples/s over steps 2..N-1 (the first step warms up, the last writes a
checkpoint), the wall time between consecutive step ends minus the evaluations in between;
rollout (TRL: ``_generate_and_score_completions``; OpenTinker: ``time/rollout_s``) and update
(the rest of the step) per step; the accuracy curve; the step and training time to +10 and +20
points over the start; the machine's load before and after. ``--plot`` draws the curves of the
JSON (accuracy against step and against training time) to ``docs/images/vs_trl-curves.png``. Runs are interleaved in one invocation: for each
seed, TRL then OpenTinker (then OpenTinker with each ``--staleness`` above 0).

    uv run --no-sync python bench/bench_vs_trl.py [--seeds 0,1] [--steps 80] [--quick] [--plot]

Needs TRL: the ``bench`` dependency group (``uv sync --group bench``; nox's ``bench`` session
installs it). TRL is never a runtime dependency of OpenTinker.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    RESULTS_DIR,
    BenchArgs,
    load_snapshot,
    print_table,
    set_threads,
    wait_for_idle,
    write_results,
)

PROMPTS, GROUP, NEW_TOKENS = 32, 8, 4
LR, BETAS, CLIP, EPS_CLIP = 5e-4, (0.9, 0.99), 1.0, 0.2
EVAL_SIZE = 200
SFT_STEPS, SFT_BATCH, SFT_LR, SFT_WARMUP = 250, 128, 2e-3, 50
ENV_KWARGS: dict[str, Any] = {"digits": 2, "ops": ["+"]}
GAINS = (10, 20)  # "time to +N points"


def parse(argv: list[str] | None = None) -> tuple[BenchArgs, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2", help="torch intra-op threads (one count; default 2)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 4 steps, 1 seed, 50 eval problems")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds (default 0,1)")
    parser.add_argument("--steps", type=int, default=80, help="GRPO steps per run (default 80)")
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--staleness", default="0", help="OpenTinker rollout.max_staleness values to run (e.g. 0,1)")
    parser.add_argument("--only", choices=("trl", "opentinker"), default=None, help="run one side only")
    parser.add_argument("--sft-steps", type=int, default=SFT_STEPS, help=f"SFT warm-start steps (default {SFT_STEPS})")
    parser.add_argument("--plot", action="store_true", help="only draw docs/images/vs_trl-curves.png from the JSON")
    ns = parser.parse_args(argv)
    threads = int(str(ns.threads).split(",")[0])
    if ns.quick:
        ns.steps, ns.seeds, ns.eval_every = 4, "0", 2
    args = BenchArgs(threads=[threads], quick=ns.quick, results=ns.results, load_at_start=load_snapshot(), wait_idle=ns.wait_idle)
    return args, ns


# ---------------------------------------------------------------------------------------------
# the start model
# ---------------------------------------------------------------------------------------------
def sft_warm_start(path: Path, steps: int = SFT_STEPS) -> Path:
    """The tiny preset, SFT-warmed on 2-digit addition, saved to ``path`` (``save_pretrained``)."""
    from tinker_algos.algorithms.common import example_trajectory
    from tinker_algos.device import seed_everything
    from tinker_algos.models import PolicyModel
    from tinker_algos.trainer import Trainer, TrainerConfig
    from tinker_core.contracts import Batch
    from tinker_env_math.arithmetic import arithmetic_problems

    seed_everything(0)
    policy = PolicyModel.load("tiny", device="cpu", precision="fp32")
    tok = policy.tokenizer
    trainer = Trainer(policy, TrainerConfig(optimizer="adamw", lr=SFT_LR, warmup_steps=SFT_WARMUP, max_grad_norm=1.0))
    problems = arithmetic_problems(steps * SFT_BATCH, 0, **ENV_KWARGS, split="train", unique=False)
    t0 = time.perf_counter()
    for k in range(steps):
        part = problems[k * SFT_BATCH : (k + 1) * SFT_BATCH]
        trajs = [example_trajectory(tok, p.prompt, p.target) for p in part]
        trainer.forward_backward(Batch.from_trajectories(trajs, pad_token_id=policy.pad_token_id), "cross_entropy")
        trainer.optim_step()
    policy.model.save_pretrained(path)
    tok.save_pretrained(path)
    print(f"SFT warm start: {steps} steps in {time.perf_counter() - t0:.1f} s -> {path}", flush=True)
    return path


def held_out(policy: Any, seed: int, size: int) -> float:
    """Greedy held-out accuracy, the same function and problems for both trainers."""
    import tinker_core
    from tinker_algos.rollout import evaluate
    from tinker_core.seeding import derive_seed

    def factory() -> Any:
        return tinker_core.make_env("math/arithmetic-v0", **ENV_KWARGS, split="test")

    m = evaluate(policy, factory, size, seed=derive_seed(seed, "eval"), max_new_tokens=NEW_TOKENS, stop=("\n",))
    return float(m["eval/accuracy"])


# ---------------------------------------------------------------------------------------------
# a run's timings
# ---------------------------------------------------------------------------------------------
class Clock:
    """Step ends, evaluation time and rollout time per step; the figures of one run."""

    def __init__(self) -> None:
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
        trained = [sum(times[: s]) for s in range(len(times) + 1)]
        curve = [(0, 0.0, acc0)] + [(s, trained[s], a) for s, _, a in self.curve]
        out: dict[str, Any] = {
            "steps": len(times),
            "step_s": [round(t, 4) for t in times],
            "rollout_s": [round(t, 4) for t in self.rollout_s],
            "steps_per_s": 1.0 / mean,
            "samples_per_s": PROMPTS * GROUP / mean,
            "step_mean_s": mean,
            "step_median_s": statistics.median(steady),
            "rollout_mean_s": rollout,
            "update_mean_s": mean - rollout,
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


# ---------------------------------------------------------------------------------------------
# TRL
# ---------------------------------------------------------------------------------------------
def run_trl(model_dir: Path, seed: int, steps: int, eval_every: int, eval_size: int, acc0: float) -> dict[str, Any]:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from tinker_algos.device import resolve_device
    from tinker_algos.models import PolicyModel
    from tinker_algos.tokenizer import load_tokenizer
    from tinker_env_math.arithmetic import arithmetic_problems, score_answer

    clock = Clock()
    eval_tok = load_tokenizer(str(model_dir))
    trl_tok = load_tokenizer(str(model_dir))
    trl_tok.eos_token = "\n"  # generation stops at the newline and the completion mask ends there
    problems = arithmetic_problems(steps * PROMPTS + PROMPTS, seed, **ENV_KWARGS, split="train", unique=False)
    dataset = Dataset.from_dict({"prompt": [p.prompt for p in problems], "answer": [p.answer for p in problems]})

    def reward(completions: list[str], answer: list[str], **_: Any) -> list[float]:
        return [score_answer(c, a) for c, a in zip(completions, answer, strict=True)]

    class Timed(GRPOTrainer):
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            t0 = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            clock.rollout_s.append(time.perf_counter() - t0)
            return out

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-trl-"),
        max_steps=steps,
        per_device_train_batch_size=PROMPTS * GROUP,
        gradient_accumulation_steps=1,
        num_generations=GROUP,
        max_completion_length=NEW_TOKENS,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=BETAS[0],
        adam_beta2=BETAS[1],
        adam_epsilon=1e-8,
        weight_decay=0.0,
        max_grad_norm=CLIP,
        beta=0.0,
        num_iterations=1,
        epsilon=EPS_CLIP,
        loss_type="dapo",
        scale_rewards="group",
        gradient_checkpointing=False,
        use_cpu=True,
        bf16=False,
        fp16=False,
        seed=seed,
        data_seed=seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
    )

    class Eval(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            clock.step_end()
            step = int(state.global_step)
            if step % eval_every == 0 or step == steps:
                t0 = time.perf_counter()
                policy = PolicyModel(model=trainer.model, tokenizer=eval_tok, model_id="trl", spec=resolve_device("cpu", "fp32"))
                clock.curve.append((step, 0.0, held_out(policy, seed, eval_size)))
                trainer.model.train()
                clock.add_eval(time.perf_counter() - t0)

    trainer = Timed(
        model=model, reward_funcs=reward, args=config, train_dataset=dataset, processing_class=trl_tok, callbacks=[Eval()]
    )
    clock.t_start = time.perf_counter()
    trainer.train()
    return {"version": trl.__version__, **clock.summary(acc0)}


# ---------------------------------------------------------------------------------------------
# OpenTinker
# ---------------------------------------------------------------------------------------------
def opentinker_job(model_dir: Path, seed: int, steps: int, eval_every: int, eval_size: int, staleness: int) -> dict[str, Any]:
    """The job config: the settings above in OpenTinker's YAML format."""
    rollout: dict[str, Any] = {
        "prompts_per_step": PROMPTS, "group_size": GROUP, "max_new_tokens": NEW_TOKENS, "temperature": 1.0, "stop": ["\n"],
    }
    if staleness:
        rollout["max_staleness"] = staleness
    return {
        "name": "bench-vs-trl",
        "seed": seed,
        "model": {"name": str(model_dir), "device": "cpu", "dtype": "float32"},
        "env": {"id": "math/arithmetic-v0", "kwargs": ENV_KWARGS, "eval_kwargs": {**ENV_KWARGS, "split": "test"}},
        "algorithm": {
            "name": "grpo", "steps": steps, "estimator": "grpo", "loss": "ppo", "loss_config": {"eps_low": EPS_CLIP, "eps_high": EPS_CLIP},
            "aggregation": "token-mean", "eval_every": eval_every, "eval_size": eval_size,
        },
        "optimizer": {
            "name": "adamw", "lr": LR, "schedule": "constant", "weight_decay": 0.0, "grad_clip": CLIP,
            "params": {"betas": list(BETAS), "eps": 1e-8},
        },
        "rollout": rollout,
        "checkpoint": {"every": 0, "keep": 1},
        "logging": {"every": 1, "jsonl": True, "tensorboard": False},
    }


def run_opentinker(model_dir: Path, seed: int, steps: int, eval_every: int, eval_size: int, acc0: float, staleness: int) -> dict[str, Any]:
    from tinker_algos.run import train

    clock = Clock()

    class Callbacks:
        def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
            clock.add_eval(float(metrics.get("time/eval_s", 0.0)))
            clock.step_end()
            if "time/rollout_s" in metrics:
                clock.rollout_s.append(float(metrics["time/rollout_s"]))
            if "eval/accuracy" in metrics:
                clock.curve.append((step, 0.0, float(metrics["eval/accuracy"])))

    job = opentinker_job(model_dir, seed, steps, eval_every, eval_size, staleness)
    with tempfile.TemporaryDirectory(prefix="bench-ot-") as run_dir:
        # the clock starts when the first step starts: the run loads the model first
        started: dict[str, float] = {}

        class First(Callbacks):
            def on_log(self, line: str) -> None:
                if "stage 0" in line and "t0" not in started:
                    started["t0"] = clock.t_start = time.perf_counter()

        result = train(job, run_dir=Path(run_dir) / "run", callbacks=First())
    if result.status != "completed":
        raise RuntimeError(f"the OpenTinker run ended {result.status!r}")
    return {"max_staleness": staleness, **clock.summary(acc0)}


# ---------------------------------------------------------------------------------------------
# the curves as a figure
# ---------------------------------------------------------------------------------------------
IMAGE = Path(__file__).resolve().parent.parent / "docs" / "images" / "vs_trl-curves.png"
STYLE = {"trl": ("TRL GRPOTrainer", "tab:red"), "opentinker": ("OpenTinker", "tab:blue")}


def plot(results: Path, image: Path = IMAGE) -> Path:
    """Held-out accuracy against step and against training time, one line per run."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = json.loads(results.read_text())["runs"]
    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for r in runs:
        label, color = STYLE.get(r["trainer"], (r["trainer"].replace("opentinker-staleness", "OpenTinker k="), "tab:green"))
        steps = [c["step"] for c in r["curve"]]
        secs = [c["train_s"] for c in r["curve"]]
        acc = [100 * c["accuracy"] for c in r["curve"]]
        ls = "-" if r["seed"] == 0 else "--"
        kw = {"color": color, "linestyle": ls, "marker": "o", "markersize": 3, "label": f"{label}, seed {r['seed']}"}
        by_step.plot(steps, acc, **kw)
        by_time.plot(secs, acc, **kw)
    by_step.set_xlabel("GRPO step")
    by_time.set_xlabel("training wall time, s (evaluation excluded)")
    by_step.set_ylabel("held-out accuracy, % (200 problems, greedy)")
    for ax in (by_step, by_time):
        ax.grid(alpha=0.3)
    by_time.legend(fontsize=8)
    fig.suptitle("GRPO on 2-digit addition, same SFT start: OpenTinker vs TRL (1 torch thread)")
    fig.tight_layout()
    image.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(image, dpi=110)
    return image


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------
def main() -> None:
    args, ns = parse()
    if ns.plot:
        print(plot(args.results / "vs_trl.json"))
        return
    threads = set_threads(args.threads[0])
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    seeds = [int(x) for x in ns.seeds.split(",") if x.strip()]
    staleness = [int(x) for x in ns.staleness.split(",") if x.strip()]
    eval_size = 50 if ns.quick else EVAL_SIZE
    from tinker_algos.models import PolicyModel

    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-vs-trl-") as tmp:
        model_dir = sft_warm_start(Path(tmp) / "sft", ns.sft_steps)
        start = PolicyModel.load(str(model_dir), device="cpu", precision="fp32")
        for seed in seeds:
            acc0 = held_out(start, seed, eval_size)
            print(f"seed {seed}: start accuracy {acc0:.3f}", flush=True)
            sides: list[tuple[str, Any]] = []
            if ns.only in (None, "trl"):
                sides.append(("trl", lambda s=seed, a=acc0: run_trl(model_dir, s, ns.steps, ns.eval_every, eval_size, a)))
            if ns.only in (None, "opentinker"):
                for k in staleness:
                    sides.append((
                        "opentinker" if k == 0 else f"opentinker-staleness{k}",
                        lambda s=seed, a=acc0, k=k: run_opentinker(model_dir, s, ns.steps, ns.eval_every, eval_size, a, k),
                    ))
            for name, fn in sides:
                busy = wait_for_idle(args)
                before = load_snapshot()
                t0 = time.perf_counter()
                r = fn()
                r.update(trainer=name, seed=seed, threads=threads, wall_s=time.perf_counter() - t0,
                         load_before=before, load_after=load_snapshot(), cpu_busy_waited=busy)
                runs.append(r)
                print(
                    f"{name:24s} seed {seed}: {r['steps_per_s']:.2f} steps/s ({r['samples_per_s']:.0f} samples/s), "
                    f"rollout {r['rollout_mean_s'] * 1e3:.0f} ms + update {r['update_mean_s'] * 1e3:.0f} ms, "
                    f"accuracy {r['start_accuracy']:.3f} -> {r['final_accuracy']:.3f} (best {r['best_accuracy']:.3f}), "
                    f"+10 at step {r['plus10_step']}, +20 at step {r['plus20_step']}, "
                    f"load {before['loadavg_1m']:.2f} -> {r['load_after']['loadavg_1m']:.2f}",
                    flush=True,
                )
    ref = {r["seed"]: r for r in runs if r["trainer"] == "trl"}
    rows = []
    for r in runs:
        base = ref.get(r["seed"])
        r["vs_trl"] = r["steps_per_s"] / base["steps_per_s"] if base else None
        rows.append([
            r["trainer"], r["seed"], r["steps_per_s"], r["samples_per_s"], r["rollout_mean_s"] * 1e3, r["update_mean_s"] * 1e3,
            f"{r['vs_trl']:.2f}x" if r["vs_trl"] else "-",
            f"{100 * r['start_accuracy']:.1f} -> {100 * r['final_accuracy']:.1f}",
            *["-" if r[f"plus{g}_step"] is None else f"step {r[f'plus{g}_step']}, {r[f'plus{g}_train_s']:.1f} s" for g in GAINS],
            f"{r['load_before']['loadavg_1m']:.2f} / {r['load_after']['loadavg_1m']:.2f}",
        ])
    print_table(
        f"GRPO beside TRL: {PROMPTS} prompts x {GROUP}, {NEW_TOKENS} new tokens, {threads} threads (steps 2..N-1)",
        ["trainer", "seed", "steps/s", "samples/s", "rollout ms", "update ms", "vs TRL", "accuracy %", "+10 points", "+20 points", "load 1m before/after"],
        rows,
    )
    print_table(
        "held-out accuracy (%) by step",
        ["trainer", "seed", *[str(c["step"]) for c in runs[0]["curve"]]],
        [[r["trainer"], r["seed"], *[f"{100 * c['accuracy']:.1f}" for c in r["curve"]]] for r in runs],
    )
    write_results(args, "vs_trl", {
        "settings": {
            "prompts": PROMPTS, "group": GROUP, "max_new_tokens": NEW_TOKENS, "temperature": 1.0, "lr": LR, "betas": BETAS,
            "grad_clip": CLIP, "clip_eps": EPS_CLIP, "kl": 0.0, "eval_size": eval_size, "eval_every": ns.eval_every,
            "steps": ns.steps, "sft": {"steps": ns.sft_steps, "batch": SFT_BATCH, "lr": SFT_LR, "warmup": SFT_WARMUP},
        },
        "runs": runs,
    })
    if not ns.quick and ns.only is None:
        print(plot(args.results / "vs_trl.json"))


if __name__ == "__main__":
    main()
