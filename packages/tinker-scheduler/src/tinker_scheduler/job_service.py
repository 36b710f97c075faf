"""``opentinker.v1.JobService`` over the job store (see ``tinker_core/proto/jobs.proto``).

The handlers authenticate the caller, validate requests, and read or change the store (a live
settings change is written into the job's run dir, :mod:`tinker_core.config.live`); the
scheduling loop (:mod:`tinker_scheduler.job_loop`) does everything that involves Ray. A job of
another tenant is NOT_FOUND, exactly like a job that does not exist. The servicer sees the
scheduler only through :class:`JobBackend`, so it does not import it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, cast

import grpc
import yaml
from google.protobuf.timestamp_pb2 import Timestamp

from tinker_algos.run_dir import make_run_dir
from tinker_core.config import (
    CONFIG_TOO_DEEP,
    JobConfig,
    check_config_shape,
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
from tinker_scheduler.job_records import JobConfigs
from tinker_scheduler.paths import PathPolicy
from tinker_scheduler.policy import Resources
from tinker_scheduler.rpc import abort, caller_tenant
from tinker_scheduler.store import (
    Event,
    JobRecord,
    JobState,
    JobStore,
    NewJob,
    PendingEvent,
    StoreError,
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
#: The largest cursor the store can hold; a larger ``after_cursor`` means the same: no event after it.
MAX_CURSOR = 2**63 - 1
#: How long a Watch sleeps between checks when nothing happens (it is woken on new events).
WATCH_IDLE_S = 1.0


def timestamp(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def job_message(job: JobRecord) -> jobs_pb2.Job:
    """The wire form of a stored job."""
    message = jobs_pb2.Job(
        id=job.id,
        state=cast(Any, int(job.state)),
        reason=job.reason,
        priority=job.priority,
        tenant=job.tenant,
        created_at=timestamp(job.created_at),
        run_dir=job.run_dir,
        checkpoint_path=job.checkpoint_path,
        config_text=job.config_text,
        config_format=cast(Any, job.config_format),
        client_request_id=job.client_request_id,
        name=job.name,
    )
    if job.started_at is not None:
        message.started_at.CopyFrom(timestamp(job.started_at))
    if job.finished_at is not None:
        message.finished_at.CopyFrom(timestamp(job.finished_at))
    return message


def event_message(event: Event) -> jobs_pb2.JobEvent:
    """The wire form of a stored event."""
    message = jobs_pb2.JobEvent(cursor=event.cursor, job_id=event.job_id, time=timestamp(event.time))
    p = event.payload
    if event.kind == "state":
        message.state_change.CopyFrom(
            jobs_pb2.JobStateChange(previous_state=p["previous"], state=p["state"], reason=p.get("reason", ""))
        )
    elif event.kind == "metrics":
        message.metrics.CopyFrom(jobs_pb2.JobMetrics(step=int(p["step"]), values=p.get("values", {})))
    else:
        message.log.CopyFrom(
            jobs_pb2.JobLogLine(source=p.get("source", ""), level=p.get("level", ""), text=p.get("text", ""))
        )
    return message


def parse_config_text(text: str, config_format: int) -> tuple[Any, int]:
    """Decode ``config_text`` as YAML or JSON; returns ``(data, detected format)``.

    Raises :class:`ValueError` naming what is wrong, also for a text nested deeper than
    :data:`tinker_core.config.MAX_CONFIG_DEPTH` or whose YAML aliases expand to more values than
    it has bytes (an alias bomb): :func:`tinker_core.config.check_config_shape`, which
    :func:`tinker_core.config.load_config` runs too.
    """
    try:
        data, detected = _decode_config_text(text, config_format)
    except RecursionError:
        raise ValueError(f"config_text: {CONFIG_TOO_DEEP}") from None
    except ValueError as e:
        message = str(e)
        raise ValueError(message if message.startswith("config_text:") else f"config_text: {message}") from None
    try:
        check_config_shape(data, len(text))
    except ConfigError as e:
        raise ValueError(f"config_text: {e.problems[0]}") from None
    return data, detected


def _decode_config_text(text: str, config_format: int) -> tuple[Any, int]:
    if not text.strip():
        raise ValueError("config_text: is empty; send the job config (the file 'opentinker train' reads) as YAML or JSON")
    if config_format == jobs_pb2.CONFIG_FORMAT_JSON:
        try:
            return json.loads(text), jobs_pb2.CONFIG_FORMAT_JSON
        except json.JSONDecodeError as e:
            raise ValueError(f"config_text: not valid JSON ({e}); fix it or send config_format YAML") from None
    if config_format == jobs_pb2.CONFIG_FORMAT_UNSPECIFIED:
        try:
            data = json.loads(text)
            if isinstance(data, dict):
                return data, jobs_pb2.CONFIG_FORMAT_JSON
        except json.JSONDecodeError:
            pass
    try:
        return yaml.safe_load(text), jobs_pb2.CONFIG_FORMAT_YAML
    except yaml.YAMLError as e:
        raise ValueError(f"config_text: not valid YAML ({e})") from None


def page_token(tenant: str, states: list[JobState], before_seq: int) -> str:
    """The token of the page after the job ``before_seq``, bound to the tenant and the filter."""
    payload = {"tenant": tenant, "states": sorted(int(s) for s in states), "before": before_seq}
    return base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode()


def before_seq_of(token: str, tenant: str, states: list[JobState]) -> int | None:
    """The ``before_seq`` in ``token`` ("" -> None, the first page).

    Raises :class:`ValueError` when the token is not one :func:`page_token` made for this
    tenant (the same message for garbage and for another tenant's token) or for these states.
    """
    if not token:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
        before = payload["before"]
        valid = (payload["tenant"] == tenant and type(before) is int and 0 < before <= MAX_CURSOR
                 and isinstance(payload["states"], list))
    except (ValueError, TypeError, KeyError, UnicodeError, RecursionError):
        valid = False
    if not valid:
        raise ValueError(
            "page_token: not a token this server gave you; pass next_page_token from your previous page, or '' for the first"
        )
    if payload["states"] != sorted(int(s) for s in states):
        raise ValueError("page_token: was made for another states filter; send the first page's states, or '' to start again")
    return int(before)


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

    # ---- RPCs -------------------------------------------------------------------------------

    def Submit(self, request: jobs_pb2.SubmitJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        tenant = self._tenant(context)
        if len(request.client_request_id) > MAX_REQUEST_ID_CHARS:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                  f"client_request_id: {len(request.client_request_id):,} characters, over the limit of "
                  f"{MAX_REQUEST_ID_CHARS}; send a short unique key such as a UUID")
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


def demand_of(config: JobConfig) -> Resources:
    """What a job reserves: ``resources.cpus``, ``gpus`` and ``memory_gb`` (None -> 0), plus
    those of each rollout worker and learner actor of its ``execution`` section."""
    r = config.resources
    total = Resources(cpus=r.cpus, gpus=r.gpus, memory_gb=r.memory_gb or 0.0)
    ex = config.execution
    for count, w in ((ex.rollout_workers, ex.rollout_worker), (ex.learners - 1, ex.learner)):
        total = total + Resources(cpus=count * w.num_cpus, gpus=count * w.num_gpus, memory_gb=count * (w.memory_gb or 0.0))
    return total

