"""The scheduler: the job store, the queue policy and Ray execution, behind a gRPC server.

::

    from tinker_scheduler import Scheduler, SchedulerConfig

    scheduler = Scheduler(SchedulerConfig(port=0, db="jobs.db", runs_dir="runs")).start()   # in-process
    print(scheduler.address)          # 127.0.0.1:<port>
    ...
    scheduler.stop()                  # running jobs checkpoint and are re-queued

One background thread runs the *scheduling loop* (:mod:`tinker_scheduler.job_loop`), which owns
everything that touches Ray for jobs, every ``tick_s`` or sooner when a Submit or Cancel wakes it.
The same thread re-reads the Ray cluster's resources every ``CAPACITY_REFRESH_S``: nodes that
join or leave change what the queue may use and the fair shares.

The pieces: :mod:`~tinker_scheduler.config` (options), :mod:`~tinker_scheduler.placement` (Ray),
:mod:`~tinker_scheduler.host_pool` (model hosts), :mod:`~tinker_scheduler.sessions`
(TrainingService sessions), :mod:`~tinker_scheduler.server` (gRPC) with the servicers
:mod:`~tinker_scheduler.job_service` and :mod:`~tinker_scheduler.training_service`, which see the
scheduler only through the interfaces they declare.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from tinker_core.import_policy import ImportPolicy
from tinker_scheduler.auth import AuthMode
from tinker_scheduler.config import SchedulerConfig
from tinker_scheduler.host_pool import HostPool
from tinker_scheduler.job_loop import JobLoop
from tinker_scheduler.job_records import JobConfigs
from tinker_scheduler.paths import PathPolicy
from tinker_scheduler.placement import RunningJob, cluster_capacity, connect_ray
from tinker_scheduler.policy import Resources
from tinker_scheduler.store import JobStore

if TYPE_CHECKING:
    from tinker_scheduler.metrics import SchedulerMetrics
    from tinker_scheduler.server import GrpcServer
    from tinker_scheduler.sessions import SessionManager

logger = logging.getLogger("tinker_scheduler")

CAPACITY_REFRESH_S = 2.0
"""How often the scheduling loop re-reads the Ray cluster's resources (nodes join and leave)."""


