"""Running the jobs of a compare: embedded (one after another, or ``workers`` at a time in child
processes), resumable; and what both modes share.

Each job has a directory ``<output>/jobs/<variant>/seed-<k>``. Embedded, it is the job's run
dir (``tinker_algos.train(config, run_dir=...)``): a job whose ``result.json`` says
``completed`` is skipped on a rerun, and an interrupted one resumes from its checkpoint. On a
scheduler (:mod:`tinker_algos.compare.scheduler`) it holds ``job.json`` (the job id, its state,
the scheduler's run dir) and, once the job succeeded, ``metrics.jsonl`` as the scheduler streamed
it. A directory made for another config (the compare file changed) is a :class:`CompareError`
before anything runs.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_algos.compare.spec import CompareError, JobSpec
from tinker_core.config import parse_config
from tinker_core.errors import ConfigError
from tinker_core.run_files import METRICS_FILE, read_metrics

JOB_RECORD = "job.json"
WORKER_DIED = "worker_died"
"""The status of an embedded job whose worker process died (``--jobs`` > 1): the job fails, the
others finish."""


@dataclass
class Outcome:
    """How one job ended: ``completed`` (with its metrics rows) or ``failed`` (with the error)."""

    job: JobSpec
    status: str
    run_dir: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    job_id: str | None = None
    error: str | None = None
    skipped: bool = False


def job_dir(out: Path, job: JobSpec) -> Path:
    return out / "jobs" / job.variant / f"seed-{job.seed}"


def config_json(job: JobSpec) -> dict[str, Any]:
    """The job's validated config as a run dir's ``config.json`` holds it."""
    return json.loads(parse_config(job.config, check_plugins=False).model_dump_json())


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def same_config(recorded: dict[str, Any], job: JobSpec) -> bool:
    """Whether a job dir's recorded config is ``job``'s: equal as written, or equal once read
    again by today's config models (a run written before a release added a field with a default
    records no value for it; it is still the same job). A recorded config today's models reject
    is another config."""
    current = config_json(job)
    if recorded == current:
        return True
    try:
        again = json.loads(parse_config(recorded, check_plugins=False).model_dump_json())
    except ConfigError:
        return False
    return bool(again == current)


def check_not_stale(out: Path, jobs: list[JobSpec]) -> None:
    """A :class:`CompareError` when a job's directory holds a run of a different config."""
    for job in jobs:
        d = job_dir(out, job)
        recorded = _read_json(d / "config.json") or (_read_json(d / JOB_RECORD) or {}).get("config")
        if recorded is not None and not same_config(recorded, job):
            raise CompareError(
                f"{d} holds a run of another config (the compare file changed since); remove it, or give another --output"
            )


def completed_embedded(d: Path) -> bool:
    result = _read_json(d / "result.json")
    return bool(result and result.get("status") == "completed" and (d / METRICS_FILE).is_file())


class ProgressLine:
    """Counts jobs done / running / queued and prints a line whenever they change."""

    def __init__(self, total: int, echo: Callable[[str], None]) -> None:
        self.total, self.echo = total, echo
        self.done = self.running = self.failed = 0
        self.lock = threading.Lock()

    def update(self, *, done: int = 0, running: int = 0, failed: int = 0, note: str = "") -> None:
        with self.lock:
            self.done += done
            self.running += running
            self.failed += failed
            queued = self.total - self.done - self.running - self.failed
            failed_s = f", {self.failed} failed" if self.failed else ""
            self.echo(f"jobs: {self.done} done, {self.running} running, {queued} queued{failed_s}" + (f"  ({note})" if note else ""))


def _train_in_child(config: dict[str, Any], run_dir: str) -> tuple[str, int, str | None]:
    """Run one job in a worker process: ``(status, step, bad-input error or None)``, all picklable."""
    from tinker_algos.model.device import DeviceError
    from tinker_algos.model.model_files import ModelLoadError
    from tinker_algos.run.job import train
    from tinker_algos.training.checkpoint import CheckpointError

    try:
        result = train(config, run_dir=run_dir)
    except (ConfigError, CheckpointError, DeviceError, ModelLoadError) as e:  # what `train` reports as bad input
        return "error", 0, str(e)
    return result.status, result.step, None


