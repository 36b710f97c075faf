"""GRPO beside TRL: OpenTinker's GRPO and TRL's ``GRPOTrainer``, same model, task and settings.

Start model: the ``tiny`` preset (a Llama of about 1M parameters with the character tokenizer,
built with seed 0), SFT-warmed here on 2-digit addition (``math/arithmetic-v0`` training-split
problems ``"12+35=" -> "47\\n"``, ``--sft-steps`` (default 250) x 128 examples, AdamW 2e-3 with
50 warm-up steps: 250 steps reach about 30% held-out, 200 about 12%, where GRPO at these settings
gains little) and saved once; both trainers load that copy.

The same for both (the settings of issue 13):

* task: ``math/arithmetic-v0`` (2 digits, ``+``), training-split prompts; reward
  :func:`tinker_env_math.arithmetic.score_answer` (1 for the right number, else 0);
* 32 prompts x group 8 per step, at most 4 new tokens, temperature 1; ``--stop eos`` (issue 31:
  no stop strings, the tokenizer's eos only) or ``--stop newline`` (issue 13: TRL's tokenizer copy
  has ``"\\n"`` as eos, so generation stops and the completion mask ends there, as the OpenTinker
  rollout's ``stop: ["\\n"]``);
* AdamW lr 5e-4 constant, betas (0.9, 0.99), eps 1e-8, no weight decay, gradient clipping 1.0;
  no KL term; one update per batch; group-normalised advantages; token-mean clipped loss
  (TRL ``loss_type="dapo"``, epsilon 0.2; OpenTinker ``loss: ppo``, ``aggregation: token-mean``);
  fp32 on the CPU; ``--threads`` torch threads (default 2); TRL's gradient checkpointing off;
* held-out accuracy: greedy on ``--eval-size`` test-split problems (seeded like OpenTinker's evaluation),
  with the same function (:func:`tinker_algos.rollout.evaluate`) for both, before training and
  every ``--eval-every`` steps; evaluation time is not training time.

Presets (``--preset``, default ``issue31``; every field can be overridden by its option): ``issue31``
-- threads 1 and 2, seeds 0 and 1, 3 repeats, 200 steps, 500 held-out problems every 10 steps, eos
only; ``issue13`` -- the earlier table's settings (2 threads, one run per side, 80 steps, 200 every
5, stop at ``"\\n"``); ``quick`` (also ``--quick``) -- a smoke run of the whole harness.

Order: for each thread count and seed, ``--repeats`` rounds of TRL then OpenTinker (then
OpenTinker with each ``--staleness`` above 0): A B A B ..., so drifting load hits both sides.
Each run is its own subprocess (``torch.set_num_threads`` and ``OMP_NUM_THREADS`` set before any
work; ``tinker_algos`` is imported first on both sides, so both get the same OpenMP wait policy),
with ``os.getloadavg()`` before and after it.

Per run: steps/s and samples/s over steps 2..N-1 (the first step warms up, the last writes a
checkpoint), the wall time between consecutive step ends minus the evaluations in between;
rollout (TRL: ``_generate_and_score_completions``; OpenTinker: ``time/rollout_s``) and update
(the rest of the step) per step, mean and median; the accuracy curve, best and final; the step
and training time to +10 and +20 points over the start. Per configuration (threads, seed,
trainer): the median (min-max) of each over the repeats, and of the per-pair ratio (a repeat's
OpenTinker run over the TRL run just before it). JSON in ``bench/results/vs_trl.<preset>.json``
(``vs_trl.json`` for ``issue13``, ``vs_trl.quick.json`` for ``--quick``), the table beside it as ``.md``. ``--plot`` draws the curves of
the JSON (accuracy against step and against training time) to ``docs/images/vs_trl-curves.png``.

    uv run --no-sync python bench/bench_vs_trl.py [--preset issue31] [--threads 1,2] [--seeds 0,1]
        [--repeats 3] [--steps 200] [--quick] [--plot]

Needs TRL: the ``bench`` dependency group (``uv sync --group bench``; nox's ``bench`` session
installs it). TRL is never a runtime dependency of OpenTinker.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import _vs_trl_stats as stats
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
SFT_STEPS, SFT_BATCH, SFT_LR, SFT_WARMUP = 250, 128, 2e-3, 50
ENV_KWARGS: dict[str, Any] = {"digits": 2, "ops": ["+"]}


def parse(argv: list[str] | None = None) -> tuple[BenchArgs, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help=f"named settings: {', '.join(stats.PRESETS)} (default {stats.DEFAULT_PRESET})")
    parser.add_argument("--threads", default=None, help="comma-separated torch intra-op thread counts (issue31: 1,2)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: the 'quick' preset")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (issue31: 0,1)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved runs per side and configuration (issue31: 3)")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per run (issue31: 200)")
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--eval-size", type=int, default=None, help="held-out problems per evaluation (issue31: 500)")
    parser.add_argument("--stop", choices=("eos", "newline"), default=None, help="eos only (issue31) or stop at newline (issue13)")
    parser.add_argument("--staleness", default=None, help="OpenTinker rollout.max_staleness values to run (e.g. 0,1)")
    parser.add_argument("--only", choices=("trl", "opentinker"), default=None, help="run one side only")
    parser.add_argument("--sft-steps", type=int, default=None, help="SFT warm-start steps (default 250)")
    parser.add_argument("--plot", action="store_true", help="only draw docs/images/vs_trl-curves.png from the JSON")
    parser.add_argument("--child", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)  # one run, in a subprocess
    ns = parser.parse_args(argv)
    name = ns.preset or ("quick" if ns.quick else stats.DEFAULT_PRESET)
    ns.preset_name = name
    ns.preset = stats.resolve_preset(name, {
        "threads": ns.threads, "seeds": ns.seeds, "repeats": ns.repeats, "steps": ns.steps, "eval_every": ns.eval_every,
        "eval_size": ns.eval_size, "stop": ns.stop, "sft_steps": ns.sft_steps, "staleness": ns.staleness,
    })
    quick = ns.quick or name == "quick"
    args = BenchArgs(threads=stats.int_list(ns.preset.threads), quick=quick, results=ns.results, load_at_start=load_snapshot(), wait_idle=ns.wait_idle)
    return args, ns


# ---------------------------------------------------------------------------------------------
# the start model
# ---------------------------------------------------------------------------------------------
def sft_warm_start(path: Path, steps: int = SFT_STEPS) -> Path:
    """The tiny preset, SFT-warmed on 2-digit addition, saved to ``path`` (``save_pretrained``)."""
    from tinker_algos.algorithms.common import example_trajectory
    from tinker_algos.model.device import seed_everything
    from tinker_algos.model.models import PolicyModel
    from tinker_algos.training.trainer import Trainer, TrainerConfig
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
    from tinker_algos.rollout.episodes import evaluate
    from tinker_core.seeding import derive_seed

    def factory() -> Any:
        return tinker_core.make_env("math/arithmetic-v0", **ENV_KWARGS, split="test")

    m = evaluate(policy, factory, size, seed=derive_seed(seed, "eval"), max_new_tokens=NEW_TOKENS, stop=("\n",))
    return float(m["eval/accuracy"])


# ---------------------------------------------------------------------------------------------
# TRL
# ---------------------------------------------------------------------------------------------
def run_trl(model_dir: Path, seed: int, steps: int, eval_every: int, eval_size: int, acc0: float, stop: str = "newline") -> dict[str, Any]:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from tinker_algos.model.device import resolve_device
    from tinker_algos.model.models import PolicyModel
    from tinker_algos.model.tokenizer import load_tokenizer
    from tinker_env_math.arithmetic import arithmetic_problems, score_answer

    clock = stats.Clock(PROMPTS * GROUP)
    eval_tok = load_tokenizer(str(model_dir))
    trl_tok = load_tokenizer(str(model_dir))
    if stop == "newline":
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
        **stats.trl_fixed(seed),
        output_dir=tempfile.mkdtemp(prefix="bench-trl-"),
        max_steps=steps,
        per_device_train_batch_size=PROMPTS * GROUP,
        num_generations=GROUP,
        max_completion_length=NEW_TOKENS,
        temperature=1.0,
        top_p=1.0,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=BETAS[0],
        adam_beta2=BETAS[1],
        adam_epsilon=1e-8,
        weight_decay=0.0,
        max_grad_norm=CLIP,
        epsilon=EPS_CLIP,
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
def opentinker_job(
    model_dir: Path, seed: int, steps: int, eval_every: int, eval_size: int, staleness: int, stop: str = "newline"
) -> dict[str, Any]:
    """The job config: the settings above in OpenTinker's YAML format."""
    rollout: dict[str, Any] = {
        "prompts_per_step": PROMPTS, "group_size": GROUP, "max_new_tokens": NEW_TOKENS, "temperature": 1.0,
        "stop": ["\n"] if stop == "newline" else [],
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
            "params": {"betas": list(BETAS), "eps": 1e-8, "fused": True},  # the fused kernel: opt-in, see optimizers.adamw
        },
        "rollout": rollout,
        "checkpoint": {"every": 0, "keep": 1},
        "logging": {"every": 1, "jsonl": True, "tensorboard": False},
    }