class Scheduler:
    """The OpenTinker job scheduler (the Python API behind ``opentinker scheduler start``).

    :param config: the options (:class:`~tinker_scheduler.config.SchedulerConfig`).
    :param options: options by name, over ``config`` (or the defaults):
        ``Scheduler(port=0, db="jobs.db")`` is ``Scheduler(SchedulerConfig(port=0, db="jobs.db"))``.
    """

    def __init__(self, config: SchedulerConfig | None = None, **options: Any) -> None:
        try:
            self.config = dataclasses.replace(config or SchedulerConfig(), **options)
        except TypeError as e:  # an unknown option
            raise TypeError(f"Scheduler: {e}; the options are the fields of SchedulerConfig") from None
        self.db_path = self.config.db_path
        self.runs_dir = self.config.runs_path
        self.paths = PathPolicy(self.runs_dir, self.config.model_roots)  # what tenants may read and write
        self.imports = ImportPolicy(self.config.allowed_imports)  # what code their jobs may import
        self._runner_shares = False  # whether the runner accepts shared= (set by start())
        self.hosts: HostPool | None = None  # the model hosts, set by start()
        self.training: SessionManager | None = None  # TrainingService sessions, set by start()
        self.jobs: JobLoop | None = None  # the scheduling loop's state, set by start()
        self.job_configs = JobConfigs()  # each job's config, parsed once (at Submit)

        self.store = JobStore(self.db_path)
        self.capacity = Resources()
        self.port: int | None = None
        self.metrics_port: int | None = None
        self.metrics: SchedulerMetrics | None = None
        self._server: GrpcServer | None = None
        self._metrics_httpd: Any = None
        self._owns_ray = False
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._lock_file: Any = None

    # ---- public API ------------------------------------------------------------------------

    @property
    def auth(self) -> AuthMode:
        return self.config.auth

    @property
    def address(self) -> str:
        """``host:port`` clients connect to (127.0.0.1 when bound to every interface)."""
        host = self.config.host
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "[::]", "") else host
        return f"{host}:{self.port}"

    @property
    def closing(self) -> bool:
        """True once :meth:`stop` began."""
        return self._closing.is_set()

    @property
    def _runs(self) -> dict[str, RunningJob]:
        """The running jobs by id (benchmarks read them)."""
        return self.jobs.runs if self.jobs is not None else {}

    def running_job_ids(self) -> list[str]:
        return self.jobs.running_job_ids() if self.jobs is not None else []

    def wake(self) -> None:
        """Run the scheduling loop now (after a Submit or Cancel)."""
        self._wake.set()

    def start(self) -> Scheduler:
        """Connect to Ray, recover jobs of a previous run, start serving. Returns ``self``."""
        if self._started:
            raise RuntimeError("this Scheduler was already started; create a new one")
        self._started = True
        config = self.config
        try:
            self._check_runner()
            self._lock_db()
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            self.capacity, self._owns_ray = connect_ray(config.ray_address, config.num_cpus, config.num_gpus)
            from tinker_scheduler.metrics import SchedulerMetrics

            self.metrics = SchedulerMetrics(self.store)
            self.hosts = HostPool(backend=config.training_host_backend, host_cpus=config.training_host_cpus,
                                  idle_timeout_s=config.host_idle_timeout_s)
            self.jobs = JobLoop(config, self.store, self.metrics, self.hosts, self.capacity,
                                runner_shares=self._runner_shares, wake=self.wake, configs=self.job_configs)
            self.jobs.recover()
            self._start_server(self.jobs)
            if config.metrics_port is not None:
                from prometheus_client import start_http_server

                self._metrics_httpd, _ = start_http_server(
                    config.metrics_port, addr=config.host, registry=self.metrics.registry
                )
                self.metrics_port = int(self._metrics_httpd.server_port)
                _time_out_connections(self._metrics_httpd, config.http_header_timeout_s)
        except BaseException:
            self._release()
            raise
        self._thread = threading.Thread(target=self._loop, name="opentinker-scheduler-loop", daemon=True)
        self._thread.start()
        return self

    def _check_runner(self) -> None:
        """Fail at start, not at the first job, when the runner cannot be imported."""
        import inspect

        from tinker_scheduler.worker import resolve_runner

        try:
            runner = resolve_runner(self.config.runner)
        except (ImportError, AttributeError, ValueError) as e:
            raise ValueError(
                f"runner {self.config.runner!r} cannot be used ({type(e).__name__}: {e}); "
                "install tinker-algos, or pass an importable 'module:function'"
            ) from None
        try:
            self._runner_shares = "shared" in inspect.signature(runner).parameters
        except (TypeError, ValueError):
            self._runner_shares = False

    def _lock_db(self) -> None:
        """Hold an exclusive lock on ``<db>.lock`` while serving: two schedulers on one job
        store would start the same jobs twice. ``filelock``'s lock is the OS's (``fcntl`` on
        POSIX, ``msvcrt`` on Windows): the kernel drops it when the process dies."""
        from filelock import FileLock, Timeout

        lock = FileLock(f"{self.db_path}.lock", timeout=0, thread_local=False)
        try:
            lock.acquire()
        except Timeout:
            raise OSError(
                f"another scheduler is using the job store {self.db_path}; stop it, or pass another --db"
            ) from None
        self._lock_file = lock

    def _release(self) -> None:
        """Close what start() opened: the servers, the model hosts, the local Ray, the store, the lock."""
        self._halt.set()
        if self._server is not None:
            self._server.stop(grace=2.0)
        if self._metrics_httpd is not None:
            self._metrics_httpd.shutdown()
            self._metrics_httpd.server_close()
        if self.training is not None:
            self.training.close()
        if self.hosts is not None:  # kill the model hosts
            self.hosts.close()
        if self._owns_ray:
            import ray

            ray.shutdown()
        self.store.close()
        if self._lock_file is not None:
            self._lock_file.release()
            self._lock_file = None

    def stop(self, timeout: float | None = None) -> None:
        """Graceful shutdown: running jobs are asked to stop (they checkpoint) and re-queued.

        Jobs that do not stop within ``timeout`` (default ``shutdown_timeout``) are killed and
        re-queued too; they resume from their last checkpoint when a scheduler next starts.
        """
        if not self._started or self._halt.is_set():
            return
        timeout = self.config.shutdown_timeout if timeout is None else timeout
        self._closing.set()
        if self._server is not None:
            self._server.enter_graceful_shutdown()
        self.wake()
        deadline = time.monotonic() + timeout
        while self.running_job_ids() and time.monotonic() < deadline and self._thread and self._thread.is_alive():
            time.sleep(0.05)
        self._halt.set()
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.jobs is not None:  # jobs that did not stop in time: kill, keep their checkpoint
            self.jobs.requeue_left()
        self._release()

    def wait_for_termination(self) -> None:
        if self._server is not None:
            self._server.wait_for_termination()

    # ---- start-up and the loop ---------------------------------------------------------------

    def _start_server(self, jobs: JobLoop) -> None:
        from tinker_scheduler.job_service import JobService
        from tinker_scheduler.server import GrpcServer
        from tinker_scheduler.sessions import SessionManager
        from tinker_scheduler.training_service import TrainingService

        assert self.hosts is not None
        self.training = SessionManager(self.runs_dir, self.hosts, idle_timeout_s=self.config.session_idle_timeout_s,
                                       paths=self.paths)
        training = TrainingService(self.training, store=self.store, auth=self.config.auth, free=jobs.free,
                                   limits=self.config.request_limits)
        self._server = GrpcServer(self.config, jobs=JobService(self), training=training)
        self.port = self._server.port

    def refresh_capacity(self) -> Resources:
        """Re-read the Ray cluster's resources (capped by ``num_cpus``/``num_gpus``) into the
        capacity the queue plans with and Submit checks against; returns it."""
        capacity = cluster_capacity(self.config.num_cpus, self.config.num_gpus)
        if capacity != self.capacity:
            logger.info("Ray cluster resources changed: %s (was %s)", capacity, self.capacity)
            self.capacity = capacity
            if self.jobs is not None:
                self.jobs.capacity = capacity
        return capacity

    def _loop(self) -> None:
        assert self.jobs is not None
        refreshed = time.monotonic()
        while not self._halt.is_set():
            if time.monotonic() - refreshed >= CAPACITY_REFRESH_S:
                refreshed = time.monotonic()
                try:
                    self.refresh_capacity()
                except Exception:  # keep the last known capacity; the error is in the log
                    logger.warning("could not re-read the Ray cluster's resources", exc_info=True)
            try:
                self.jobs.tick(closing=self._closing.is_set())
            except Exception:  # keep scheduling; the error is in the log
                logger.exception("scheduling loop tick failed")
            self._wake.wait(self.config.tick_s)
            self._wake.clear()


def _time_out_connections(httpd: Any, timeout_s: float) -> None:
    """Give every connection the metrics server accepts a socket timeout: a client that stops
    sending (a half-sent request) loses its connection, and its thread, after ``timeout_s``."""
    accept = httpd.get_request

    def get_request() -> Any:
        sock, address = accept()
        sock.settimeout(timeout_s)
        return sock, address

    httpd.get_request = get_request

