"""Run a whole job in this process: ``tinker_algos.train(config, run_dir=...)``.

This is the library mode the scheduler's workers and ``opentinker train`` call. It reads a
:class:`tinker_core.config.JobConfig`, runs its stages in order on one policy, and writes into
``run_dir``::

    metrics.jsonl          one JSON object per logged step (see tinker_algos.metrics)
    tensorboard/           the same metrics for TensorBoard
    checkpoints/step-N/    trainer state (weights or adapter, optimizer, RNG), algorithm state,
                           progress.json; written atomically, the newest `checkpoint.keep` kept
    curve.png              the learning curve, written at the end
    result.json            the final status, step and held-out metrics

If ``run_dir`` already holds a checkpoint and ``checkpoint.resume`` is true, the job continues
from the newest one, and the metrics from there on are exactly those of an uninterrupted run.
``callbacks`` may define ``on_metrics(step, metrics)``, ``on_log(line)``,
``on_checkpoint(step, path)`` and ``should_stop()`` (polled between steps: when it returns true,
the job checkpoints and returns with status ``"interrupted"``).

``shared`` runs a LoRA job on a model that other jobs use at the same time (the scheduler's
shared model hosts): instead of loading ``config.model`` the job trains adapter
``shared.adapter`` on ``shared.policy``, and hands every piece of work that touches the model or
the random generators -- set-up, each step with its evaluation, logging and checkpoint -- to
``shared.run(fn)``. The host runs those functions one job at a time, on one thread (torch's
OpenMP thread teams slow each other down when several threads take turns), with each job's own
random state and adapter installed, so a job's metrics are exactly those of a run alone.
Callbacks are called between those pieces (``on_checkpoint`` may block until the scheduler
stored the reports).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tinker_core.config import JobConfig, StageConfig, load_config, parse_config

_T = TypeVar("_T")
ADAPTER = "policy"


@dataclass
class TrainResult:
    status: str
    step: int
    metrics: dict[str, float]
    run_dir: str
    checkpoint: str | None
    plot: str | None
    eval: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SharedModel(Protocol):
    """A base model shared with other jobs (see the module docstring): what ``train(shared=...)`` needs."""

    #: the loaded :class:`tinker_algos.models.PolicyModel` (the host's; other jobs' adapters are on it)
    policy: Any
    #: the name of this job's LoRA adapter on ``policy`` (created by the job's first stage)
    adapter: str

    def run(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn()`` when it is this job's turn, with the job's RNG state and adapter
        installed; return its result (or raise its exception)."""
        ...


class _Callbacks:
    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.obj, name, None)
        if fn is None:
            return (lambda *a, **k: False) if name == "should_stop" else (lambda *a, **k: None)
        return fn


def _call(fn: Callable[[], _T]) -> _T:
    return fn()


def _as_config(config: JobConfig | dict[str, Any] | str | Path) -> JobConfig:
    if isinstance(config, JobConfig):
        return config
    if isinstance(config, dict):
        return parse_config(config)
    return load_config(config)


def _env_factories(stage: StageConfig) -> tuple[Any, Any]:
    env = stage.env
    if env is None:
        return None, None

    def build(kwargs: dict[str, Any]) -> Any:
        if env.address:
            from tinker_core.remote import RemoteEnv

            return RemoteEnv(env.address, env.id, **kwargs)
        import tinker_core

        return tinker_core.make_env(env.id, **kwargs)

    train_kwargs = dict(env.kwargs)
    eval_kwargs = dict(env.eval_kwargs) if env.eval_kwargs is not None else dict(env.kwargs)
    return (lambda: build(train_kwargs)), (lambda: build(eval_kwargs))


