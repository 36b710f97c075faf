"""``opentinker.v1.JobService`` over the job store (see ``tinker_core/proto/jobs.proto``).

The handlers authenticate the caller, validate requests, and read or change the store (a live
settings change is written into the job's run dir, :mod:`tinker_core.config.live`; a fork's run
dir is made by :mod:`tinker_scheduler.job_fork`); the scheduling loop
(:mod:`tinker_scheduler.job_loop`) does everything that involves Ray. The wire forms of jobs and
events are :mod:`tinker_scheduler.job_wire`'s. A job of another tenant is NOT_FOUND, exactly like
a job that does not exist. The servicer sees the scheduler only through :class:`JobBackend`, so
it does not import it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import grpc

from tinker_algos.records.run_dir import make_run_dir
from tinker_core.config import (
    JobConfig,
    check_config_size,
    parse_config,
)
from tinker_core.config.live import LIVE_SETTINGS, check_live, write_request
from tinker_core.config.overrides import OverrideError
from tinker_core.errors import ConfigError, OpenTinkerError, did_you_mean
from tinker_core.import_policy import ImportPolicy, refused_import
from tinker_core.proto import jobs_pb2, jobs_pb2_grpc
from tinker_scheduler.auth import AuthMode
from tinker_scheduler.errors import StatusError
from tinker_scheduler.job_fork import prepare_fork_dir, remove_fork_dir
from tinker_scheduler.job_records import JobConfigs
from tinker_scheduler.job_wire import (
    MAX_CURSOR,
    before_seq_of,
    demand_of,
    event_message,
    job_message,
    page_token,
    parse_config_text,
)
from tinker_scheduler.paths import PathPolicy
from tinker_scheduler.policy import Resources
from tinker_scheduler.rpc import abort, caller_tenant
from tinker_scheduler.store import (
    JobRecord,
    JobState,
    JobStore,
    NewJob,
    PendingEvent,
    StoreError,
    new_job_id,
)

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
#: A List page stops growing past this many bytes (a client's default limit is 4 MiB).
MAX_PAGE_BYTES = 1024 * 1024
#: The longest ``client_request_id`` (a UUID has 36 characters) and Cancel ``reason``: both are
#: stored with the job and sent back in every List page.
MAX_REQUEST_ID_CHARS = 256
MAX_REASON_CHARS = 4096
#: The most live settings one SetSettings request may change (each at most MAX_REASON_CHARS).
MAX_SETTINGS = 64
#: The most overrides one Fork request may carry (each at most MAX_REASON_CHARS).
MAX_OVERRIDES = 256
#: How long a Watch sleeps between checks when nothing happens (it is woken on new events).
WATCH_IDLE_S = 1.0


class JobBackend(Protocol):
    """What the servicer needs of the scheduler (:class:`tinker_scheduler.scheduler.Scheduler`)."""

    @property
    def store(self) -> JobStore: ...

    @property
    def auth(self) -> AuthMode: ...

    @property
    def runs_dir(self) -> Path:
        """Jobs write to ``runs_dir/<tenant>/<job id>/``."""
        ...

    @property
    def paths(self) -> PathPolicy:
        """Which base models and data files a tenant's jobs may read (see :mod:`tinker_scheduler.paths`)."""
        ...

    @property
    def imports(self) -> ImportPolicy:
        """Which code a job may import besides the registered env plugins (``allowed_imports``)."""
        ...

    @property
    def capacity(self) -> Resources:
        """The whole cluster's resources (a job that needs more is refused)."""
        ...

    @property
    def job_configs(self) -> JobConfigs:
        """Each job's parsed config: Submit keeps what it parsed for the scheduling loop."""
        ...

    @property
    def closing(self) -> bool:
        """True once the scheduler is shutting down (watches end; clients resume elsewhere)."""
        ...

    def wake(self) -> None:
        """Run the scheduling loop now (after a Submit or Cancel)."""
        ...


