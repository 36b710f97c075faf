"""Run a whole job in this process: ``tinker_algos.train(config, run_dir=...)``.

This is the library mode the scheduler's workers and ``opentinker train`` call. It reads a
:class:`tinker_core.config.JobConfig`, runs its stages in order on one policy, and writes into
``run_dir``::

    metrics.jsonl          one JSON object per logged step (see tinker_algos.records.metrics)
    tensorboard/           the same metrics for TensorBoard
    checkpoints/step-N/    trainer state (weights or adapter, optimizer, RNG), algorithm state,
                           progress.json, and manifest.json (size and SHA-256 of every file,
                           written last); written atomically; the newest `checkpoint.keep_last` kept,
                           and every `checkpoint.keep_every`-th step
    rollouts.jsonl         a sample of each step's episodes and of each evaluation's (logging.rollouts;
                           tinker_core.episodes.RolloutRecord)
    trace.json             each step's phases as Chrome/Perfetto trace events (logging.trace;
                           tinker_core.traces; ``opentinker trace RUN_DIR`` sums them up)
    curve.png              the learning curve, written at the end
    result.json            the final status, step and held-out metrics

If ``run_dir`` already holds a checkpoint and ``checkpoint.resume`` is true, the job continues
from the newest intact one (a damaged newer one is skipped, with a log line saying why), and the
metrics from there on are exactly those of an uninterrupted run.
``callbacks`` may define ``on_metrics(step, metrics)``, ``on_log(line)``,
``on_status(text, short=None)`` (what the run is doing while no step reports: loading the model,
its size, a stage's first step; without it these go to ``on_log``), ``on_checkpoint(step,
path)`` and ``should_stop()`` (polled between steps: when it returns true, the job checkpoints
and returns with status ``"interrupted"``). A resumed run first reports the metrics of the step
it resumes at once more (a scheduler killed before it stored them gets them).

``shared`` runs a LoRA job on a model that other jobs use at the same time (the scheduler's
shared model hosts): instead of loading ``config.model`` the job trains adapter
``shared.adapter`` on ``shared.policy``, and hands every piece of work that touches the model or
the random generators -- set-up, each step with its evaluation, logging and checkpoint -- to
``shared.run(fn)``. The host runs those functions one job at a time, on one thread (torch's
OpenMP thread teams slow each other down when several threads take turns), with each job's own
random state and adapter installed, so a job's metrics are exactly those of a run alone.
Callbacks are called between those pieces (``on_checkpoint`` may block until the scheduler
stored the reports).

The run itself is a :class:`Run`, read top to bottom: :meth:`Run.find_start` (the resume point,
or a finished run's stored result; :mod:`tinker_algos.run.continuation`), :meth:`Run.load` (model, seeds), then per stage :meth:`Run.run_stage` -- :meth:`Run.start_stage` (trainer and
algorithm, restored when resuming there) and for each step :meth:`Run.plan` (evaluate? log?
checkpoint?), :meth:`Run.step` (the algorithm's sample/score/learn, evaluation, log line,
checkpoint) and :meth:`Run.report` (callbacks) -- then :meth:`Run.plot` and :meth:`Run.finish`.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch

from tinker_algos.algorithms import get_algorithm
from tinker_algos.algorithms.base import Algorithm, StageContext
from tinker_algos.distributed.learners import DataParallelTrainer, LearnerLost
from tinker_algos.distributed.replica import ADAPTER, job_lora, load_job_policy
from tinker_algos.hub.cache import clean_atomic_leftovers
from tinker_algos.model.device import seed_everything
from tinker_algos.model.models import PolicyModel, atomic_dir
from tinker_algos.model.prompts import PromptRenderer
from tinker_algos.records.metrics import MetricsLog, plot_curves
from tinker_algos.records.recording import Recorder, phase
from tinker_algos.records.run_dir import make_run_dir
from tinker_algos.rollout.env_probe import check_stage_env
from tinker_algos.rollout.episodes import env_factories, make_env  # noqa: F401  (re-exported: their home was this module)
from tinker_algos.run.callbacks import RunCallbacks
from tinker_algos.run.continuation import (
    JOB_RECORD,
    continuation,
    job_record,
    read_origin,
    stored_result,
)
from tinker_algos.run.lineage import is_fork_origin
from tinker_algos.run.live import LiveSettings
from tinker_algos.run.plan import Progress, StepPlan, kept_steps
from tinker_algos.run.progress import describe_model, quiet_third_party_progress
from tinker_algos.run.resume import newest_intact, run_checkpoints
from tinker_algos.sampling.engine import open_stage_engine
from tinker_algos.training.checkpoint import (
    load_state,
    save_state,
    seal,
    set_rng_state,
)
from tinker_algos.training.trainer import Trainer, TrainerConfig
from tinker_core.config import JobConfig, StageConfig, load_config, parse_config
from tinker_core.errors import ConfigError

if TYPE_CHECKING:
    from tinker_algos.distributed.runtime import Runtime

_T = TypeVar("_T")
#: the ``kind`` in a run checkpoint's manifest (``checkpoints/step-N/manifest.json``)
RUN_CHECKPOINT_KIND = "opentinker-run-checkpoint"


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

    #: the loaded :class:`tinker_algos.model.models.PolicyModel` (the host's; other jobs' adapters are on it)
    policy: PolicyModel
    #: the name of this job's LoRA adapter on ``policy`` (created by the job's first stage)
    adapter: str

    def run(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn()`` when it is this job's turn, with the job's RNG state and adapter
        installed; return its result (or raise its exception)."""
        ...


