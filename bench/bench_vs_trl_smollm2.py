"""GRPO beside TRL on a real model: SmolLM2-135M-Instruct with LoRA, OpenTinker and TRL's ``GRPOTrainer``.

Issue 46, item 2. The OpenTinker side runs what a user runs: ``examples/smollm2-arithmetic.yaml``
(read here, not copied) with only these fields changed: ``rollout.prompts_per_step`` 4 (the
example has 8), the stage's ``steps``, ``eval_every`` and ``eval_size``, ``seed``,
``model.threads`` and no checkpoints. TRL gets the same, taken from that job:

* model: the converted ``smollm2-135m-instruct`` directory in the cache (``opentinker model
  fetch``; :func:`tinker_algos.model.model_files.resolve_model`), fp32 on the CPU;
* LoRA: the job's ``lora`` (rank 16, alpha 32, dropout 0, the job's ``target_modules``: the
  default ``q_proj, k_proj, v_proj, o_proj``) as a ``peft.LoraConfig`` for TRL;
* task: ``math/arithmetic-v0`` with the job's ``env.kwargs`` (operands of 1 or 2 digits, ``+``),
  training-split problems, as conversational prompts (the job's system prompt, then the problem as
  the user message) rendered by the same chat template; reward
  :func:`tinker_env_math.arithmetic.score_answer` of the assistant's text (what the env scores);
* 4 prompts x 8 samples per step, at most 16 new tokens, temperature 0.7, top-p 1, no top-k,
  generation ending at ``<|im_end|>`` (the tokenizer's eos);
* AdamW at the job's lr (5e-4) with its 3 warm-up steps (OpenTinker's ``(step + 1) / 3``, given
  to TRL as the same ``LambdaLR``; TRL's own ``constant_with_warmup`` would start at 0), betas
  (0.9, 0.999), eps 1e-8, no weight decay, gradient clipping 1.0; no KL term (TRL ``beta=0``); one
  update per batch; group-normalised advantages; token-mean loss (TRL ``loss_type="dapo"``; the
  job's ``importance_sampling`` loss: with one update per batch both ratios are 1, so the two
  losses have the same gradient); no gradient checkpointing; ``--threads`` torch threads.
* held-out accuracy: greedy, ``--eval-size`` test-split problems through the chat template with
  the system prompt, by :func:`tinker_algos.rollout.episodes.evaluate` with the arguments the
  job's own evaluation passes (seed ``derive_seed(seed, "eval")``, 16 tokens, no stop strings), for
  both, before training and every ``--eval-every`` steps; evaluation time is not training time.

Order, timing and the table as ``bench_vs_trl.py`` (the shared pieces live in
``_vs_trl_stats.py``): TRL then OpenTinker for each seed and repeat (A B A B ...), each run its own
subprocess with ``os.getloadavg()`` before and after; steps/s over steps 2..N-1, rollout (TRL:
``_generate_and_score_completions``; OpenTinker: ``time/rollout_s``) and update per step. Per run
also the peak resident set of the whole child process (model load, evaluations and training;
:func:`tinker_algos.records.memory.watch`, the kernel's ``VmHWM``, one phase around the run that
every inner phase folds into). Rows per seed, then pooled over the seeds (medians, min-max, the
per-pair ratios). JSON in ``bench/results/vs_trl_smollm2.json`` (``.quick.json`` for
``--quick``), the table beside it as ``.md``.

    uv run --no-sync python bench/bench_vs_trl_smollm2.py [--seeds 0,1,2] [--repeats 1] [--steps 12]
        [--threads 2] [--eval-size 50] [--eval-every 6] [--quick]

Needs TRL (the ``bench`` dependency group) and the model in the cache
(``opentinker model fetch smollm2-135m-instruct``).
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

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "smollm2-arithmetic.yaml"
PROMPTS = 4  # the 4 prompts x 8 (the example has 8 x 8)
DEFAULTS = {"seeds": "0,1,2", "repeats": 1, "steps": 12, "threads": "2", "eval_size": 50, "eval_every": 6}
QUICK = {"seeds": "0", "repeats": 1, "steps": 3, "threads": "2", "eval_size": 8, "eval_every": 3}


def parse(argv: list[str] | None = None) -> tuple[BenchArgs, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default=None, help="comma-separated torch intra-op thread counts (default 2)")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved pairs per seed and thread count (default 1)")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per run (default 12: 10 timed)")
    parser.add_argument("--eval-size", type=int, default=None, help="held-out problems per evaluation (default 50)")
    parser.add_argument("--eval-every", type=int, default=None, help="steps between evaluations (default 6)")
    parser.add_argument("--only", choices=("trl", "opentinker"), default=None, help="run one side only")
    parser.add_argument("--quick", action="store_true", help="a smoke run: one seed, 3 steps, 8 held-out problems")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--child", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)  # one run, in a subprocess
    ns = parser.parse_args(argv)
    base = QUICK if ns.quick else DEFAULTS
    for key, value in base.items():
        if getattr(ns, key) is None:
            setattr(ns, key, value)
    if ns.steps < 3:
        parser.error(f"--steps {ns.steps}: at least 3 (the first warms up, the last is not timed)")
    if ns.repeats < 1 or ns.eval_size < 1 or ns.eval_every < 1:
        parser.error("--repeats, --eval-size and --eval-every must be at least 1")
    args = BenchArgs(threads=stats.int_list(ns.threads), quick=ns.quick, results=ns.results, load_at_start=load_snapshot(), wait_idle=ns.wait_idle)
    return args, ns


# ---------------------------------------------------------------------------------------------
# the job both sides run
# ---------------------------------------------------------------------------------------------
def job_dict(seed: int, steps: int, eval_every: int, eval_size: int, threads: int) -> dict[str, Any]:
    """``examples/smollm2-arithmetic.yaml`` with the fields of the module docstring changed."""
    import yaml

    job = yaml.safe_load(EXAMPLE.read_text())
    job["seed"] = seed
    job["model"]["threads"] = threads
    job["rollout"]["prompts_per_step"] = PROMPTS
    algo = job["stages"][0]["algorithm"]
    algo.update(steps=steps, eval_every=eval_every, eval_size=eval_size)
    job["checkpoint"] = {"every": 0, "keep_last": 1}
    job["logging"] = {"every": 1, "jsonl": True, "tensorboard": False}
    return job


def settings(job: dict[str, Any]) -> dict[str, Any]:
    """The validated job's settings that TRL mirrors."""
    from tinker_core.config import JobConfig

    cfg = JobConfig.model_validate(job)
    stage = cfg.stages[0]
    env = stage.env or cfg.env
    opt = stage.optimizer or cfg.optimizer
    assert env is not None and cfg.lora is not None and opt.name == "adamw" and opt.schedule == "constant"
    return {
        "model": cfg.model.name, "group": cfg.rollout.group_size, "prompts": cfg.rollout.prompts_per_step,
        "max_new_tokens": cfg.rollout.max_new_tokens, "temperature": cfg.rollout.temperature, "top_p": cfg.rollout.top_p,
        "stop": list(cfg.rollout.stop), "env_id": env.id, "env_kwargs": dict(env.kwargs), "eval_kwargs": dict(env.eval_kwargs or {}),
        "system_prompt": env.system_prompt, "lora": cfg.lora.model_dump(), "lr": opt.lr, "warmup_steps": opt.warmup_steps,
        "weight_decay": opt.weight_decay, "grad_clip": opt.grad_clip, "betas": list(opt.params.get("betas", (0.9, 0.999))),
        "eps": opt.params.get("eps", 1e-8), "loss": stage.algorithm.loss, "aggregation": stage.algorithm.aggregation,
        "kl": stage.algorithm.kl.coef if stage.algorithm.kl else 0.0,
    }