def run_embedded(jobs: list[JobSpec], out: Path, echo: Callable[[str], None], workers: int = 1) -> list[Outcome]:
    """Run every job not completed yet: in this process one after another (``workers == 1``), or
    ``workers`` at a time, each in its own child process (spawned, so each loads torch afresh and
    keeps its own thread settings: give the jobs ``model.threads`` so that workers x threads does
    not exceed the cores)."""
    outcomes: list[Outcome] = []
    todo: list[JobSpec] = []
    for job in jobs:
        d = job_dir(out, job)
        if completed_embedded(d):
            outcomes.append(Outcome(job, "completed", str(d), read_metrics(d / METRICS_FILE), skipped=True))
        else:
            todo.append(job)
    progress = ProgressLine(len(jobs), echo)
    progress.update(done=len(outcomes), note=f"{len(outcomes)} already completed" if outcomes else "")
    if not todo:
        return outcomes
    try:
        import tinker_algos.run.job  # noqa: F401  (torch and transformers, checked before any job starts)
    except ImportError as e:  # torch or transformers missing
        raise CompareError(f"embedded compare needs tinker-algos' training stack ({e}); pip install tinker-algos, or pass --scheduler") from None
    starts: dict[str, float] = {}

    def started(job: JobSpec) -> None:
        starts[job.key] = time.perf_counter()
        progress.update(running=1, note=f"{job.key}: running")

    def finished(job: JobSpec, status: str, step: int, error: str | None) -> None:
        d = job_dir(out, job)
        if status == WORKER_DIED:
            outcomes.append(Outcome(job, "failed", str(d), error=error))
            progress.update(running=-1, failed=1, note=f"{job.key}: its worker process died")
            return
        if error is not None:
            raise CompareError(f"{job.key} ({d}): {error}")
        if status == "completed":
            outcomes.append(Outcome(job, "completed", str(d), read_metrics(d / METRICS_FILE)))
            progress.update(running=-1, done=1, note=f"{job.key}: completed in {time.perf_counter() - starts[job.key]:.1f} s")
        else:
            outcomes.append(Outcome(job, "failed", str(d), error=f"ended {status} at step {step}"))
            progress.update(running=-1, failed=1, note=f"{job.key}: {status}")

    if workers == 1:
        for job in todo:
            started(job)
            finished(job, *_train_in_child(job.config, str(job_dir(out, job))))
    else:
        _run_in_processes(todo, out, workers, started, finished)
    order = {j.key: i for i, j in enumerate(jobs)}
    return sorted(outcomes, key=lambda o: order[o.job.key])


def _run_in_processes(
    todo: list[JobSpec],
    out: Path,
    workers: int,
    started: Callable[[JobSpec], None],
    finished: Callable[[JobSpec, str, int, str | None], None],
) -> None:
    """``todo`` in spawned processes, at most ``workers`` running at once, each job in a process
    (a one-worker pool) of its own: a worker that dies (killed, out of memory) fails its job
    (:data:`WORKER_DIED`) and the others go on. A bad-input error (``finished`` raising) cancels
    the jobs not started yet."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    queue = list(todo)
    context = multiprocessing.get_context("spawn")
    running: dict[Future[tuple[str, int, str | None]], tuple[JobSpec, ProcessPoolExecutor]] = {}
    try:
        while queue or running:
            while queue and len(running) < workers:
                job = queue.pop(0)
                started(job)
                pool = ProcessPoolExecutor(max_workers=1, mp_context=context)
                running[pool.submit(_train_in_child, job.config, str(job_dir(out, job)))] = (job, pool)
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job, pool = running.pop(future)
                pool.shutdown(wait=True)
                try:
                    outcome = future.result()
                except BrokenProcessPool:
                    outcome = (WORKER_DIED, 0, "its worker process died before the job finished (killed, or out of memory); "
                                               "rerun the compare to resume it from its last checkpoint")
                finished(job, *outcome)
    finally:
        for future, (_job, pool) in running.items():
            future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