def run_opentinker(
    model_dir: Path, seed: int, steps: int, eval_every: int, eval_size: int, acc0: float, staleness: int, stop: str = "newline"
) -> dict[str, Any]:
    from tinker_algos.run.job import train

    clock = stats.Clock(PROMPTS * GROUP)

    class Callbacks:
        def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
            clock.add_eval(float(metrics.get("time/eval_s", 0.0)))
            clock.step_end()
            if "time/rollout_s" in metrics:
                clock.rollout_s.append(float(metrics["time/rollout_s"]))
            if "eval/accuracy" in metrics:
                clock.curve.append((step, 0.0, float(metrics["eval/accuracy"])))

    job = opentinker_job(model_dir, seed, steps, eval_every, eval_size, staleness, stop)
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = json.loads(results.read_text())
    # one line per (trainer, seed): the first repeat at the most threads measured
    top = max(r.get("threads", 1) for r in doc["runs"])
    runs = [r for r in doc["runs"] if r.get("repeat", 0) == 0 and r.get("threads", 1) == top]
    eval_size = doc.get("settings", {}).get("eval_size", 200)
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
    by_step.set_ylabel(f"held-out accuracy, % ({eval_size} problems, greedy)")
    for ax in (by_step, by_time):
        ax.grid(alpha=0.3)
    by_time.legend(fontsize=8)
    fig.suptitle(f"GRPO on 2-digit addition, same SFT start: OpenTinker vs TRL ({top} torch thread{'s' if top > 1 else ''})")
    fig.tight_layout()
    image.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(image, dpi=110)
    return image