def held_out(policy: Any, s: dict[str, Any], seed: int, size: int) -> float:
    """Greedy held-out accuracy: the call the job's own evaluation makes, for either trainer's model."""
    import tinker_core
    from tinker_algos.model.prompts import PromptRenderer
    from tinker_algos.rollout.episodes import evaluate
    from tinker_core.seeding import derive_seed

    def factory() -> Any:
        return tinker_core.make_env(s["env_id"], **s["eval_kwargs"])

    renderer = PromptRenderer.from_config(policy.tokenizer, "auto").with_system_prompt(s["system_prompt"])
    m = evaluate(policy, factory, size, seed=derive_seed(seed, "eval"), max_new_tokens=s["max_new_tokens"], stop=s["stop"], renderer=renderer)
    return float(m["eval/accuracy"])


# ---------------------------------------------------------------------------------------------
# TRL
# ---------------------------------------------------------------------------------------------
def run_trl(s: dict[str, Any], model_dir: str, seed: int, steps: int, eval_every: int, eval_size: int, acc0: float) -> dict[str, Any]:
    import torch
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from tinker_algos.model.device import resolve_device
    from tinker_algos.model.models import PolicyModel
    from tinker_algos.model.tokenizer import load_tokenizer
    from tinker_env_math.arithmetic import arithmetic_problems, score_answer

    clock = stats.Clock(s["prompts"] * s["group"])
    tok = load_tokenizer(model_dir)
    problems = arithmetic_problems(steps * s["prompts"] + s["prompts"], seed, **s["env_kwargs"], split="train", unique=False)
    system = [{"role": "system", "content": s["system_prompt"]}] if s["system_prompt"] else []
    dataset = Dataset.from_dict({
        "prompt": [[*system, {"role": "user", "content": p.prompt}] for p in problems],
        "answer": [p.answer for p in problems],
    })

    def reward(completions: list[list[dict[str, str]]], answer: list[str], **_: Any) -> list[float]:
        return [score_answer(c[-1]["content"], a) for c, a in zip(completions, answer, strict=True)]

    warmup = s["warmup_steps"]

    class Timed(GRPOTrainer):
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            t0 = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            clock.rollout_s.append(time.perf_counter() - t0)
            return out

        def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
            # OpenTinker's warm-up, (step + 1) / warmup, then constant
            if self.lr_scheduler is None:
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
                    optimizer or self.optimizer, lambda k: min(1.0, (k + 1) / warmup) if warmup else 1.0)
            return self.lr_scheduler

    lora = s["lora"]
    peft_config = LoraConfig(task_type="CAUSAL_LM", r=lora["rank"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                             target_modules=list(lora["target_modules"]), bias="none")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = GRPOConfig(
        **stats.trl_fixed(seed),
        output_dir=tempfile.mkdtemp(prefix="bench-trl-"),
        max_steps=steps,
        per_device_train_batch_size=s["prompts"] * s["group"],
        num_generations=s["group"],
        max_completion_length=s["max_new_tokens"],
        temperature=s["temperature"],
        top_p=s["top_p"],
        learning_rate=s["lr"],
        adam_beta1=s["betas"][0],
        adam_beta2=s["betas"][1],
        adam_epsilon=s["eps"],
        weight_decay=s["weight_decay"],
        max_grad_norm=s["grad_clip"],
    )

    class Eval(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            clock.step_end()
            step = int(state.global_step)
            if step % eval_every == 0 or step == steps:
                t0 = time.perf_counter()
                policy = PolicyModel(model=trainer.model, tokenizer=tok, model_id="trl", spec=resolve_device("cpu", "fp32"))
                clock.curve.append((step, 0.0, held_out(policy, s, seed, eval_size)))
                trainer.model.train()
                clock.add_eval(time.perf_counter() - t0)

    trainer = Timed(model=model, reward_funcs=reward, args=config, train_dataset=dataset, processing_class=tok,
                    callbacks=[Eval()], peft_config=peft_config)
    clock.t_start = time.perf_counter()
    trainer.train()
    return {"version": trl.__version__, **clock.summary(acc0)}


# ---------------------------------------------------------------------------------------------
# OpenTinker
# ---------------------------------------------------------------------------------------------
def run_opentinker(job: dict[str, Any], s: dict[str, Any], acc0: float) -> dict[str, Any]:
    from tinker_algos.run.job import train

    clock = stats.Clock(s["prompts"] * s["group"])

    class Callbacks:
        def on_log(self, line: str) -> None:
            if line.startswith("stage 0 "):  # the clock starts when the first step starts: the run loads the model first
                clock.t_start = time.perf_counter()

        def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
            clock.add_eval(float(metrics.get("time/eval_s", 0.0)))
            clock.step_end()
            if "time/rollout_s" in metrics:
                clock.rollout_s.append(float(metrics["time/rollout_s"]))
            if "eval/accuracy" in metrics:
                clock.curve.append((step, 0.0, float(metrics["eval/accuracy"])))

    with tempfile.TemporaryDirectory(prefix="bench-ot-") as run_dir:
        result = train(job, run_dir=Path(run_dir) / "run", callbacks=Callbacks())
    if result.status != "completed":
        raise RuntimeError(f"the OpenTinker run ended {result.status!r}")
    return clock.summary(acc0)


# ---------------------------------------------------------------------------------------------
# main: one subprocess per run, interleaved
# ---------------------------------------------------------------------------------------------
def child(spec_path: Path, out_path: Path) -> None:
    """One run in this (fresh) process: the threads set before any work, then the side's run,
    with the process's peak resident set over all of it."""
    spec = json.loads(spec_path.read_text())
    import tinker_algos  # noqa: F401  -- first, on both sides: the same OpenMP wait policy
    from tinker_algos.records.memory import GIB, watch

    threads = set_threads(spec["threads"])
    peak = watch().begin()
    from tinker_algos.model.model_files import resolve_model
    from tinker_algos.model.models import PolicyModel

    seed, p = spec["seed"], spec["preset"]
    job = job_dict(seed, p["steps"], p["eval_every"], p["eval_size"], spec["threads"])
    s = settings(job)
    model_dir = resolve_model(s["model"])
    acc0 = spec.get("acc0")
    if acc0 is None:  # the untrained model's score, the same for both sides of a seed: measured once
        acc0 = held_out(PolicyModel.load(model_dir, device="cpu", precision="fp32"), s, seed, p["eval_size"])
    if spec["trainer"] == "trl":
        r = run_trl(s, model_dir, seed, p["steps"], p["eval_every"], p["eval_size"], acc0)
    else:
        r = run_opentinker(job, s, acc0)
    rss = watch().end(peak).bytes.get("rss")
    r.update(torch_threads=threads, omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"), settings=s,
             peak_rss_gib=round(rss / GIB, 3) if rss else None)
    out_path.write_text(json.dumps(r))


def main() -> None:
    args, ns = parse()
    if ns.child:
        child(Path(ns.child[0]), Path(ns.child[1]))
        return
    preset = {k: getattr(ns, k) for k in DEFAULTS}
    sides = stats.sides(ns.only, [0])
    order = stats.run_order(args.threads, stats.int_list(ns.seeds), ns.repeats, sides)
    print(f"settings {preset}; {len(order)} runs", flush=True)
    runs: list[dict[str, Any]] = []
    acc0: dict[int, float] = {}
    args.results.mkdir(parents=True, exist_ok=True)
    partial = args.results / ("vs_trl_smollm2.partial.json" if not args.quick else "vs_trl_smollm2.quick.partial.json")
    with tempfile.TemporaryDirectory(prefix="bench-vs-trl-smollm2-") as tmp:
        for i, o in enumerate(order):
            busy = wait_for_idle(args)
            spec = {**o, "index": i, "preset": preset, "acc0": acc0.get(o["seed"])}
            r = stats.run_child(Path(__file__), spec, Path(tmp))
            acc0.setdefault(o["seed"], r["start_accuracy"])
            r["cpu_busy_waited"] = busy
            runs.append(r)
            partial.write_text(json.dumps({"settings": preset, "runs": runs}, indent=1) + "\n")  # survives an interrupted run
            print(
                f"[{i + 1}/{len(order)}] {o['threads']} thr seed {o['seed']} rep {o['repeat']} {o['trainer']:10s}: "
                f"{r['steps_per_s']:.3f} steps/s, rollout {r['rollout_median_s']:.2f} s + update {r['update_median_s']:.2f} s "
                f"(medians), accuracy {r['start_accuracy']:.3f} -> {r['final_accuracy']:.3f}, peak RSS {r['peak_rss_gib']} GiB, "
                f"load {r['load_before']['loadavg_1m']:.2f} -> {r['load_after']['loadavg_1m']:.2f}, wall {r['wall_s']:.0f} s",
                flush=True,
            )
    rows = stats.aggregate(runs) + (stats.pooled(runs) if len(stats.int_list(ns.seeds)) > 1 else [])
    s = runs[0]["settings"]
    title = (f"GRPO beside TRL on SmolLM2-135M-Instruct (LoRA r={s['lora']['rank']}): {s['prompts']} prompts x {s['group']}, "
             f"{s['max_new_tokens']} new tokens, T={s['temperature']}, {ns.steps} steps (steps 2..N-1 timed), "
             f"medians (min-max) of {ns.repeats} interleaved pair(s) per seed, then over all seeds")
    print_table(title, stats.COLUMNS, stats.markdown_rows(rows, 3))
    trl_version = next((r["version"] for r in runs if r["trainer"] == "trl"), None)
    path = write_results(args, "vs_trl_smollm2", {
        "settings": {**preset, **s, "trl": trl_version, "example": str(EXAMPLE.relative_to(EXAMPLE.parent.parent))},
        "aggregate": rows,
        "runs": runs,
    })
    path.with_suffix(".md").write_text(stats.markdown(title, rows, 3))
    partial.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