def _checkpoints(run_dir: Path) -> list[Path]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith("step-") and (p / "progress.json").is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def _write_checkpoint(run_dir: Path, trainer: Any, algo: Any, progress: dict[str, Any], keep: int) -> Path:
    import torch

    from tinker_algos.checkpoint import save_state
    from tinker_algos.models import atomic_dir

    def write(tmp: Path) -> None:
        save_state(tmp / "trainer", trainer, data_cursor=progress)
        torch.save(algo.state_dict(), tmp / "algorithm.pt")
        (tmp / "progress.json").write_text(json.dumps(progress, sort_keys=True, indent=1), encoding="utf-8")

    final = atomic_dir(run_dir / "checkpoints" / f"step-{progress['global_step']:06d}", write, overwrite=True)
    for old in _checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def train(
    config: JobConfig | dict[str, Any] | str | Path,
    *,
    run_dir: str | Path,
    callbacks: Any = None,
    shared: SharedModel | None = None,
) -> TrainResult:
    """Run (or resume) the job ``config`` with everything written under ``run_dir``.

    ``shared``: train on a model shared with other jobs (LoRA jobs only; see the module docstring).
    """
    import torch

    from tinker_algos.algorithms import get_algorithm
    from tinker_algos.algorithms.base import StageContext
    from tinker_algos.checkpoint import load_state, set_rng_state
    from tinker_algos.device import resolve_device, seed_everything
    from tinker_algos.metrics import MetricsLog, plot_curves
    from tinker_algos.models import LoraSpec, PolicyModel
    from tinker_algos.trainer import Trainer, TrainerConfig

    job = _as_config(config)
    cb = _Callbacks(callbacks)
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(job.model_dump_json(indent=1), encoding="utf-8")
    stages = job.resolved_stages()

    resume_from = _checkpoints(run)[-1] if job.checkpoint.resume and _checkpoints(run) else None
    progress = json.loads((resume_from / "progress.json").read_text()) if resume_from else {"stage_index": 0, "stage_step": 0, "global_step": 0}
    if resume_from:
        cb.on_log(f"resuming from {resume_from} (step {progress['global_step']})")

    in_turn: Callable[[Callable[[], Any]], Any] = _call
    if shared is not None:
        if job.lora is None:
            raise ValueError("train(shared=...) trains a LoRA adapter; this job fine-tunes the whole model (lora: null)")
        policy, in_turn = shared.policy, shared.run
    else:
        spec = resolve_device(job.model.device, job.model.precision)
        policy = PolicyModel.load(
            job.model.name, spec=spec, tokenizer=job.model.tokenizer, revision=job.model.revision
        )

    def seed() -> None:  # after the model is loaded: a shared model was loaded once, earlier
        seed_everything(job.seed)
        torch.use_deterministic_algorithms(True, warn_only=True)

    in_turn(seed)
    lora = (
        LoraSpec(rank=job.lora.rank, alpha=job.lora.alpha, dropout=job.lora.dropout, target_modules=list(job.lora.target_modules))
        if job.lora
        else None
    )
    adapter = (shared.adapter if shared is not None else ADAPTER) if lora else None
    log = MetricsLog(run, jsonl=job.logging.jsonl, tensorboard=job.logging.tensorboard, resume_step=progress["global_step"])
    global_step = progress["global_step"]
    last_metrics: dict[str, float] = {}
    final_eval: dict[str, float] = {}
    checkpoint: Path | None = resume_from
    status = "completed"
    t_start = time.perf_counter()
    try:
        for si in range(progress["stage_index"], len(stages)):
            stage = stages[si]
            assert stage.optimizer is not None and stage.rollout is not None
            algo_cfg = stage.algorithm
            opt = stage.optimizer
            tcfg = TrainerConfig(
                optimizer=opt.name,
                lr=opt.lr,
                weight_decay=opt.weight_decay,
                optimizer_config=dict(opt.params),
                schedule=opt.schedule,
                warmup_steps=opt.warmup_steps,
                total_steps=algo_cfg.steps,
                max_grad_norm=opt.grad_clip,
                micro_batch_size=algo_cfg.micro_batch_size,
            )
            start = progress["stage_step"] if si == progress["stage_index"] else 0
            env_factory, eval_factory = _env_factories(stage)
            resuming_here = resume_from is not None and si == progress["stage_index"]

            def build(si: int = si, stage: StageConfig = stage, tcfg: TrainerConfig = tcfg,
                      start: int = start, resuming_here: bool = resuming_here,
                      env_factory: Any = env_factory, eval_factory: Any = eval_factory) -> tuple[Any, Any]:
                trainer = Trainer(policy, tcfg, adapter=adapter, lora=lora, adapter_seed=job.seed)
                if resuming_here:
                    assert resume_from is not None
                    # mid-stage: weights, optimizer and RNG; at a stage boundary: the weights and
                    # the RNG (the new stage's optimizer starts fresh, its random draws continue).
                    # Loaded before the algorithm is built, so what it copies at construction (a
                    # reference policy) is the stage's real starting point.
                    load_state(resume_from / "trainer", trainer, with_optimizer=start > 0)
                    if start == 0:
                        set_rng_state(torch.load(resume_from / "trainer" / "rng_state.pt", weights_only=False))
                ctx = StageContext(job, stage, si, policy, trainer, run, adapter, env_factory, eval_factory, cb.on_log)
                algo = get_algorithm(stage.algorithm.name)(ctx)
                if resuming_here and start > 0:
                    algo.load_state_dict(torch.load(resume_from / "algorithm.pt", weights_only=False))
                return trainer, algo

            trainer, algo = in_turn(build)
            cb.on_log(f"stage {si} '{stage.name}': {algo_cfg.name}, steps {start}..{algo_cfg.steps}")
            for k in range(start, algo_cfg.steps):
                if cb.should_stop():
                    status = "interrupted"
                    break
                global_step += 1
                last_step = k == algo_cfg.steps - 1
                every, ck = algo_cfg.eval_every, job.checkpoint.every
                evaluate = last_step or bool(every and (k + 1) % every == 0)
                report = last_step or global_step % job.logging.every == 0
                nxt = None
                if last_step or (ck and (k + 1) % ck == 0):
                    nxt = {"stage_index": si + 1, "stage_step": 0} if last_step else {"stage_index": si, "stage_step": k + 1}
                    nxt["global_step"] = global_step

                def one_step(k: int = k, gs: int = global_step, evaluate: bool = evaluate, report: bool = report,
                             nxt: dict[str, int] | None = nxt, name: str = stage.name or algo_cfg.name,
                             algo: Any = algo, trainer: Any = trainer) -> tuple[dict[str, float], dict[str, float], Path | None]:
                    t0 = time.perf_counter()
                    metrics = algo.step(k)
                    metrics["time/step_s"] = time.perf_counter() - t0
                    ev: dict[str, float] = {}
                    if evaluate:
                        t1 = time.perf_counter()
                        ev = algo.evaluate()
                        metrics.update(ev)
                        metrics["time/eval_s"] = time.perf_counter() - t1
                    if report:
                        log.log(gs, name, metrics)
                    saved = _write_checkpoint(run, trainer, algo, nxt, job.checkpoint.keep) if nxt else None
                    return metrics, ev, saved

                metrics, ev, saved = in_turn(one_step)
                if ev:
                    final_eval = ev
                    cb.on_log(f"step {global_step}: " + ", ".join(f"{k2}={v:.3f}" for k2, v in sorted(ev.items())))
                last_metrics = metrics
                # callbacks between turns: on_checkpoint may wait for the scheduler
                if report:
                    cb.on_metrics(global_step, metrics)
                if saved is not None:
                    checkpoint = saved
                    cb.on_checkpoint(global_step, str(saved))
            if status == "interrupted":
                if checkpoint is None or not checkpoint.name.endswith(f"{global_step:06d}"):
                    here = {"stage_index": si, "stage_step": k, "global_step": global_step}
                    checkpoint = in_turn(lambda here=here, trainer=trainer, algo=algo: _write_checkpoint(run, trainer, algo, here, job.checkpoint.keep))
                    cb.on_checkpoint(global_step, str(checkpoint))
                break
    finally:
        log.close()
    plot = None
    if job.logging.plot and log.rows:
        # in a turn: matplotlib is not thread-safe, jobs sharing a process plot one at a time
        plot = in_turn(lambda: plot_curves(log.rows, run / "curve.png", title=f"{job.name} (seed {job.seed})"))
    result = TrainResult(
        status=status,
        step=global_step,
        metrics=last_metrics,
        run_dir=str(run),
        checkpoint=str(checkpoint) if checkpoint else None,
        plot=str(plot) if plot else None,
        eval=final_eval,
    )
    (run / "result.json").write_text(json.dumps({**result.to_dict(), "seconds": time.perf_counter() - t_start}, indent=1), encoding="utf-8")
    cb.on_log(f"{status} after {global_step} steps")
    return result