# ---------------------------------------------------------------------------------------------
# main: one subprocess per run, interleaved
# ---------------------------------------------------------------------------------------------
def child(spec_path: Path, out_path: Path) -> None:
    """One run in this (fresh) process: the threads set before any work, then the side's run."""
    spec = json.loads(spec_path.read_text())
    import tinker_algos  # noqa: F401  -- first, on both sides: the same OpenMP wait policy

    threads = set_threads(spec["threads"])
    from tinker_algos.model.models import PolicyModel

    model_dir, seed, p = Path(spec["model_dir"]), spec["seed"], spec["preset"]
    acc0 = held_out(PolicyModel.load(str(model_dir), device="cpu", precision="fp32"), seed, p["eval_size"])
    common = (model_dir, seed, p["steps"], p["eval_every"], p["eval_size"], acc0)
    if spec["trainer"] == "trl":
        r = run_trl(*common, stop=p["stop"])
    else:
        r = run_opentinker(*common, spec["staleness"], stop=p["stop"])
    r.update(torch_threads=threads, omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"))
    out_path.write_text(json.dumps(r))


def main() -> None:
    args, ns = parse()
    if ns.child:
        child(Path(ns.child[0]), Path(ns.child[1]))
        return
    preset = ns.preset
    name = "vs_trl" if ns.preset_name in ("issue13", "quick") else f"vs_trl.{ns.preset_name}"  # --quick adds .quick
    if ns.plot:
        print(plot(args.results / f"{name}.json"))
        return
    sides = stats.sides(ns.only, stats.int_list(preset.staleness))
    order = stats.run_order(args.threads, stats.int_list(preset.seeds), preset.repeats, sides)
    print(f"preset {ns.preset_name}: {preset.as_dict()}; {len(order)} runs", flush=True)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-vs-trl-") as tmp:
        model_dir = sft_warm_start(Path(tmp) / "sft", preset.sft_steps)
        for i, o in enumerate(order):
            busy = wait_for_idle(args)
            spec = {**o, "index": i, "model_dir": str(model_dir), "staleness": stats.staleness_of(o["trainer"]), "preset": preset.as_dict()}
            r = stats.run_child(Path(__file__), spec, Path(tmp))
            r["cpu_busy_waited"] = busy
            runs.append(r)
            print(
                f"[{i + 1}/{len(order)}] {o['threads']} thr seed {o['seed']} rep {o['repeat']} {o['trainer']:22s}: "
                f"{r['steps_per_s']:.2f} steps/s, rollout {r['rollout_median_s'] * 1e3:.0f} ms + update "
                f"{r['update_median_s'] * 1e3:.0f} ms (medians), accuracy {r['start_accuracy']:.3f} -> {r['final_accuracy']:.3f} "
                f"(best {r['best_accuracy']:.3f}), load {r['load_before']['loadavg_1m']:.2f} -> {r['load_after']['loadavg_1m']:.2f}",
                flush=True,
            )
    rows = stats.aggregate(runs)
    title = (f"GRPO beside TRL ({ns.preset_name}): {PROMPTS} prompts x {GROUP}, {NEW_TOKENS} new tokens, stop {preset.stop}, "
             f"{preset.steps} steps, medians (min-max) of {preset.repeats} interleaved repeats (steps 2..N-1)")
    print_table(title, stats.COLUMNS, stats.markdown_rows(rows))
    path = write_results(args, name, {
        "preset": ns.preset_name,
        "settings": {
            **preset.as_dict(), "prompts": PROMPTS, "group": GROUP, "max_new_tokens": NEW_TOKENS, "temperature": 1.0, "lr": LR,
            "betas": BETAS, "grad_clip": CLIP, "clip_eps": EPS_CLIP, "kl": 0.0,
            "sft": {"steps": preset.sft_steps, "batch": SFT_BATCH, "lr": SFT_LR, "warmup": SFT_WARMUP},
        },
        "aggregate": rows,
        "runs": runs,
    })
    path.with_suffix(".md").write_text(stats.markdown(title, rows))
    if not args.quick and ns.only is None:  # the docs' figure only from the committed results
        print(plot(path) if args.results.resolve() == RESULTS_DIR.resolve() else plot(path, path.with_suffix(".png")))


if __name__ == "__main__":
    main()