class JobService(jobs_pb2_grpc.JobServiceServicer):
    """The JobService handlers of one scheduler."""

    def __init__(self, scheduler: JobBackend) -> None:
        self.scheduler = scheduler
        self.store = scheduler.store

    # ---- helpers ---------------------------------------------------------------------------

    def _tenant(self, context: grpc.ServicerContext) -> str:
        return caller_tenant(self.store, self.scheduler.auth, context)

    def _job(self, context: grpc.ServicerContext, tenant: str, job_id: str) -> JobRecord:
        if not job_id:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, "job_id: is empty; pass the id Submit returned")
        job = self.store.get(job_id, tenant)
        if job is None:
            message = f"job_id: no job {job_id!r}"
            close = did_you_mean(job_id, self.store.job_ids(tenant))
            message += f"; did you mean {close!r}?" if close else "; 'List' shows your jobs"
            abort(context, grpc.StatusCode.NOT_FOUND, message)
        return job

    def _check_runnable(self, context: grpc.ServicerContext, config: JobConfig, tenant: str) -> Resources:
        """Abort unless the tenant may run ``config`` here; what the job reserves."""
        try:  # the run dir lies under the tenant's runs; the model and data files are ones it may read
            self.scheduler.paths.tenant_dir(tenant)
            self.scheduler.paths.check_job(config, tenant)
        except StatusError as e:
            abort(context, getattr(grpc.StatusCode, e.code), str(e))
        refusal = refused_import(config, self.scheduler.imports)  # before anything is imported or run
        if refusal is not None:
            abort(context, grpc.StatusCode.PERMISSION_DENIED, refusal)
        demand = demand_of(config)
        too_big = demand.exceeds(self.scheduler.capacity)
        if too_big:
            capacity = self.scheduler.capacity
            details = ", ".join(
                f"resources.{name} = {getattr(demand, name):g} but the cluster has {getattr(capacity, name):g} in total"
                for name in too_big
            )
            abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                   f"{details}; lower it or add nodes to the Ray cluster")
        return demand

    def _check_request_id(self, context: grpc.ServicerContext, request_id: str) -> None:
        if len(request_id) > MAX_REQUEST_ID_CHARS:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                  f"client_request_id: {len(request_id):,} characters, over the limit of "
                  f"{MAX_REQUEST_ID_CHARS}; send a short unique key such as a UUID")

    # ---- RPCs -------------------------------------------------------------------------------

    def Submit(self, request: jobs_pb2.SubmitJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        tenant = self._tenant(context)
        self._check_request_id(context, request.client_request_id)
        try:
            check_config_size(len(request.config_text.encode("utf-8")))  # before any parsing
        except ConfigError as e:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"config_text: {e.problems[0]}")
        try:
            data, detected = parse_config_text(request.config_text, request.config_format)
        except ValueError as e:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(e))
        priority_override: int | None = None
        if request.HasField("priority"):
            priority_override = request.priority
            if not -100 <= priority_override <= 100:
                abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                       f"priority: must be between -100 and 100 (got {priority_override})")
            if isinstance(data, dict):
                data = {**data, "priority": priority_override}
        try:
            config = parse_config(data, source="config_text")
        except ConfigError as e:
            problems = "; ".join(e.problems)
            abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                   f"config_text: {len(e.problems)} problem(s): {problems}; "
                   "'opentinker config validate FILE' checks a config locally")
        except OpenTinkerError as e:
            abort(context, grpc.StatusCode.FAILED_PRECONDITION, f"the scheduler cannot check configs: {e}")
        demand = self._check_runnable(context, config, tenant)
        try:
            job, created = self.store.submit(
                NewJob(
                    tenant=tenant,
                    name=config.name,
                    priority=config.priority,
                    config_text=request.config_text,
                    config_format=detected,
                    config_json=config.model_dump_json(),
                    cpus=demand.cpus,
                    gpus=demand.gpus,
                    memory_gb=demand.memory_gb,
                    runs_dir=str(self.scheduler.runs_dir),
                    client_request_id=request.client_request_id,
                )
            )
        except StoreError as e:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(e))
        if created:  # parsed here once: the scheduling loop starts the job with this config
            self.scheduler.job_configs.keep(job.id, config)
            self.scheduler.wake()
        return job_message(job)

    def Get(self, request: jobs_pb2.GetJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        tenant = self._tenant(context)
        return job_message(self._job(context, tenant, request.job_id))

    def List(self, request: jobs_pb2.ListJobsRequest, context: grpc.ServicerContext) -> jobs_pb2.ListJobsResponse:
        tenant = self._tenant(context)
        if request.page_size < 0:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                   f"page_size: must be 0 (the default, {DEFAULT_PAGE_SIZE}) or positive (got {request.page_size})")
        size = min(request.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        states = []
        for state in request.states:
            if state not in JobState._value2member_map_ or state == JobState.UNSPECIFIED:
                abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                       f"states: {state} is not a job state; use QUEUED, RUNNING, PAUSED, SUCCEEDED, FAILED or CANCELLED")
            states.append(JobState(state))
        try:
            before = before_seq_of(request.page_token, tenant, states)
        except ValueError as e:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(e))
        # Summaries (no config text); one row more than the page tells whether another follows.
        jobs = self.store.list_jobs(tenant, states, limit=size + 1, before_seq=before)
        page: list[jobs_pb2.Job] = []
        used = 0
        for job in jobs[:size]:
            message = job_message(job)
            used += message.ByteSize()
            if page and used > MAX_PAGE_BYTES:
                break
            page.append(message)
        token = page_token(tenant, states, jobs[len(page) - 1].seq) if len(page) < len(jobs) else ""
        return jobs_pb2.ListJobsResponse(jobs=page, next_page_token=token)

    def Cancel(self, request: jobs_pb2.CancelJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        tenant = self._tenant(context)
        if len(request.reason) > MAX_REASON_CHARS:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                  f"reason: {len(request.reason):,} characters, over the limit of {MAX_REASON_CHARS:,}")
        job = self._job(context, tenant, request.job_id)
        if job.state.terminal:
            return job_message(job)
        reason = request.reason.strip() or "cancelled by the user"
        updated = self.store.request_cancel(job.id, reason)
        self.scheduler.wake()
        return job_message(updated or job)

    def Pause(self, request: jobs_pb2.PauseJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        tenant = self._tenant(context)
        if len(request.reason) > MAX_REASON_CHARS:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                  f"reason: {len(request.reason):,} characters, over the limit of {MAX_REASON_CHARS:,}")
        job = self._unfinished(context, tenant, request.job_id, "paused")
        updated = self.store.request_pause(job.id, request.reason.strip() or "paused by the user")
        self.scheduler.wake()
        return job_message(updated or job)

    def Resume(self, request: jobs_pb2.ResumeJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        tenant = self._tenant(context)
        job = self._unfinished(context, tenant, request.job_id, "resumed")
        updated = self.store.resume(job.id)
        self.scheduler.wake()
        return job_message(updated or job)

    def SetSettings(
        self, request: jobs_pb2.SetJobSettingsRequest, context: grpc.ServicerContext
    ) -> jobs_pb2.SetJobSettingsResponse:
        tenant = self._tenant(context)
        settings = list(request.settings)
        if not settings or len(settings) > MAX_SETTINGS or any(len(s) > MAX_REASON_CHARS for s in settings):
            abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                  f"settings: send 1 to {MAX_SETTINGS} KEY.PATH=VALUE of at most {MAX_REASON_CHARS:,} characters "
                  f"each (got {len(settings)}); the live settings: {', '.join(LIVE_SETTINGS)}")
        job = self._unfinished(context, tenant, request.job_id, "given live settings")
        try:
            check_live(self.scheduler.job_configs.of(job), settings, source=f"job {job.id} live settings")
        except OverrideError as e:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"settings: {e}")
        except ConfigError as e:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"settings: {'; '.join(e.problems)}")
        except ValueError as e:  # the stored config no longer parses
            abort(context, grpc.StatusCode.FAILED_PRECONDITION, f"job {job.id}: its stored config cannot be read: {e}")
        path = write_request(make_run_dir(Path(job.run_dir)), settings)  # (made here for a job not started yet)
        self.store.append_events(job.id, [PendingEvent("log", {
            "source": "scheduler", "level": "INFO",
            "text": f"live settings requested: {' '.join(settings)} (control/{path.name}); "
                    "the job applies them at its next step boundary"})])
        return jobs_pb2.SetJobSettingsResponse(job=job_message(job), request=path.name)

    def Fork(self, request: jobs_pb2.ForkJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        tenant = self._tenant(context)
        self._check_request_id(context, request.client_request_id)
        overrides = list(request.overrides)
        if len(overrides) > MAX_OVERRIDES or any(len(o) > MAX_REASON_CHARS for o in overrides):
            abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                  f"overrides: at most {MAX_OVERRIDES} KEY.PATH=VALUE of at most {MAX_REASON_CHARS:,} characters each")
        step = request.step if request.HasField("step") else None
        if step is not None and step < 0:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"step: must be 0 or more (got {step}); leave it unset for the newest checkpoint")
        parent = self._job(context, tenant, request.job_id)
        existing = self.store.by_request_id(tenant, request.client_request_id)
        if existing is not None:  # a retry: the job the first call made
            return job_message(existing)
        job_id = new_job_id()
        target = Path(self.scheduler.runs_dir) / tenant / job_id
        try:
            config, at = prepare_fork_dir(parent, step, overrides, target)
            demand = self._check_runnable(context, config, tenant)
            job, created = self.store.submit(NewJob(
                tenant=tenant, name=config.name, priority=config.priority,
                config_text=json.dumps(config.model_dump(mode="json"), indent=1), config_format=jobs_pb2.CONFIG_FORMAT_JSON,
                config_json=config.model_dump_json(), cpus=demand.cpus, gpus=demand.gpus, memory_gb=demand.memory_gb,
                runs_dir=str(self.scheduler.runs_dir), client_request_id=request.client_request_id, job_id=job_id,
            ))
        except StatusError as e:
            abort(context, getattr(grpc.StatusCode, e.code), str(e))
        except BaseException:  # refused (an abort raises) or failed: no run dir without its job
            remove_fork_dir(target)
            raise
        if not created:  # a retry that raced the first call: that call's job
            remove_fork_dir(target)
            return job_message(job)
        self.store.append_events(job.id, [PendingEvent("log", {
            "source": "scheduler", "level": "INFO",
            "text": f"forked from job {parent.id} at step {at} ({' '.join(overrides) or 'no overrides'}); "
                    f"lineage: {target / 'lineage.json'}"})])
        self.scheduler.job_configs.keep(job.id, config)
        self.scheduler.wake()
        return job_message(job)

    def _unfinished(self, context: grpc.ServicerContext, tenant: str, job_id: str, what: str) -> JobRecord:
        """The tenant's job ``job_id``; FAILED_PRECONDITION when it already finished."""
        job = self._job(context, tenant, job_id)
        if job.state.terminal:
            abort(context, grpc.StatusCode.FAILED_PRECONDITION,
                  f"job {job.id} is {job.state.name} ({job.reason}); only a queued, running or paused job can be "
                  f"{what}; fork its run dir {job.run_dir} to go on from one of its checkpoints")
        return job

    def Watch(self, request: jobs_pb2.WatchJobRequest, context: grpc.ServicerContext) -> Iterator[jobs_pb2.JobEvent]:
        tenant = self._tenant(context)
        job = self._job(context, tenant, request.job_id)
        cursor = min(request.after_cursor, MAX_CURSOR)  # the store's integers are signed 64-bit
        while context.is_active():
            version = self.store.version
            events = self.store.events_after(job.id, cursor, limit=500)
            for event in events:
                yield event_message(event)
                cursor = event.cursor
                if event.kind == "state" and JobState(event.payload["state"]).terminal:
                    return
            if events:
                continue
            current = self.store.get(job.id)
            if current is None or (current.state.terminal and cursor >= current.last_cursor):
                return  # already finished and nothing left after the cursor
            if self.scheduler.closing:
                return  # the client resumes from its cursor on the restarted scheduler
            self.store.wait_for_events(version, WATCH_IDLE_S)
