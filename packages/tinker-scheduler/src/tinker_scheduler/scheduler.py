"""The scheduler: the gRPC server, the job store, the queue policy and Ray execution, together.

::

    from tinker_scheduler import Scheduler

    scheduler = Scheduler(port=0, db="jobs.db", runs_dir="runs").start()   # in-process
    print(scheduler.address)          # 127.0.0.1:<port>
    ...
    scheduler.stop()                  # running jobs checkpoint and are re-queued

One background thread, the *scheduling loop*, owns everything that touches Ray. Every tick
(``tick_s``, or sooner when a Submit or Cancel wakes it) it

1. collects what running jobs reported (metrics, log lines, checkpoints) into the store;
2. reaps finished jobs: SUCCEEDED, FAILED (with the error), CANCELLED, or -- when the actor
   died -- re-queued to resume from its last checkpoint, up to ``max_retries`` times;
3. asks jobs with a pending cancel to stop (``should_stop()`` becomes true);
4. starts jobs: LoRA jobs whose base model a running model host serves join that host (no new
   resources; see :mod:`tinker_scheduler.model_host`), then the jobs
   :func:`tinker_scheduler.policy.plan` picks -- each in a Ray actor placed in a placement group
   of the job's ``resources``, or, for a LoRA job, on a new shared model host reserving them.

Resources are accounted by the scheduler itself: capacity is the Ray cluster's total CPUs, GPUs
and memory (capped by ``num_cpus`` / ``num_gpus``), free is capacity minus what running jobs
reserve. The whole cluster is treated as one pool; on a multi-node cluster a job whose bundle
fits in the pool but on no single node waits (RUNNING) until Ray can place it.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tinker_scheduler.auth import AuthMode
from tinker_scheduler.policy import QueuedJob, Resources, plan
from tinker_scheduler.store import JobRecord, JobState, JobStore, PendingEvent

logger = logging.getLogger("tinker_scheduler")

DEFAULT_RUNNER = "tinker_algos.train"
SERVICE_NAME = "opentinker.v1.JobService"
TRAINING_SERVICE_NAME = "opentinker.v1.TrainingService"
GIB = 1024**3


def default_home() -> Path:
    """``$OPENTINKER_HOME`` or ``~/.opentinker``: where the default db and runs directory live."""
    return Path(os.environ.get("OPENTINKER_HOME") or Path.home() / ".opentinker")


@dataclass
class _Run:
    """A job the loop started: its actor, placement group and the pending ``run()`` result."""

    job_id: str
    tenant: str
    demand: Resources
    actor: Any
    placement_group: Any
    result_ref: Any
    drain_ref: Any = None
    #: The largest report ``seq`` stored (acknowledged to the actor with the next drain).
    stored_seq: int = 0
    #: Why the loop asked the job to stop: "cancel" or "shutdown" (None: not asked).
    stop_reason: str | None = None
    stop_sent_at: float | None = None
    last_step: tuple[int, float] | None = None
    #: The model host key when the job runs on a shared host (``actor`` is then the host).
    host_key: tuple[Any, ...] | None = None
    aborted: bool = False

    def drain(self, stored: int) -> Any:
        if self.host_key is not None:
            return self.actor.drain_job.remote(self.job_id, stored)
        return self.actor.drain.remote(stored)

    def stop(self) -> None:
        if self.host_key is not None:
            self.actor.stop_job.remote(self.job_id)
        else:
            self.actor.stop.remote()


class Scheduler:
    """The OpenTinker job scheduler (the Python API behind ``opentinker scheduler start``).

    :param host: address the gRPC server binds (``0.0.0.0`` for every interface).
    :param port: gRPC port; 0 picks a free one (read :attr:`port` after :meth:`start`).
    :param db: the SQLite job store (created if missing).
    :param runs_dir: jobs write to ``runs_dir/<tenant>/<job id>/``.
    :param ray_address: join this Ray cluster; None starts a local one (unless Ray is already
        initialised in this process, which is then used as it is).
    :param num_cpus: CPUs of the local Ray; with a cluster, the most this scheduler uses.
    :param num_gpus: GPUs likewise.
    :param metrics_port: Prometheus endpoint port; 0 picks a free one, None disables it.
    :param tls_cert: PEM certificate chain file; with ``tls_key`` the server speaks TLS only.
    :param tls_key: PEM private key file.
    :param max_retries: how often a job whose actor died is restarted before it FAILS.
    :param auth: ``"auto"``, ``"required"`` or ``"none"`` (see :mod:`tinker_scheduler.auth`).
    :param runner: importable ``"module:function"`` with the signature of
        ``tinker_algos.train(config, run_dir=..., callbacks=...)`` that jobs run.
    :param paused: accept and store jobs but start none (maintenance).
    :param shutdown_timeout: seconds :meth:`stop` waits for running jobs to checkpoint.
    :param cancel_timeout: seconds a cancelled job may take to stop before its actor is killed.
    :param tick_s: the scheduling loop's period.
    :param training_host_backend: where TrainingService sessions run: ``"ray"`` (model hosts are
        Ray actors, the default) or ``"local"`` (hosts live in the scheduler process).
    :param training_host_cpus: CPUs each model host reserves (subtracted from what jobs may use).
    :param session_idle_timeout_s: a training session unused this long is checkpointed and
        released from its host (restored on its next request).
    :param host_idle_timeout_s: a model host without sessions this long shuts down.
    :param max_message_bytes: the gRPC send/receive message limit (tensors travel in messages).
    :param max_jobs_per_host: LoRA jobs whose base model (name, revision, tokenizer, dtype,
        device) matches run together on one shared model host, up to this many per host (they
        take turns, a training step each); 0 gives every job its own worker and model copy.
        Needs the ``ray`` host backend and a runner that accepts ``shared=`` (``tinker_algos.train``).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 50051,
        db: str | Path | None = None,
        runs_dir: str | Path | None = None,
        ray_address: str | None = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        metrics_port: int | None = None,
        tls_cert: str | Path | None = None,
        tls_key: str | Path | None = None,
        max_retries: int = 3,
        auth: str | AuthMode = AuthMode.AUTO,
        runner: str = DEFAULT_RUNNER,
        paused: bool = False,
        shutdown_timeout: float = 60.0,
        cancel_timeout: float = 60.0,
        tick_s: float = 0.1,
        max_workers: int = 64,
        training_host_backend: str = "ray",
        training_host_cpus: float = 1.0,
        session_idle_timeout_s: float = 600.0,
        host_idle_timeout_s: float = 60.0,
        max_message_bytes: int = 64 * 1024 * 1024,
        max_jobs_per_host: int = 8,
    ) -> None:
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both for TLS, or neither")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0 (got {max_retries})")
        if max_jobs_per_host < 0:
            raise ValueError(f"max_jobs_per_host must be >= 0 (0: no shared hosts), got {max_jobs_per_host}")
        self.host = host
        self.requested_port = port
        self.db_path = Path(db) if db is not None else default_home() / "scheduler.db"
        self.runs_dir = Path(runs_dir) if runs_dir is not None else default_home() / "runs"
        self.ray_address = ray_address
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.requested_metrics_port = metrics_port
        self.tls_cert = Path(tls_cert) if tls_cert is not None else None
        self.tls_key = Path(tls_key) if tls_key is not None else None
        self.max_retries = max_retries
        self.auth = AuthMode(auth)
        self.runner = runner
        self.paused = paused
        self.shutdown_timeout = shutdown_timeout
        self.cancel_timeout = cancel_timeout
        self.tick_s = tick_s
        self.max_workers = max_workers
        self.training_host_backend = training_host_backend
        self.training_host_cpus = training_host_cpus
        self.session_idle_timeout_s = session_idle_timeout_s
        self.host_idle_timeout_s = host_idle_timeout_s
        self.max_message_bytes = int(max_message_bytes)
        self.max_jobs_per_host = int(max_jobs_per_host)
        self._runner_shares = False  # whether the runner accepts shared= (set by start())
        self._host_keys: dict[str, tuple[tuple[Any, ...], dict[str, Any]] | None] = {}
        self.training: Any = None  # the TrainingManager (sessions and model hosts), set by start()

        self.store = JobStore(self.db_path)
        self.capacity = Resources()
        self.port: int | None = None
        self.metrics_port: int | None = None
        self.metrics: Any = None
        self._server: Any = None
        self._health: Any = None
        self._metrics_httpd: Any = None
        self._owns_ray = False
        self._runs: dict[str, _Run] = {}
        self._runs_lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._lock_file: Any = None

    # ---- public API ------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """``host:port`` clients connect to (127.0.0.1 when bound to every interface)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "[::]", "") else self.host
        return f"{host}:{self.port}"

    @property
    def closing(self) -> bool:
        """True once :meth:`stop` began."""
        return self._closing.is_set()

    def running_job_ids(self) -> list[str]:
        with self._runs_lock:
            return list(self._runs)

    def wake(self) -> None:
        """Run the scheduling loop now (after a Submit or Cancel)."""
        self._wake.set()

    def start(self) -> Scheduler:
        """Connect to Ray, recover jobs of a previous run, start serving. Returns ``self``."""
        if self._started:
            raise RuntimeError("this Scheduler was already started; create a new one")
        self._started = True
        try:
            self._check_runner()
            self._lock_db()
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            self._init_ray()
            from tinker_scheduler.metrics import SchedulerMetrics

            self.metrics = SchedulerMetrics(self.store)
            self._recover()
            self._start_server()
            if self.requested_metrics_port is not None:
                from prometheus_client import start_http_server

                self._metrics_httpd, _ = start_http_server(
                    self.requested_metrics_port, addr=self.host, registry=self.metrics.registry
                )
                self.metrics_port = int(self._metrics_httpd.server_port)
        except BaseException:
            self._release()
            raise
        self._thread = threading.Thread(target=self._loop, name="opentinker-scheduler-loop", daemon=True)
        self._thread.start()
        return self

    def _check_runner(self) -> None:
        """Fail at start, not at the first job, when the runner cannot be imported."""
        from tinker_scheduler.worker import resolve_runner

        try:
            runner = resolve_runner(self.runner)
        except (ImportError, AttributeError, ValueError) as e:
            raise ValueError(
                f"runner {self.runner!r} cannot be used ({type(e).__name__}: {e}); "
                "install tinker-algos, or pass an importable 'module:function'"
            ) from None
        import inspect

        try:
            self._runner_shares = "shared" in inspect.signature(runner).parameters
        except (TypeError, ValueError):
            self._runner_shares = False

    def _lock_db(self) -> None:
        """Hold an exclusive lock on ``<db>.lock`` while serving: two schedulers on one job
        store would start the same jobs twice. The kernel drops the lock when the process dies."""
        import fcntl

        self._lock_file = open(f"{self.db_path}.lock", "a+")  # noqa: SIM115 - held until _release
        try:
            fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock_file.close()
            self._lock_file = None
            raise OSError(
                f"another scheduler is using the job store {self.db_path}; stop it, or pass another --db"
            ) from None

    def _release(self) -> None:
        """Close what start() opened: the servers, the local Ray, the store, the lock."""
        self._halt.set()
        if self._server is not None:
            self._server.stop(grace=2.0).wait()
        if self._metrics_httpd is not None:
            self._metrics_httpd.shutdown()
            self._metrics_httpd.server_close()
        if self.training is not None:  # TrainingService: kill the model hosts
            self.training.close()
        if self._owns_ray:
            import ray

            ray.shutdown()
        self.store.close()
        if self._lock_file is not None:
            self._lock_file.close()  # releases the lock
            self._lock_file = None

    def stop(self, timeout: float | None = None) -> None:
        """Graceful shutdown: running jobs are asked to stop (they checkpoint) and re-queued.

        Jobs that do not stop within ``timeout`` (default ``shutdown_timeout``) are killed and
        re-queued too; they resume from their last checkpoint when a scheduler next starts.
        """
        if not self._started or self._halt.is_set():
            return
        timeout = self.shutdown_timeout if timeout is None else timeout
        self._closing.set()
        if self._health is not None:
            self._health.enter_graceful_shutdown()
        self.wake()
        deadline = time.monotonic() + timeout
        while self.running_job_ids() and time.monotonic() < deadline and self._thread and self._thread.is_alive():
            time.sleep(0.05)
        self._halt.set()
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for run in list(self._runs.values()):  # did not stop in time: kill, keep their checkpoint
            self._discard(run)
            job = self.store.get(run.job_id)
            self.store.transition(
                run.job_id, JobState.QUEUED,
                f"scheduler stopped before the job could checkpoint; {_resume_phrase(job)}",
                expect=[JobState.RUNNING],
            )
        self._release()

    def wait_for_termination(self) -> None:
        if self._server is not None:
            self._server.wait_for_termination()

    # ---- start-up ---------------------------------------------------------------------------

    def _init_ray(self) -> None:
        # Ray under `uv run` would otherwise build a fresh virtualenv for its workers each session.
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        import ray

        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "namespace": "opentinker"}
            if self.ray_address:
                ray.init(address=self.ray_address, **kwargs)
            else:
                # address="local": always a new local Ray, never a cluster that happens to run on
                # this machine. Ray's local node counts whole CPUs/GPUs; a fractional cap is applied below.
                ray.init(address="local", num_cpus=_whole(self.num_cpus), num_gpus=_whole(self.num_gpus), **kwargs)
            self._owns_ray = True
        total = ray.cluster_resources()
        cpus = float(total.get("CPU", 0.0))
        gpus = float(total.get("GPU", 0.0))
        if self.num_cpus is not None:
            cpus = min(cpus, float(self.num_cpus))
        if self.num_gpus is not None:
            gpus = min(gpus, float(self.num_gpus))
        self.capacity = Resources(cpus=cpus, gpus=gpus, memory_gb=float(total.get("memory", 0.0)) / GIB)

    def _recover(self) -> None:
        """Jobs that were RUNNING when the last scheduler died go back to the queue."""
        for job in self.store.in_state(JobState.RUNNING):
            if job.cancel_requested:
                self.store.transition(job.id, JobState.CANCELLED, job.cancel_reason or "cancelled",
                                      expect=[JobState.RUNNING])
            else:
                self.store.transition(job.id, JobState.QUEUED, f"scheduler restarted; {_resume_phrase(job)}",
                                      expect=[JobState.RUNNING])

    def _start_server(self) -> None:
        import grpc
        from grpc_health.v1 import health, health_pb2, health_pb2_grpc

        from tinker_core.proto import jobs_pb2_grpc, training_pb2_grpc
        from tinker_scheduler.service import JobService
        from tinker_scheduler.training_service import TrainingManager, TrainingService

        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="opentinker-grpc"),
            options=[
                ("grpc.so_reuseport", 0),  # a port in use is an error, not a shared port
                # tensors travel in TrainingService messages: explicit limits, both ways
                ("grpc.max_receive_message_length", self.max_message_bytes),
                ("grpc.max_send_message_length", self.max_message_bytes),
            ],
        )
        jobs_pb2_grpc.add_JobServiceServicer_to_server(JobService(self), self._server)
        # TrainingService (session-based primitives) on the same server, keys and tenants
        self.training = TrainingManager(
            self.runs_dir, backend=self.training_host_backend, host_cpus=self.training_host_cpus,
            session_idle_timeout_s=self.session_idle_timeout_s, host_idle_timeout_s=self.host_idle_timeout_s,
        )
        training_pb2_grpc.add_TrainingServiceServicer_to_server(
            TrainingService(self, self.training, free=self._free), self._server
        )
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        bind = f"{self.host}:{self.requested_port}"
        try:
            if self.tls_cert is not None and self.tls_key is not None:
                credentials = grpc.ssl_server_credentials([(self.tls_key.read_bytes(), self.tls_cert.read_bytes())])
                port = self._server.add_secure_port(bind, credentials)
            else:
                port = self._server.add_insecure_port(bind)
        except RuntimeError:
            port = 0
        if not port:
            raise OSError(f"could not bind the gRPC server to {bind}; is the port in use? pass another --port")
        self.port = int(port)
        self._server.start()
        for name in ("", SERVICE_NAME, TRAINING_SERVICE_NAME):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)

    # ---- the scheduling loop ----------------------------------------------------------------

    def _loop(self) -> None:
        while not self._halt.is_set():
            try:
                self._tick()
            except Exception:  # keep scheduling; the error is in the log
                logger.exception("scheduling loop tick failed")
            self._wake.wait(self.tick_s)
            self._wake.clear()

    def _tick(self) -> None:
        self._collect_reports()
        self._reap()
        self._stop_requested()
        if not self._closing.is_set() and not self.paused:
            self._dispatch()
        self._request_reports()
        free = self._free()
        self.metrics.set_free(free.cpus, free.gpus, free.memory_gb)

    def _free(self) -> Resources:
        free = self.capacity
        if self.training is not None:  # model hosts of TrainingService sessions hold resources too
            free = free - self.training.reserved()
        with self._runs_lock:
            for run in self._runs.values():
                free = free - run.demand  # (zero for jobs on a shared host: the host holds it)
        return free

    def _request_reports(self) -> None:
        for run in list(self._runs.values()):
            if run.drain_ref is None:
                run.drain_ref = run.drain(run.stored_seq)

    def _collect_reports(self) -> None:
        import ray

        pending = {run.drain_ref: run for run in self._runs.values() if run.drain_ref is not None}
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

    def _record(self, run: _Run, reports: list[dict[str, Any]]) -> None:
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

        if not self._runs:
            return
        by_ref = {run.result_ref: run for run in self._runs.values()}
        done, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
        for ref in done:
            run = by_ref[ref]
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as e:
                self._finish(run, None, _death_reason(e))
                continue
            try:  # the last reports the job made before returning
                if run.drain_ref is not None:
                    self._record(run, ray.get(run.drain_ref, timeout=30))
                self._record(run, ray.get(run.drain(run.stored_seq), timeout=30))
            except ray.exceptions.RayError:
                pass
            self._finish(run, result, None)

    def _finish(self, run: _Run, result: dict[str, Any] | None, died: str | None) -> None:
        """Settle a job whose ``run()`` returned (``result``) or whose actor died (``died``)."""
        self._discard(run, died=died is not None)
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
        elif run.stop_reason == "shutdown":
            self.store.transition(job.id, JobState.QUEUED, f"scheduler shutting down; {_resume_phrase(job)}",
                                  expect=[JobState.RUNNING])
        elif died is None and status != "interrupted":
            self._end(job, JobState.FAILED, f"the runner returned an unknown status {status!r}")
        else:  # the actor died, or the job stopped although nobody asked it to: restart it
            died = died or "the job stopped without being asked to"
            restarts = job.restarts + 1
            if restarts <= self.max_retries:
                logger.warning("job %s: %s; restart %d of %d", job.id, died, restarts, self.max_retries)
                self.metrics.actor_restarts.inc()
                self.store.transition(
                    job.id, JobState.QUEUED,
                    f"{died}; restart {restarts} of {self.max_retries}, {_resume_phrase(job)}",
                    expect=[JobState.RUNNING], restarts=restarts,
                )
            else:
                self._end(job, JobState.FAILED,
                          f"{died}; gave up after {job.restarts} restart(s) (max_retries={self.max_retries})")
        self.wake()

    def _end(self, job: JobRecord, state: JobState, reason: str) -> None:
        if self.store.transition(job.id, state, reason, expect=[JobState.RUNNING]) is not None:
            logger.info("job %s (tenant %s): %s, %s", job.id, job.tenant, state.name, reason)
            self.metrics.jobs_finished.labels(state.name).inc()

    def _discard(self, run: _Run, *, died: bool = False) -> None:
        """Forget a run; kill its actor and free its placement group (a shared host stays)."""
        import ray
        from ray.util.placement_group import remove_placement_group

        with self._runs_lock:
            self._runs.pop(run.job_id, None)
        self._host_keys.pop(run.job_id, None)
        if self.metrics is not None:
            self.metrics.job_stopped(run.job_id)
        if run.host_key is not None:
            self.training.detach_job(run.host_key, run.job_id, host_died=died)
            return
        for action in (lambda: ray.kill(run.actor, no_restart=True), lambda: remove_placement_group(run.placement_group)):
            try:
                action()
            except Exception:  # already gone
                logger.debug("cleanup of %s", run.job_id, exc_info=True)

    def _stop_requested(self) -> None:
        """Ask jobs to stop: cancelled ones, or every job while shutting down; kill the stuck."""
        import ray

        now = time.monotonic()
        closing = self._closing.is_set()
        for run in list(self._runs.values()):
            if run.stop_reason is None:
                if closing:
                    run.stop_reason = "shutdown"
                else:
                    job = self.store.get(run.job_id)
                    if job is None or not job.cancel_requested:
                        continue
                    run.stop_reason = "cancel"
                    self.store.append_events(run.job_id, [PendingEvent(
                        "log", _scheduler_line(f"cancel requested ({job.cancel_reason}); asking the job to stop"))])
                run.stop_sent_at = now
                run.stop()
            elif run.stop_reason == "cancel" and run.stop_sent_at is not None and now - run.stop_sent_at > self.cancel_timeout:
                if run.host_key is not None and not run.aborted:
                    # other jobs share the process: end this one at its next turn instead
                    self.store.append_events(run.job_id, [PendingEvent(
                        "log", _scheduler_line(f"the job did not stop within {self.cancel_timeout:g}s; aborting it"))])
                    run.aborted = True
                    run.stop_sent_at = now
                    run.actor.abort_job.remote(run.job_id)
                    continue
                what = "its model host (stuck in a step)" if run.host_key is not None else "it"
                self.store.append_events(run.job_id, [PendingEvent(
                    "log", _scheduler_line(f"the job did not stop within {self.cancel_timeout:g}s; killing {what}"))])
                run.stop_sent_at = None
                ray.kill(run.actor, no_restart=True)

    def _dispatch(self) -> None:
        queued = self.store.in_state(JobState.QUEUED)
        if not queued:
            return
        # 1. LoRA jobs whose base model a running host already serves join it: no new resources
        for job in sorted(queued, key=lambda j: (-j.priority, j.seq)):
            shared = self._shared_host_key(job)
            if shared is not None and self._launch_shared(job, *shared, demand=None):
                queued = [j for j in queued if j.id != job.id]
        if not queued:
            return
        # 2. the rest by the queue policy; a LoRA job there starts a new shared host
        by_tenant: dict[str, Resources] = {}
        with self._runs_lock:
            for run in self._runs.values():
                by_tenant[run.tenant] = by_tenant.get(run.tenant, Resources()) + run.demand
        candidates = [
            QueuedJob(j.id, j.tenant, j.priority, j.seq, Resources(j.cpus, j.gpus, j.memory_gb)) for j in queued
        ]
        records = {j.id: j for j in queued}
        for choice in plan(candidates, self._free(), self.capacity, by_tenant):
            job = records[choice.job_id]
            shared = self._shared_host_key(job)
            if shared is not None:  # joins a host started earlier in this loop, or starts one
                self._launch_shared(job, *shared, demand=choice.demand)
            else:
                self._launch(job, choice.demand)

    def _shared_host_key(self, job: JobRecord) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The model host key and ``ModelHost`` arguments of a job that may share a host, else None."""
        if not (self._runner_shares and self.max_jobs_per_host > 0 and self.training is not None
                and self.training.backend == "ray"):
            return None
        if job.id not in self._host_keys:
            from tinker_core.config import JobConfig
            from tinker_scheduler.training_service import host_key

            try:
                config = JobConfig.model_validate_json(job.config_json)
            except ValueError:
                self._host_keys[job.id] = None  # _launch reports the error
                return None
            model = config.model
            if config.lora is None:
                self._host_keys[job.id] = None
            else:
                precision = model.precision
                self._host_keys[job.id] = (
                    host_key(model.name, precision, model.device, revision=model.revision, tokenizer=model.tokenizer),
                    {"base_model": model.name, "precision": precision, "device": model.device,
                     "revision": model.revision, "tokenizer": model.tokenizer},
                )
        return self._host_keys[job.id]

    def _launch_shared(self, job: JobRecord, key: tuple[Any, ...], host_kwargs: dict[str, Any], *, demand: Resources | None) -> bool:
        """Start a LoRA job on a shared model host (an existing one, or a new one reserving ``demand``)."""
        from tinker_core.config import JobConfig

        host = self.training.job_host(job.id, key, host_kwargs, demand, self.max_jobs_per_host)
        if host is None:
            return False
        now = time.time()
        attempt = f" (restart {job.restarts})" if job.restarts else ""
        started = self.store.transition(
            job.id, JobState.RUNNING, f"started{attempt} on a shared model host", expect=[JobState.QUEUED],
            started_at=job.started_at if job.started_at is not None else now,
        )
        if started is None:  # cancelled meanwhile
            self.training.detach_job(key, job.id)
            return True
        self.metrics.queue_wait.observe(max(0.0, now - job.queued_at))
        try:
            config = JobConfig.model_validate_json(job.config_json)
            result_ref = host.actor.run_job.remote(job.id, self.runner, config, job.run_dir)
        except Exception as e:  # noqa: BLE001 - any failure to start is the job's failure
            self.training.detach_job(key, job.id)
            self._end(job, JobState.FAILED, f"could not start the job on its model host: {type(e).__name__}: {e}")
            return True
        with self._runs_lock:
            self._runs[job.id] = _Run(job.id, job.tenant, Resources(), host.actor, None, result_ref, host_key=key)
        logger.info("job %s (tenant %s): started%s on shared model host %s", job.id, job.tenant, attempt, key)
        return True

    def _launch(self, job: JobRecord, demand: Resources) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from tinker_core.config import JobConfig
        from tinker_scheduler.worker import JobWorker

        now = time.time()
        attempt = f" (restart {job.restarts})" if job.restarts else ""
        started = self.store.transition(
            job.id, JobState.RUNNING, f"started{attempt}", expect=[JobState.QUEUED],
            started_at=job.started_at if job.started_at is not None else now,
        )
        if started is None:  # cancelled meanwhile
            return
        self.metrics.queue_wait.observe(max(0.0, now - job.queued_at))
        try:
            config = JobConfig.model_validate_json(job.config_json)
            bundle: dict[str, float] = {"CPU": demand.cpus}
            if demand.gpus > 0:
                bundle["GPU"] = demand.gpus
            if demand.memory_gb > 0:
                bundle["memory"] = demand.memory_gb * GIB
            group = placement_group([bundle], strategy="PACK", name=f"opentinker-{job.id}")
            actor = (
                cast(Any, ray.remote(JobWorker))
                .options(
                    num_cpus=demand.cpus,
                    num_gpus=demand.gpus,
                    memory=demand.memory_gb * GIB if demand.memory_gb > 0 else None,
                    max_concurrency=4,
                    max_restarts=0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=group, placement_group_bundle_index=0,
                        placement_group_capture_child_tasks=True,
                    ),
                )
                .remote(job.id)
            )
            result_ref = actor.run.remote(self.runner, config, job.run_dir)
        except Exception as e:  # noqa: BLE001 - any failure to place is the job's failure
            self._end(job, JobState.FAILED, f"could not start the job on Ray: {type(e).__name__}: {e}")
            return
        with self._runs_lock:
            self._runs[job.id] = _Run(job.id, job.tenant, demand, actor, group, result_ref)
        logger.info("job %s (tenant %s): started%s with %s", job.id, job.tenant, attempt, demand)


def _whole(amount: float | None) -> int | None:
    return None if amount is None else math.ceil(amount)


def _scheduler_line(text: str, level: str = "INFO") -> dict[str, str]:
    return {"source": "scheduler", "level": level, "text": text}


def _resume_phrase(job: JobRecord | None) -> str:
    """How the job will continue; the runner picks the newest checkpoint in its run directory,
    which may be newer than the last one the scheduler heard of."""
    if job is not None and job.checkpoint_step is not None:
        return f"resumes from its newest checkpoint (last reported: step {job.checkpoint_step})"
    return "resumes from its newest checkpoint, if it wrote one"


def _death_reason(error: Exception) -> str:
    text = str(error).strip().splitlines()
    first = next((line for line in text if line.strip()), type(error).__name__)
    return f"the job's actor died ({type(error).__name__}: {first[:200]})"