def train(
    config: JobConfig | dict[str, Any] | str | Path,
    *,
    run_dir: str | Path,
    callbacks: object = None,
    shared: SharedModel | None = None,
) -> TrainResult:
    """Run (or resume) the job ``config`` with everything written under ``run_dir``.

    ``shared``: train on a model shared with other jobs (LoRA jobs only; see the module docstring).
    Hugging Face's own progress bars are switched off in this process (they would fill the job's log).
    """
    quiet_third_party_progress()
    job, cb = _as_config(config), RunCallbacks(callbacks)
    restarts = 0
    while True:
        try:
            return Run(job, Path(run_dir), cb, shared).run()
        except LearnerLost as e:
            if restarts >= job.execution.max_restarts or not job.checkpoint.resume:
                raise
            restarts += 1
            cb.on_log(f"{e}; restarting the learners from the newest checkpoint ({restarts} of {job.execution.max_restarts})")


class Run:
    """One job in one run directory: load, resume, then each stage's steps (sample, score,
    learn), evaluations, metrics, checkpoints, and the learning-curve plot at the end.

    Work that touches the model or the random generators goes through :attr:`in_turn` (the
    shared host's ``run``, or a plain call); callbacks are called between those pieces.
    """

    def __init__(self, job: JobConfig, run_dir: Path, callbacks: RunCallbacks, shared: SharedModel | None) -> None:
        self.given = job  # as started: config.json, checkpoints' job.json
        self.job = job.model_copy(deep=True)  # the run's own: live settings change it (tinker_algos.run.live)
        self.dir = run_dir.absolute()  # absolute before any agent runs: an agent's os.chdir cannot move it
        self.shown_dir = str(run_dir)  # as the caller named it, in the result
        self.cb = callbacks
        self.shared = shared
        self.in_turn: Callable[[Callable[[], Any]], Any] = shared.run if shared is not None else _call
        self.stages = self.job.resolved_stages()
        self.progress = Progress()
        self.resume_from: Path | None = None
        self.global_step = 0
        #: steps each finished stage ran (a checkpoint's job.json records them); None: not known
        self.stage_steps: list[int] | None = []
        self.stage_base = 0  # the global step before the current stage's first step
        self.status = "completed"
        self.last_metrics: dict[str, float] = {}
        self.final_eval: dict[str, float] = {}
        self.checkpoint: Path | None = None
        self.runtime: Runtime | None = None

    def shown(self, path: Path) -> str:
        """``path`` (under the run dir) as the caller named the run dir: a relative run dir gives
        relative paths in callbacks and the result, as before the run dir was made absolute."""
        try:
            return str(Path(self.shown_dir) / path.relative_to(self.dir))
        except ValueError:
            return str(path)

    # ---- the story ----------------------------------------------------------------------------
    def run(self) -> TrainResult:
        stored = self.find_start()
        if stored is not None:
            return stored
        self.load()
        t_start = time.perf_counter()
        try:
            for si in range(self.progress.stage_index, len(self.stages)):
                if not self.run_stage(si):
                    self.status = "interrupted"
                    break
        finally:
            self.log.close()
            if self.runtime is not None:
                self.runtime.close()
        plot = self.plot()
        return self.finish(plot, time.perf_counter() - t_start)

    def find_start(self) -> TrainResult | None:
        """Find the checkpoint to resume from and where the run goes on from it
        (:mod:`tinker_algos.run.continuation`: resume, extend, or refuse a change), then write
        config.json. A finished run with nothing more to run returns its stored result, and its
        run dir is left as it was."""
        make_run_dir(self.dir)  # a new run dir gets the marker --fresh looks for
        for note in clean_atomic_leftovers(self.dir / "checkpoints"):  # a checkpoint a killed run was writing
            self.cb.on_log(f"checkpoints: {note}")
        intact = newest_intact(self.dir, self.cb.on_log) if self.job.checkpoint.resume else None  # damaged ones skipped
        if intact is not None:
            ckpt, progress = intact
            origin = read_origin(ckpt, self.dir / "config.json")
            go_on = continuation(origin, self.given, progress, fork=is_fork_origin(self.dir, ckpt))
            if go_on.progress is None:
                return self.stored_result(ckpt, progress)
            self.resume_from = self.checkpoint = ckpt
            self.progress, self.stage_steps = go_on.progress, go_on.stage_steps
            self.cb.on_log(f"resuming from {ckpt} (step {progress.global_step})")
            if go_on.note:
                self.cb.on_log(go_on.note)
        self.global_step = self.progress.global_step
        (self.dir / "config.json").write_text(self.given.model_dump_json(indent=1), encoding="utf-8")
        return None

    def stored_result(self, ckpt: Path, progress: Progress) -> TrainResult:
        """A finished run's result, as its result.json holds it (rebuilt from metrics.jsonl and
        written when lost); its last logged step is reported once more, as a resumed run does."""
        data, rows = stored_result(self.dir, ckpt, progress.global_step)
        if rows and rows[-1]["step"] == progress.global_step:
            self.cb.on_metrics(progress.global_step, {k: v for k, v in rows[-1].items() if k not in ("step", "stage")})
        self.cb.on_log(f"already {data['status']} after {data['step']} steps: nothing to run (raise the last stage's "
                       "algorithm.steps to extend it, or fork it: opentinker fork RUN_DIR@STEP KEY=VALUE)")
        return TrainResult(**{k: data.get(k) for k in TrainResult.__dataclass_fields__ if k in data})

    def load(self) -> None:
        """Load the model, seed every RNG, open the metrics log and the recorder."""
        job = self.job
        if self.shared is not None:
            if job.lora is None:
                raise ValueError("train(shared=...) trains a LoRA adapter; this job fine-tunes the whole model (lora: null)")
            self.policy = self.shared.policy
        else:
            self.cb.on_status(f"loading model {job.model.name}")
            t0 = time.perf_counter()
            self.policy = load_job_policy(job)
            self.cb.on_status(f"model {job.model.name} loaded in {time.perf_counter() - t0:.1f} s: {describe_model(self.policy)}")
        # model.chat_template: how env observations become prompts (a ConfigError naming it when unusable)
        self.renderer = PromptRenderer.from_config(self.policy.tokenizer, job.model.chat_template)
        self.in_turn(self.seed)  # after loading: a shared model was loaded once, earlier
        self.lora = job_lora(job)
        if job.execution.distributed:
            if self.shared is not None:
                raise ConfigError(["execution: a job on a shared model host runs in the host's process; give it no execution section (or run it alone)"])
            from tinker_algos.distributed.runtime import Runtime

            self.cb.on_status(f"starting {job.execution.rollout_workers} rollout workers and {job.execution.learners} learners on Ray")
            self.runtime = Runtime(job, self.dir, self.policy.device)
        self.adapter = (self.shared.adapter if self.shared is not None else ADAPTER) if self.lora else None
        self.log = MetricsLog.for_job(self.dir, job, resume_step=self.global_step)
        resumed = self.global_step if self.resume_from is not None else None
        self.recorder = Recorder.for_run(self.dir, job.logging, job_name=job.name, resume_step=resumed)
        self.recorder.on_records = self.log.log_rollouts if self.log.trackers else None
        self.live = LiveSettings.for_run(self.dir, job, self.stages, self.given, self.cb.on_log, resume_step=resumed)
        last = self.log.rows[-1] if self.resume_from is not None and self.log.rows else None
        if last is not None and last["step"] == self.global_step:
            # the checkpoint's step once more: a caller killed before it kept that step's report
            # (a scheduler storing it while the checkpoint was written) gets it now
            self.cb.on_metrics(self.global_step, {k: v for k, v in last.items() if k not in ("step", "stage")})

    def seed(self) -> None:
        seed_everything(self.job.seed)
        torch.use_deterministic_algorithms(True, warn_only=True)

    def run_stage(self, si: int) -> bool:
        """Stage ``si`` from its first step not yet done; False when ``should_stop`` cut it short."""
        stage = self.stages[si]
        steps = stage.algorithm.steps
        start = self.progress.stage_step if si == self.progress.stage_index else 0
        trainer, algo = self.in_turn(partial(self.start_stage, si, start))
        self.stage_base = self.global_step - start
        first, last = self.global_step + 1, self.stage_base + steps  # the numbering of the step lines
        self.cb.on_log(f"stage {si} '{stage.name}': {stage.algorithm.name}, steps {first}..{last}")
        self.cb.on_status(f"first step of stage {si} ({stage.algorithm.name}): sampling, scoring, learning", short=f"step {self.global_step + 1}")
        for k in range(start, steps):
            if self.cb.should_stop():
                self.save_interrupted(Progress(si, k, self.global_step), trainer, algo)
                return False
            self.global_step += 1
            live = self.live.boundary(self.global_step, si, partial(setattr, trainer.config, "lr"))
            plan = self.plan(si, k, logged=bool(live))
            plan, metrics, ev, saved = self.in_turn(partial(self.step, stage, trainer, algo, plan, live))
            self.report(plan, metrics, ev, saved)
            if plan.ends_stage_early:
                reached = ", ".join(f"{m}={ev[m]:.3f}" for m in stage.algorithm.stop_at or {})
                self.cb.on_log(f"stage {si} '{stage.name}' reached its stop_at ({reached}) after {k + 1} of {steps} steps")
                break
        if self.stage_steps is not None:
            self.stage_steps.append(self.global_step - self.stage_base)
        return True

    def start_stage(self, si: int, start: int) -> tuple[Trainer, Algorithm]:
        """The stage's trainer and algorithm, with the checkpoint's state when it resumes here.

        Mid-stage (``start > 0``): weights, optimizer, RNG and algorithm state. At a stage boundary:
        the weights and the RNG (the new stage's optimizer starts fresh, its random draws continue).
        The trainer state is loaded before the algorithm is built, so what the algorithm copies at
        construction (a reference policy) is the stage's real starting point.
        """
        stage = self.stages[si]
        group = self.runtime.learners if self.runtime is not None else None
        trainer_cls = Trainer if group is None else DataParallelTrainer
        trainer = trainer_cls(self.policy, trainer_config(stage), adapter=self.adapter, lora=self.lora, adapter_seed=self.job.seed)
        resuming_here = self.resume_from is not None and si == self.progress.stage_index
        if resuming_here:
            assert self.resume_from is not None
            # verified in load(): the run's manifest covers the trainer's files too
            load_state(self.resume_from / "trainer", trainer, with_optimizer=start > 0, check=False)
            if start == 0:
                set_rng_state(torch.load(self.resume_from / "trainer" / "rng_state.pt", weights_only=False))
        if isinstance(trainer, DataParallelTrainer) and group is not None:
            trainer.attach(group)  # every learner starts from these weights and this optimizer state
        own_env = bool(self.job.stages) and self.job.stages[si].env is not None
        check_stage_env(stage.env, f"stages[{si}].env" if own_env else "env")  # a bad env argument: one line, before any rollout
        env_factory, eval_env_factory = env_factories(stage.env)
        ctx = StageContext(
            self.job, stage, si, self.policy, trainer, self.dir, self.adapter, env_factory, eval_env_factory, self.cb.on_log,
            renderer=self.renderer.with_system_prompt(stage.env.system_prompt if stage.env is not None else None),
            runtime=self.runtime, engine=open_stage_engine(self.job, stage, self.policy, self.adapter, self.dir),
        )
        algo = get_algorithm(stage.algorithm.name)(ctx)
        if resuming_here:
            assert self.resume_from is not None
            algo.load_files(self.resume_from, with_optimizer=start > 0)
        if resuming_here and start > 0:
            assert self.resume_from is not None
            algo.load_state_dict(torch.load(self.resume_from / "algorithm.pt", weights_only=False))
        return trainer, algo

    def plan(self, si: int, k: int, *, logged: bool = False) -> StepPlan:
        """Step ``k`` of stage ``si``: evaluate? log? checkpoint, and as what progress?"""
        algo = self.stages[si].algorithm
        last = k == algo.steps - 1
        every = self.job.checkpoint.every
        save_as = None
        if last:
            save_as = Progress(si + 1, 0, self.global_step)
        elif every and (k + 1) % every == 0:
            save_as = Progress(si, k + 1, self.global_step)
        return StepPlan(
            stage_step=k,
            global_step=self.global_step,
            evaluate=last or bool(algo.eval_every and (k + 1) % algo.eval_every == 0),
            report=last or logged or self.global_step % self.job.logging.every == 0,
            save_as=save_as,
            stop_at=algo.stop_at,
            next_stage=None if last else Progress(si + 1, 0, self.global_step),
        )

    def step(
        self, stage: StageConfig, trainer: Trainer, algo: Algorithm, plan: StepPlan, live: dict[str, float]
    ) -> tuple[StepPlan, dict[str, float], dict[str, float], Path | None]:
        """One optimizer step (sample, score, learn), then its evaluation, log line (with the live
        settings changed before it, ``live``) and checkpoint;
        the plan comes back updated by the evaluation (a reached ``stop_at`` ends the stage).
        The recorder is active meanwhile: the step's phases and episodes are recorded."""
        with self.recorder.active(stage.name or stage.algorithm.name, plan.global_step):
            t0 = time.perf_counter()
            metrics = algo.step(plan.stage_step)
            metrics["time/step_s"] = time.perf_counter() - t0
            metrics.update(live)
            ev: dict[str, float] = {}
            if plan.evaluate:
                t1 = time.perf_counter()
                with phase("evaluate"):
                    ev = algo.evaluate()
                metrics.update(ev)
                metrics["time/eval_s"] = time.perf_counter() - t1
                plan = plan.after_evaluation(ev)
            metrics.update(self.recorder.memory_metrics())
            if plan.report:
                self.log.log(plan.global_step, stage.name or stage.algorithm.name, metrics)
            saved = None
            if plan.save_as is not None:
                with phase("checkpoint"):
                    saved = self.save(plan.save_as, trainer, algo)
            return plan, metrics, ev, saved

    def report(self, plan: StepPlan, metrics: dict[str, float], ev: dict[str, float], saved: Path | None) -> None:
        """Callbacks after a step, between turns (``on_checkpoint`` may wait for the scheduler)."""
        if ev:
            self.final_eval = ev
            self.cb.on_log(f"step {plan.global_step}: " + ", ".join(f"{k}={v:.3f}" for k, v in sorted(ev.items())))
        self.last_metrics = metrics
        if plan.report:
            self.cb.on_metrics(plan.global_step, metrics)
        if saved is not None:
            self.checkpoint = saved
            self.cb.on_checkpoint(plan.global_step, self.shown(saved))

    def save_interrupted(self, here: Progress, trainer: Trainer, algo: Algorithm) -> None:
        """Checkpoint where ``should_stop`` stopped the run, unless the last step just did."""
        if self.checkpoint is not None and self.checkpoint.name.endswith(f"{here.global_step:06d}"):
            return
        self.checkpoint = self.in_turn(partial(self.save, here, trainer, algo))
        self.cb.on_checkpoint(here.global_step, self.shown(self.checkpoint))

    def save(self, progress: Progress, trainer: Trainer, algo: Algorithm) -> Path:
        """``checkpoints/step-N``: trainer state, algorithm state, progress; then the keep policy
        (``checkpoint.keep_last``, ``keep_every``) deletes the others."""
        done = self.stage_steps
        if done is not None and progress.stage_index > len(done):  # this checkpoint ends the stage
            done = [*done, progress.global_step - self.stage_base]

        def write(tmp: Path) -> None:
            save_state(tmp / "trainer", trainer, data_cursor=asdict(progress))
            torch.save(algo.state_dict(), tmp / "algorithm.pt")
            algo.save_files(tmp)  # e.g. roles/<role>/ (multi-agent learners)
            (tmp / JOB_RECORD).write_text(json.dumps(job_record(self.given, done), indent=1), encoding="utf-8")
            (tmp / "progress.json").write_text(json.dumps(asdict(progress), sort_keys=True, indent=1), encoding="utf-8")
            seal(tmp, {"kind": RUN_CHECKPOINT_KIND, "progress": asdict(progress)})  # last: checksums of all the above

        final = atomic_dir(self.dir / "checkpoints" / f"step-{progress.global_step:06d}", write, overwrite=True)
        found = {int(p.name[5:]): p for p in run_checkpoints(self.dir)}
        keep = kept_steps(found, self.job.checkpoint.keep_last, self.job.checkpoint.keep_every)
        for step in sorted(found.keys() - keep):
            shutil.rmtree(found[step], ignore_errors=True)
        return final

    def plot(self) -> Path | None:
        if not (self.job.logging.plot and self.log.rows):
            return None
        # in a turn: matplotlib is not thread-safe, jobs sharing a process plot one at a time
        title = f"{self.job.name} (seed {self.job.seed})"
        return self.in_turn(partial(plot_curves, self.log.rows, self.dir / "curve.png", title=title))

    def finish(self, plot: Path | None, seconds: float) -> TrainResult:
        """result.json and the result."""
        result = TrainResult(
            status=self.status,
            step=self.global_step,
            metrics=self.last_metrics,
            run_dir=self.shown_dir,
            checkpoint=self.shown(self.checkpoint) if self.checkpoint else None,
            plot=str(plot) if plot else None,
            eval=self.final_eval,
        )
        (self.dir / "result.json").write_text(json.dumps({**result.to_dict(), "seconds": seconds}, indent=1), encoding="utf-8")
        self.cb.on_log(f"{self.status} after {self.global_step} steps")
        return result


# ---- helpers ------------------------------------------------------------------------------------


def _call(fn: Callable[[], _T]) -> _T:
    return fn()


def _as_config(config: JobConfig | dict[str, Any] | str | Path) -> JobConfig:
    if isinstance(config, JobConfig):
        return config
    if isinstance(config, dict):
        return parse_config(config)
    return load_config(config)


def trainer_config(stage: StageConfig) -> TrainerConfig:
    """The trainer settings of a stage: its optimizer section, its steps, its micro-batch size."""
    opt, algo = stage.optimizer, stage.algorithm
    assert opt is not None
    return TrainerConfig(
        optimizer=opt.name,
        lr=opt.lr,
        weight_decay=opt.weight_decay,
        optimizer_config=dict(opt.params),
        schedule=opt.schedule,
        warmup_steps=opt.warmup_steps,
        total_steps=algo.steps,
        max_grad_norm=opt.grad_clip,
        micro_batch_size=algo.micro_batch_size,
        share_prefix=algo.share_prefix,
        chunked_logprobs=algo.chunked_logprobs,
        activation_checkpointing=algo.activation_checkpointing,
    )
