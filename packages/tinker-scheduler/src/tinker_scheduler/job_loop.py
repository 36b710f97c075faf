"""The scheduling loop: what happens to jobs between QUEUED and the end.

:class:`JobLoop` owns everything that touches Ray for JobService jobs; the scheduler calls
:meth:`JobLoop.tick` from one background thread, every ``tick_s`` or sooner when a Submit or
Cancel wakes it. A tick

1. collects what running jobs reported (metrics, log lines, checkpoints) into the store;
2. reaps finished jobs: SUCCEEDED, FAILED (with the error), CANCELLED, or -- when the actor
   died -- re-queued to resume from its last checkpoint, up to ``max_retries`` times;
3. asks jobs with a pending cancel or pause to stop (``should_stop()`` becomes true: the job
   checkpoints at its next step boundary), every job while the scheduler shuts down, and kills
   the ones that do not stop in time; a paused job that stopped becomes PAUSED (out of the queue,
   its worker or shared-host slot freed) until it is resumed;
4. starts jobs: LoRA jobs whose base model a running model host serves join that host (no new
   resources; see :mod:`tinker_scheduler.hosted_jobs`), then the jobs
   :func:`tinker_scheduler.policy.plan` picks -- each in a Ray actor placed in a placement group
   of the job's ``resources``, or, for a LoRA job, on a new shared model host reserving them
   (see :mod:`tinker_scheduler.placement`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tinker_core.import_policy import ImportPolicy, refused_import
from tinker_scheduler.config import SchedulerConfig
from tinker_scheduler.host_pool import HostArgs, HostKey, HostPool
from tinker_scheduler.job_records import JobConfigs, resume_phrase
from tinker_scheduler.placement import (
    RunningJob,
    death_reason,
    release_worker,
    shared_host_of,
    start_worker,
)
from tinker_scheduler.policy import QueuedJob, Resources, plan
from tinker_scheduler.store import JobRecord, JobState, JobStore, PendingEvent

REPLAN_S = 5.0
"""The queue is re-planned at least this often even when nothing seems to have changed."""

if TYPE_CHECKING:
    from tinker_core.config import JobConfig
    from tinker_scheduler.metrics import SchedulerMetrics

logger = logging.getLogger("tinker_scheduler")


class JobLoop:
    """The state of the scheduling loop: the running jobs (:class:`~tinker_scheduler.placement.RunningJob`).

    Args:
        config: the scheduler's options (runner, retries, timeouts, jobs per host).
        store / metrics: where job states, events and metrics go.
        hosts: the model hosts LoRA jobs may share.
        capacity: the resources the scheduler may use.
        runner_shares: whether the runner accepts ``shared=`` (jobs may run on model hosts).
        wake: asks for the next tick now.
    """

    def __init__(
        self, config: SchedulerConfig, store: JobStore, metrics: SchedulerMetrics, hosts: HostPool, capacity: Resources, *,
        runner_shares: bool, wake: Callable[[], None], configs: JobConfigs | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.metrics = metrics
        self.hosts = hosts
        self.capacity = capacity
        self.runner_shares = runner_shares
        self.wake = wake
        self.configs = configs or JobConfigs()
        self.runs: dict[str, RunningJob] = {}
        self.runs_lock = threading.Lock()
        self._host_keys: dict[str, tuple[HostKey, HostArgs] | None] = {}
        self._planned: tuple[Any, ...] | None = None  # what the last full dispatch saw

    def running_job_ids(self) -> list[str]:
        with self.runs_lock:
            return list(self.runs)

    def tick(self, *, closing: bool) -> None:
        """One pass of the loop; ``closing``: the scheduler is shutting down (start nothing)."""
        self._collect_reports()
        self._reap()
        self._stop_requested(closing)
        if not closing and not self.config.paused:
            self._dispatch()
        self._request_reports()
        free = self.free()
        self.metrics.set_free(free.cpus, free.gpus, free.memory_gb)
        self.metrics.set_total(self.capacity.cpus, self.capacity.gpus, self.capacity.memory_gb)

    def requeue_left(self) -> None:
        """After the loop stopped: kill jobs that did not stop in time and re-queue them (those
        asked to pause are PAUSED instead)."""
        for run in list(self.runs.values()):
            self.discard(run)
            job = self.store.get(run.job_id)
            if job is not None and job.pause_requested:
                self._paused(job)
                continue
            self.store.transition(
                run.job_id, JobState.QUEUED,
                f"scheduler stopped before the job could checkpoint; {resume_phrase(job)}",
                expect=[JobState.RUNNING],
            )

    def recover(self) -> None:
        """Jobs that were RUNNING when the last scheduler died go back to the queue (those asked
        to cancel or pause end CANCELLED or PAUSED). PAUSED jobs stay paused."""
        for job in self.store.in_state(JobState.RUNNING):
            if job.cancel_requested:
                self.store.transition(job.id, JobState.CANCELLED, job.cancel_reason or "cancelled",
                                      expect=[JobState.RUNNING])
            elif job.pause_requested:
                self._paused(job, "scheduler restarted; ")
            else:
                self.store.transition(job.id, JobState.QUEUED, f"scheduler restarted; {resume_phrase(job)}",
                                      expect=[JobState.RUNNING])

    def free(self) -> Resources:
        """Capacity less what model hosts and running jobs hold."""
        free = self.capacity - self.hosts.reserved()
        with self.runs_lock:
            for run in self.runs.values():
                free = free - run.demand  # (zero for jobs on a shared host: the host holds it)
        return free

    def _request_reports(self) -> None:
        for run in list(self.runs.values()):
            if run.drain_ref is None:
                run.drain_ref = run.drain(run.stored_seq)

    def _collect_reports(self) -> None:
        import ray

        pending = {run.drain_ref: run for run in self.runs.values() if run.drain_ref is not None}
        if not pending:
            return
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
        for ref in ready:
            run = pending[ref]
            run.drain_ref = None
            try:
                reports = ray.get(ref)
            except ray.exceptions.RayError:
                continue  # the actor died; _reap handles it
            self._record(run, reports)

    def _record(self, run: RunningJob, reports: list[dict[str, Any]]) -> None:
        """Store what a job reported: metrics and log events, the checkpoint pointer."""
        events: list[PendingEvent] = []
        checkpoint: tuple[int, str] | None = None
        for report in reports:
            kind = report.get("kind")
            when = report.get("time")
            if kind == "metrics":
                step, values = int(report["step"]), report.get("values", {})
                events.append(PendingEvent("metrics", {"step": step, "values": values}, when))
                self.metrics.observe_metrics(run.job_id, values)
                self.metrics.observe_host(run.job_id, report.get("host"))
                mono = report.get("mono")
                if mono is not None:
                    if run.last_step is not None and step > run.last_step[0]:
                        self.metrics.step_time.observe((mono - run.last_step[1]) / (step - run.last_step[0]))
                    run.last_step = (step, mono)
            elif kind == "log":
                events.append(PendingEvent("log", {k: report.get(k, "") for k in ("source", "level", "text")}, when))
            elif kind == "checkpoint":
                checkpoint = (int(report["step"]), str(report["path"]))
                events.append(PendingEvent("log", _scheduler_line(f"checkpoint at step {checkpoint[0]}: {checkpoint[1]}"), when))
        self.store.append_events(run.job_id, events)
        if checkpoint is not None:
            self.store.update(run.job_id, checkpoint_step=checkpoint[0], checkpoint_path=checkpoint[1])
        run.stored_seq = max([run.stored_seq, *(int(r.get("seq", 0)) for r in reports)])

    def _reap(self) -> None:
        import ray

        if not self.runs:
            return
        by_ref = {run.result_ref: run for run in self.runs.values()}
        done, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
        for ref in done:
            run = by_ref[ref]
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as e:
                self._finish(run, None, death_reason(e))
                continue
            try:  # the last reports the job made before returning
                if run.drain_ref is not None:
                    self._record(run, ray.get(run.drain_ref, timeout=30))
                self._record(run, ray.get(run.drain(run.stored_seq), timeout=30))
            except ray.exceptions.RayError:
                pass
            self._finish(run, result, None)

    def _finish(self, run: RunningJob, result: dict[str, Any] | None, died: str | None) -> None:
        """Settle a job whose ``run()`` returned (``result``) or whose actor died (``died``)."""
        self.discard(run, died=died is not None)
        job = self.store.get(run.job_id)
        if job is None:
            return
        if result is not None and result.get("checkpoint"):
            self.store.update(job.id, checkpoint_path=result["checkpoint"])
            job = self.store.get(run.job_id) or job
        cancel_reason = job.cancel_reason or "cancelled"
        status = result.get("status") if result is not None else None

        if status == "completed":
            if result and result.get("eval"):
                self.store.append_events(job.id, [PendingEvent(
                    "metrics", {"step": result.get("step") or 0, "values": result["eval"], "final": True})])
            steps = result.get("step") if result else None
            self._end(job, JobState.SUCCEEDED, f"completed {steps} steps" if steps is not None else "completed")
        elif status == "failed" and not run.aborted:  # (an aborted cancel ends CANCELLED below)
            error = str(result.get("error")) if result else "failed"
            if result and result.get("config_error"):
                error = f"invalid config: {error}"
            self._end(job, JobState.FAILED, error)
        elif run.stop_reason == "cancel" or job.cancel_requested:
            self._end(job, JobState.CANCELLED, cancel_reason)
        elif job.pause_requested:
            self._paused(job)
        elif run.stop_reason == "pause":  # the pause was withdrawn (resumed) after the job was asked to stop
            self.store.transition(job.id, JobState.QUEUED, f"resumed before it paused; {resume_phrase(job)}",
                                  expect=[JobState.RUNNING])
        elif run.stop_reason == "shutdown":
            self.store.transition(job.id, JobState.QUEUED, f"scheduler shutting down; {resume_phrase(job)}",
                                  expect=[JobState.RUNNING])
        elif died is None and status != "interrupted":
            self._end(job, JobState.FAILED, f"the runner returned an unknown status {status!r}")
        else:  # the actor died, or the job stopped although nobody asked it to: restart it
            died = died or "the job stopped without being asked to"
            restarts = job.restarts + 1
            if restarts <= self.config.max_retries:
                logger.warning("job %s: %s; restart %d of %d", job.id, died, restarts, self.config.max_retries)
                self.metrics.actor_restarts.inc()
                self.store.transition(
                    job.id, JobState.QUEUED,
                    f"{died}; restart {restarts} of {self.config.max_retries}, {resume_phrase(job)}",
                    expect=[JobState.RUNNING], restarts=restarts,
                )
            else:
                self._end(job, JobState.FAILED,
                          f"{died}; gave up after {job.restarts} restart(s) (max_retries={self.config.max_retries})")
        self.wake()

    def _paused(self, job: JobRecord, prefix: str = "") -> None:
        """RUNNING -> PAUSED for a job asked to pause that stopped (its worker is already freed)."""
        where = (f"checkpoint at step {job.checkpoint_step}" if job.checkpoint_step is not None
                 else "no checkpoint yet: it starts again from the beginning")
        if self.store.transition(job.id, JobState.PAUSED, f"{prefix}{job.pause_reason}; {where}; resume it to continue",
                                 expect=[JobState.RUNNING], pause_reason=None) is not None:
            logger.info("job %s (tenant %s): PAUSED, %s", job.id, job.tenant, job.pause_reason)

    def _end(self, job: JobRecord, state: JobState, reason: str) -> None:
        if self.store.transition(job.id, state, reason, expect=[JobState.RUNNING]) is not None:
            logger.info("job %s (tenant %s): %s, %s", job.id, job.tenant, state.name, reason)
            self.metrics.jobs_finished.labels(state.name).inc()

    def discard(self, run: RunningJob, *, died: bool = False) -> None:
        """Forget a run; kill its actor and free its placement group (a shared host stays)."""
        with self.runs_lock:
            self.runs.pop(run.job_id, None)
        self._host_keys.pop(run.job_id, None)
        self.metrics.job_stopped(run.job_id)
        if run.host_key is not None:
            self.hosts.detach_job(run.host_key, run.job_id, host_died=died)
        else:
            release_worker(run)

    def _stop_requested(self, closing: bool) -> None:
        """Ask jobs to stop: cancelled and paused ones, or every job while shutting down; kill the stuck."""
        import ray

        now = time.monotonic()
        for run in list(self.runs.values()):
            if run.stop_reason is None:
                if closing:
                    run.stop_reason = "shutdown"
                else:
                    job = self.store.get(run.job_id)
                    if job is None or not (job.cancel_requested or job.pause_requested):
                        continue
                    run.stop_reason = "cancel" if job.cancel_requested else "pause"
                    asked = (f"cancel requested ({job.cancel_reason}); asking the job to stop" if job.cancel_requested
                             else f"pause requested ({job.pause_reason}); asking the job to checkpoint and stop")
                    self.store.append_events(run.job_id, [PendingEvent("log", _scheduler_line(asked))])
                run.stop_sent_at = now
                run.stop()
            elif run.stop_reason in ("cancel", "pause") and run.stop_sent_at is not None and now - run.stop_sent_at > self.config.cancel_timeout:
                if run.host_key is not None and not run.aborted:
                    # other jobs share the process: end this one at its next turn instead
                    self.store.append_events(run.job_id, [PendingEvent(
                        "log", _scheduler_line(f"the job did not stop within {self.config.cancel_timeout:g}s; aborting it"))])
                    run.aborted = True
                    run.stop_sent_at = now
                    run.abort()
                    continue
                what = "its model host (stuck in a step)" if run.host_key is not None else "it"
                self.store.append_events(run.job_id, [PendingEvent(
                    "log", _scheduler_line(f"the job did not stop within {self.config.cancel_timeout:g}s; killing {what}"))])
                run.stop_sent_at = None
                ray.kill(run.actor, no_restart=True)

    def _dispatch(self) -> None:
        # nothing to re-plan unless a job was submitted or changed state, resources were freed,
        # or REPLAN_S passed (a safety net): a long queue costs little while it waits
        seen = (
            self.store.jobs_version, self.free(), tuple(self.running_job_ids()), int(time.monotonic() // REPLAN_S)
        )
        if seen == self._planned:
            return
        self._plan(seen)

    def _plan(self, seen: tuple[Any, ...]) -> None:
        # summaries: a job's config is read only when it starts (and once for its host key)
        queued = self.store.in_state(JobState.QUEUED, with_config=False)
        if not queued:
            self._planned = seen
            return
        # 1. LoRA jobs whose base model a running host already serves join it: no new resources
        for job in sorted(queued, key=lambda j: (-j.priority, j.seq)):
            shared = self._shared_host_key(job)
            if shared is None:
                continue
            full = self.store.get(job.id)
            if full is None or self._launch_shared(full, *shared, demand=None):
                queued = [j for j in queued if j.id != job.id]
        if not queued:
            self._planned = seen
            return
        # 2. the rest by the queue policy; a LoRA job there starts a new shared host
        by_tenant: dict[str, Resources] = {}
        with self.runs_lock:
            for run in self.runs.values():
                by_tenant[run.tenant] = by_tenant.get(run.tenant, Resources()) + run.demand
        candidates = [
            QueuedJob(j.id, j.tenant, j.priority, j.seq, Resources(j.cpus, j.gpus, j.memory_gb)) for j in queued
        ]
        for choice in plan(candidates, self.free(), self.capacity, by_tenant):
            job = self.store.get(choice.job_id)
            if job is None:
                continue
            shared = self._shared_host_key(job)
            if shared is not None:  # joins a host started earlier in this loop, or starts one
                self._launch_shared(job, *shared, demand=choice.demand)
            else:
                self._launch(job, choice.demand)
        self._planned = seen

    def _shared_host_key(self, job: JobRecord) -> tuple[HostKey, HostArgs] | None:
        """The model host key and ``ModelHost`` arguments of a job that may share a host, else None."""
        if not (self.runner_shares and self.config.max_jobs_per_host > 0 and self.hosts.backend == "ray"):
            return None
        if job.id not in self._host_keys:
            full = job if job.config_json else self.store.get(job.id)
            if full is None:
                return None
            try:
                self._host_keys[job.id] = shared_host_of(self.configs.of(full))
            except ValueError:
                self._host_keys[job.id] = None  # _launch reports the error
        return self._host_keys[job.id]

    def _mark_started(self, job: JobRecord, where: str) -> str | None:
        """QUEUED -> RUNNING (``started[ (restart n)]<where>``); the attempt phrase, or None when
        the job left the queue meanwhile (cancelled)."""
        now = time.time()
        attempt = f" (restart {job.restarts})" if job.restarts else ""
        started = self.store.transition(
            job.id, JobState.RUNNING, f"started{attempt}{where}", expect=[JobState.QUEUED],
            started_at=job.started_at if job.started_at is not None else now,
        )
        if started is None:
            return None
        self.metrics.queue_wait.observe(max(0.0, now - job.queued_at))
        return attempt

    def _refused_import(self, config: JobConfig) -> str | None:
        """Submit's import check again, on the stored config, before the job starts: a job stored
        before the check existed, or before the operator narrowed ``allowed_imports``, fails."""
        return refused_import(config, ImportPolicy(self.config.allowed_imports))

    def _launch_shared(self, job: JobRecord, key: HostKey, host_kwargs: HostArgs, *, demand: Resources | None) -> bool:
        """Start a LoRA job on a shared model host (an existing one, or a new one reserving ``demand``)."""
        host = self.hosts.attach_job(job.id, key, host_kwargs, demand, self.config.max_jobs_per_host)
        if host is None:
            return False
        attempt = self._mark_started(job, " on a shared model host")
        if attempt is None:  # cancelled meanwhile
            self.hosts.detach_job(key, job.id)
            return True
        try:
            config = self.configs.of(job)
            refusal = self._refused_import(config)
            if refusal is not None:
                self.hosts.detach_job(key, job.id)
                self._end(job, JobState.FAILED, refusal)
                return True
            result_ref = host.actor.run_job.remote(job.id, self.config.runner, config, job.run_dir,
                                                   self.config.allowed_imports)
        except Exception as e:  # noqa: BLE001 - any failure to start is the job's failure
            self.hosts.detach_job(key, job.id)
            self._end(job, JobState.FAILED, f"could not start the job on its model host: {type(e).__name__}: {e}")
            return True
        with self.runs_lock:
            self.runs[job.id] = RunningJob(job.id, job.tenant, Resources(), host.actor, None, result_ref, host_key=key)
        self.metrics.job_started(job.id)
        logger.info("job %s (tenant %s): started%s on shared model host %s", job.id, job.tenant, attempt, key)
        return True

    def _launch(self, job: JobRecord, demand: Resources) -> None:
        attempt = self._mark_started(job, "")
        if attempt is None:  # cancelled meanwhile
            return
        try:
            config = self.configs.of(job)
            refusal = self._refused_import(config)
            if refusal is not None:
                self._end(job, JobState.FAILED, refusal)
                return
            actor, group, result_ref = start_worker(job.id, demand, self.config.runner, config, job.run_dir,
                                                    allowed_imports=self.config.allowed_imports)
        except Exception as e:  # noqa: BLE001 - any failure to place is the job's failure
            self._end(job, JobState.FAILED, f"could not start the job on Ray: {type(e).__name__}: {e}")
            return
        with self.runs_lock:
            self.runs[job.id] = RunningJob(job.id, job.tenant, demand, actor, group, result_ref)
        self.metrics.job_started(job.id)
        logger.info("job %s (tenant %s): started%s with %s", job.id, job.tenant, attempt, demand)


def _scheduler_line(text: str, level: str = "INFO") -> dict[str, str]:
    return {"source": "scheduler", "level": level, "text": text}
