"""Whole LoRA jobs (``tinker_algos.train``) running on a shared model host.

The scheduler routes JobService LoRA jobs whose base model a host serves onto that host
(:meth:`tinker_scheduler.model_host.ModelHost.run_job`). A job runs in a thread of the host and
trains its own adapter on the host's model; every unit of its work -- set-up, each training step
with its evaluation and checkpoint -- is a *turn*: a function queued on the host's
:class:`~tinker_scheduler.host_executor.TurnExecutor` next to the session requests. During a turn
the job's own python, numpy and torch random states and its adapter are installed, so its
metrics equal those of the job run alone with the same seed (tested). A job's turn is a whole
step, a session's a request.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

from tinker_scheduler.errors import StatusError
from tinker_scheduler.host_executor import TurnExecutor

logger = logging.getLogger("tinker_scheduler.model_host")

#: Finished jobs whose last reports a host keeps until the scheduler drains them.
FINISHED_JOBS_KEPT = 256


class JobAborted(Exception):
    """Raised in a job's thread at its next turn after :meth:`HostedJobs.abort`."""


def job_adapter_name(job_id: str) -> str:
    """The peft adapter name of a job on a shared host."""
    return "j-" + "".join(c if c.isalnum() or c in "_-" else "_" for c in job_id)


class HostedJob:
    """What a job on a host receives as ``shared`` (``tinker_algos.run.SharedModel``)."""

    def __init__(self, jobs: HostedJobs, job_id: str) -> None:
        self._jobs = jobs
        self.job_id = job_id
        self.qid = f"job:{job_id}"  # its queue on the executor
        self.adapter = job_adapter_name(job_id)
        self.policy = jobs.policy
        self.rng: Any = None  # the job's RNG states between turns (None: not started)
        self.aborted = False
        self.worker: Any = None  # its tinker_scheduler.worker.JobWorker (reports, stop flag)

    def run(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the host's executor thread at this job's turn (``SharedModel.run``)."""
        return self._jobs.turn(self, fn)


class HostedJobs:
    """The jobs of one host: start, reports, stop and abort (the host's Ray methods delegate here).

    Args:
        policy: the host's :class:`tinker_algos.model.models.PolicyModel`.
        executor: the host's executor; each job gets a queue ``job:<id>`` on it.
        describe: a line for the job's log naming the host and what else runs on it.
    """

    def __init__(self, policy: Any, executor: TurnExecutor, describe: Callable[[HostedJob, int], str]) -> None:
        self.policy = policy
        self.executor = executor
        self._describe = describe
        self._jobs: dict[str, HostedJob] = {}
        self._finished: OrderedDict[str, Any] = OrderedDict()  # job id -> JobWorker not drained yet
        self._lock = threading.Lock()

    def run(
        self, job_id: str, runner: str, config: Any, run_dir: str, allowed_imports: tuple[str, ...] | None = None,
    ) -> dict[str, Any]:
        """Run a LoRA job on the host's model until it ends; never raises (see ``ModelHost.run_job``)."""
        from tinker_scheduler.worker import JobWorker

        job = HostedJob(self, job_id)
        job.worker = JobWorker(job_id)
        with self._lock:
            if job_id in self._jobs or not self.executor.open(job.qid):
                return {"status": "failed", "error": f"job {job_id} is already running on this host", "config_error": False}
            self._jobs[job_id] = job
            others = len(self._jobs) - 1
        job.worker.report({"kind": "log", "source": "scheduler", "level": "INFO", "text": self._describe(job, others)})
        try:
            return cast(dict[str, Any], job.worker.run(runner, config, run_dir, capture="thread",
                                                       allowed_imports=allowed_imports, shared=job))
        finally:
            def unload() -> None:
                # the job's adapter, and those it added after its name (multi-agent role
                # adapters and league snapshots: "<adapter>-<role>", "<adapter>-past-<step>")
                for name in list(self.policy.adapter_names):
                    if name == job.adapter or name.startswith(job.adapter + "-"):
                        self.policy.remove_adapter(name)

            try:
                self.turn(job, unload, final=True)
            except Exception:  # noqa: BLE001 - the host is closing; nothing left to unload
                logger.debug("unloading the adapter of job %s", job_id, exc_info=True)
            with self._lock:
                self._jobs.pop(job_id, None)
                # its last reports wait for the scheduler's final drain
                self._finished[job_id] = job.worker
                while len(self._finished) > FINISHED_JOBS_KEPT:
                    self._finished.popitem(last=False)
            self.executor.discard(job.qid, StatusError("NOT_FOUND", f"job {job_id} ended"))

    def drain(self, job_id: str, stored: int = 0) -> list[dict[str, Any]]:
        """The job's reports since the last drain (see ``JobWorker.drain``); [] once it is gone."""
        with self._lock:
            job = self._jobs.get(job_id)
            worker = job.worker if job is not None else self._finished.pop(job_id, None)
        return cast(list[dict[str, Any]], worker.drain(stored)) if worker is not None else []

    def stop(self, job_id: str) -> None:
        """Ask the job to checkpoint and stop (``should_stop()`` becomes true)."""
        job = self._jobs.get(job_id)
        if job is not None:
            job.worker.stop()

    def abort(self, job_id: str) -> None:
        """Stop the job at its next turn without a checkpoint (a cancel that timed out)."""
        job = self._jobs.get(job_id)
        if job is not None:
            job.aborted = True

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def turn(self, job: HostedJob, fn: Callable[[], Any], *, final: bool = False) -> Any:
        """Run one unit of a job's work on the executor thread with the job's RNG and adapter."""
        from tinker_algos.training.checkpoint import get_rng_state, set_rng_state

        if job.aborted and not final:
            raise JobAborted(f"job {job.job_id} was aborted: it did not stop in time after a cancel")

        def work() -> Any:
            outer = get_rng_state()
            try:
                if job.rng is not None:
                    set_rng_state(job.rng)
                if job.adapter in self.policy.adapter_names:
                    self.policy.set_adapter(job.adapter)
                with job.worker.capture_here():  # what the work prints goes to the job's log
                    return fn()
            finally:
                job.rng = get_rng_state()
                set_rng_state(outer)

        return self.executor.call(job.qid, work)
