"""``opentinker.v1.TrainingService``: Tinker-style training sessions served by the scheduler.

The scheduler's gRPC server serves this service next to ``JobService`` (same port, same API keys
and tenants, see :mod:`tinker_scheduler.auth`). A *session* is one trainable model: a LoRA adapter
on a shared base model, or (``lora_rank == 0``) a full copy. Sessions live on model hosts
(:class:`tinker_scheduler.model_host.ModelHost`, Ray actors): all LoRA sessions of one base model
(same id, precision and device) share one host; a full fine-tuning session gets its own.

Guarantees:

* **Tenants**: a session belongs to the tenant that created it; any other tenant gets
  ``NOT_FOUND``, exactly as for an id that does not exist. Saved states live under
  ``RUNS_DIR/<tenant>/sessions/<session id>/`` and ``LoadState`` only reads the caller's own.
* **Order**: requests of one session run one at a time, in arrival order (the client SDK sends
  a session's requests in submission order); sessions on one host are served round-robin.
* **Idempotence**: a request carrying a ``request_id`` already seen in the session returns the
  first answer (or waits for it while it is still running); it is never applied twice. The last
  :data:`REQUEST_CACHE_SIZE` answers per session are kept.
* **Idle sessions**: a session unused for ``session_idle_timeout_s`` is checkpointed (weights,
  optimizer, RNG, step) and released from its host; its next request restores it transparently.
  Gradients accumulated but not applied by ``OptimStep`` are not kept across a release.
  A host without sessions for ``host_idle_timeout_s`` shuts down.
* **No pickles on the wire**: tensors travel as packed numeric fields, weights as
  :class:`TensorChunk` streams. Message sizes are capped by ``max_message_bytes`` (both ways).

Sessions are held in memory: they end with the scheduler process (their saved states remain).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

import grpc

from tinker_core.proto import common_pb2, tensors, training_pb2, training_pb2_grpc
from tinker_scheduler.auth import AuthError, authenticate
from tinker_scheduler.model_host import SessionSpec
from tinker_scheduler.policy import Resources

if TYPE_CHECKING:
    from tinker_scheduler.scheduler import Scheduler

logger = logging.getLogger("tinker_scheduler.training")

SERVICE_NAME = "opentinker.v1.TrainingService"
REQUEST_CACHE_SIZE = 1024
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
OPTION_KEYS = ("precision", "device", "revision")
STOP_REASON = {
    "length": training_pb2.STOP_REASON_LENGTH,
    "stop_token": training_pb2.STOP_REASON_STOP_TOKEN,
    "stop_string": training_pb2.STOP_REASON_STOP_STRING,
}


class ServiceError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------------------
# hosts
# ---------------------------------------------------------------------------------------------
class HostHandle:
    """A model host: a Ray actor (``backend="ray"``) or an object in this process (``"local"``)."""

    def __init__(
        self, key: tuple[Any, ...], backend: str, kwargs: dict[str, Any], cpus: float, *,
        gpus: float = 0.0, memory_gb: float = 0.0,
    ) -> None:
        self.key = key
        self.backend = backend
        self.cpus = cpus if backend == "ray" else 0.0
        self.gpus = gpus if backend == "ray" else 0.0
        self.memory_gb = memory_gb if backend == "ray" else 0.0
        self.sessions: set[str] = set()
        self.jobs: set[str] = set()  # JobService jobs running on this host (ray backend only)
        self.idle_since: float | None = time.monotonic()
        self.dead = False
        self.lock = threading.Lock()
        if backend == "local":
            from tinker_scheduler.model_host import ModelHost

            self._host: Any = ModelHost(**kwargs)
            self._actor = None
        else:
            import ray

            from tinker_scheduler.model_host import ModelHost

            self._host = None
            self._actor = (
                cast(Any, ray.remote(ModelHost))
                .options(
                    num_cpus=cpus, num_gpus=gpus or None, memory=int(memory_gb * 1024**3) or None,
                    max_concurrency=64, max_restarts=0,
                )
                .remote(num_threads=max(1, int(cpus)), **kwargs)
            )

    @property
    def actor(self) -> Any:
        """The Ray actor (``None`` for the local backend); the scheduler runs jobs on it."""
        return self._actor

    @property
    def reserved(self) -> Resources:
        return Resources(self.cpus, self.gpus, self.memory_gb)

    @property
    def idle(self) -> bool:
        return not self.sessions and not self.jobs

    def _invoke(self, method: str, *args: Any) -> tuple[Any, ...]:
        if self._actor is None:
            return cast(tuple[Any, ...], getattr(self._host, method)(*args))
        import ray

        try:
            return cast(tuple[Any, ...], ray.get(getattr(self._actor, method).remote(*args)))
        except ray.exceptions.RayError as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            if isinstance(e, ray.exceptions.RayActorError):
                self.dead = True
            return ("error", "UNAVAILABLE", f"the model host died ({type(e).__name__}: {first[:200]}); retry the request")

    def call(self, session_id: str, op: str, kwargs: Mapping[str, Any] | None = None) -> Any:
        return _unwrap(self._invoke("call", session_id, op, dict(kwargs or {})))

    def add_session(self, spec: SessionSpec) -> dict[str, Any]:
        return cast(dict[str, Any], _unwrap(self._invoke("add_session", spec.__dict__)))

    def remove_session(self, session_id: str) -> None:
        _unwrap(self._invoke("remove_session", session_id))

    def close(self) -> None:
        if self._actor is not None:
            import ray

            try:
                ray.kill(self._actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                logger.debug("killing model host", exc_info=True)
        elif self._host is not None:
            self._host.close()


def host_key(
    base_model: str, precision: str | None, device: str | None, *,
    revision: str | None = None, tokenizer: str | None = None, own: str | None = None,
) -> tuple[Any, ...]:
    """Which model host a LoRA session or job uses: the same key means the same base weights.

    ``own`` (a session or job id) gives a full fine-tuning session a host of its own.
    """
    return (base_model, revision or None, tokenizer or None, precision or "auto", device or "auto", own or "lora")


def _unwrap(result: tuple[Any, ...]) -> Any:
    if result[0] == "ok":
        return result[1]
    raise ServiceError(result[1], result[2])


# ---------------------------------------------------------------------------------------------
# sessions
# ---------------------------------------------------------------------------------------------
@dataclass
class Session:
    id: str
    tenant: str
    spec: SessionSpec
    host_key: tuple[Any, ...]
    host_kwargs: dict[str, Any]
    dir: Path
    info: dict[str, Any] = field(default_factory=dict)
    state: str = "active"  # active | released | closed
    release_path: str = ""
    last_used: float = field(default_factory=time.monotonic)
    lock: threading.RLock = field(default_factory=threading.RLock)
    responses: OrderedDict[str, Future[Any]] = field(default_factory=OrderedDict)
    responses_lock: threading.Lock = field(default_factory=threading.Lock)


class TrainingManager:
    """Sessions and the model hosts they run on (one per :class:`Scheduler`)."""

    def __init__(
        self,
        runs_dir: Path,
        *,
        backend: str = "ray",
        host_cpus: float = 1.0,
        session_idle_timeout_s: float = 600.0,
        host_idle_timeout_s: float = 60.0,
        reap_interval_s: float | None = None,
    ) -> None:
        if backend not in ("ray", "local"):
            raise ValueError(f"training host backend must be 'ray' or 'local', got {backend!r}")
        self.runs_dir = runs_dir
        self.backend = backend
        self.host_cpus = host_cpus
        self.session_idle_timeout_s = session_idle_timeout_s
        self.host_idle_timeout_s = host_idle_timeout_s
        self._sessions: dict[str, Session] = {}
        self._created: dict[tuple[str, str], str] = {}  # (tenant, request id) -> session id
        self._hosts: dict[tuple[Any, ...], HostHandle] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        interval = reap_interval_s or max(0.05, min(5.0, min(session_idle_timeout_s, host_idle_timeout_s) / 4))
        self._reaper = threading.Thread(target=self._reap_loop, args=(interval,), name="opentinker-sessions", daemon=True)
        self._reaper.start()

    # ---- resources --------------------------------------------------------------------------
    def reserved(self) -> Resources:
        """What the model hosts hold (the scheduler subtracts it from what jobs may use)."""
        total = Resources()
        with self._lock:
            for h in self._hosts.values():
                total = total + h.reserved
        return total

    # ---- jobs (JobService) on shared hosts --------------------------------------------------
    def job_host(
        self, job_id: str, key: tuple[Any, ...], host_kwargs: dict[str, Any], demand: Resources | None, max_jobs: int
    ) -> HostHandle | None:
        """A Ray model host for a LoRA job: one already serving ``key`` with room for another job,
        else (when ``demand`` is given) a new host that reserves ``demand``; None otherwise."""
        if self.backend != "ray":
            return None
        with self._lock:
            host = self._hosts.get(key)
            if host is not None and host.dead:
                self._hosts.pop(key, None)
                host = None
            if host is None and demand is not None:
                host = HostHandle(key, "ray", host_kwargs, demand.cpus, gpus=demand.gpus, memory_gb=demand.memory_gb)
                self._hosts[key] = host
                logger.info("model host %s started for job %s with %s", key, job_id, demand)
            if host is None or len(host.jobs) >= max_jobs:
                return None
            host.jobs.add(job_id)
            host.idle_since = None
            return host

    def detach_job(self, key: tuple[Any, ...], job_id: str, *, host_died: bool = False) -> None:
        """The job ended (its adapter is unloaded by the host); a dead host is dropped."""
        with self._lock:
            host = self._hosts.get(key)
            if host is None:
                return
            host.jobs.discard(job_id)
            if host_died:
                host.dead = True
            if host.dead:
                self._hosts.pop(key, None)
            elif host.idle:
                host.idle_since = time.monotonic()

    def host_count(self) -> int:
        with self._lock:
            return len(self._hosts)

    # ---- sessions ---------------------------------------------------------------------------
    def create(self, tenant: str, request: training_pb2.CreateTrainingSessionRequest, free: Resources | None) -> Session:
        if request.request_id:
            with self._lock:
                existing = self._created.get((tenant, request.request_id))
                if existing and existing in self._sessions:
                    return self._sessions[existing]
        if not request.base_model.strip():
            raise ServiceError("INVALID_ARGUMENT", "base_model: is empty; pass a hub id, a local path or 'tiny'")
        if request.lora_rank < 0:
            raise ServiceError("INVALID_ARGUMENT", f"lora_rank: must be >= 0 (0 = full fine-tuning), got {request.lora_rank}")
        if not 0.0 <= request.lora_dropout < 1.0:
            raise ServiceError("INVALID_ARGUMENT", f"lora_dropout: must be in [0, 1), got {request.lora_dropout}")
        options = _options(request.options_json)
        if options.get("revision"):
            raise ServiceError(
                "INVALID_ARGUMENT",
                "options_json.revision: pinned revisions are not supported yet; download that revision to a "
                "directory and pass it as base_model",
            )
        session_id = f"ts-{uuid.uuid4().hex[:12]}"
        spec = SessionSpec(
            session_id=session_id, lora_rank=int(request.lora_rank), lora_alpha=float(request.lora_alpha),
            lora_dropout=float(request.lora_dropout), lora_target_modules=list(request.lora_target_modules),
            seed=int(request.seed),
        )
        base = request.base_model.strip()
        host_kwargs = {"base_model": base, "device": options.get("device"), "precision": options.get("precision"),
                       "full": spec.lora_rank == 0}
        key = host_key(base, options.get("precision"), options.get("device"), own=session_id if spec.lora_rank == 0 else None)
        session = Session(session_id, tenant, spec, key, host_kwargs, self.runs_dir / tenant / "sessions" / session_id)
        session.info = self._attach(session, free)
        session.dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if request.request_id:
                raced = self._created.get((tenant, request.request_id))
                if raced and raced in self._sessions:  # a concurrent retry won: undo ours
                    self._detach(session)
                    return self._sessions[raced]
                self._created[(tenant, request.request_id)] = session_id
            self._sessions[session_id] = session
        logger.info("training session %s (tenant %s) on %s, lora_rank=%d", session_id, tenant, base, spec.lora_rank)
        return session

    def _host_for(self, session: Session, free: Resources | None) -> HostHandle:
        with self._lock:
            host = self._hosts.get(session.host_key)
            if host is not None and host.dead:
                self._hosts.pop(session.host_key, None)
                host = None
            if host is None:
                cpus = self.host_cpus if self.backend == "ray" else 0.0
                if free is not None and cpus > free.cpus + 1e-9:
                    raise ServiceError(
                        "RESOURCE_EXHAUSTED",
                        f"a new model host needs {cpus:g} CPU(s) but only {free.cpus:g} are free (jobs and other "
                        "hosts hold the rest); retry later, or share a base model another session already uses",
                    )
                host = HostHandle(session.host_key, self.backend, session.host_kwargs, cpus)
                self._hosts[session.host_key] = host
            host.sessions.add(session.id)
            host.idle_since = None
            return host

    def _attach(self, session: Session, free: Resources | None) -> dict[str, Any]:
        host = self._host_for(session, free)
        try:
            return host.add_session(session.spec)
        except BaseException:
            self._detach(session)
            raise

    def _detach(self, session: Session) -> None:
        with self._lock:
            host = self._hosts.get(session.host_key)
            if host is None:
                return
            host.sessions.discard(session.id)
            if host.idle:
                host.idle_since = time.monotonic()
        try:
            host.remove_session(session.id)
        except ServiceError:
            logger.debug("removing session %s", session.id, exc_info=True)

    def get(self, tenant: str, session_id: str) -> Session:
        if not session_id:
            raise ServiceError("INVALID_ARGUMENT", "session_id: is empty; pass the id CreateSession returned")
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None or session.tenant != tenant or session.state == "closed":
            raise ServiceError("NOT_FOUND", f"session_id: no training session {session_id!r}; create one with CreateSession")
        return session

    def run(self, session: Session, request_id: str, fn: Callable[[HostHandle], Any]) -> Any:
        """Run ``fn(host)`` for the session once per ``request_id`` (in arrival order)."""
        fut: Future[Any] | None = None
        if request_id:
            with session.responses_lock:
                fut = session.responses.get(request_id)
                first = fut is None
                if first:
                    fut = Future()
                    session.responses[request_id] = fut
                    while len(session.responses) > REQUEST_CACHE_SIZE:
                        session.responses.popitem(last=False)
            assert fut is not None
            if not first:
                return fut.result()
        try:
            result = self._execute(session, fn)
        except BaseException as e:
            if fut is not None:
                if not isinstance(e, ServiceError) or e.code in ("UNAVAILABLE", "INTERNAL"):
                    # not an answer: a retry may try again
                    with session.responses_lock:
                        session.responses.pop(request_id, None)
                fut.set_exception(e)
            raise
        if fut is not None:
            fut.set_result(result)
        return result

    def _execute(self, session: Session, fn: Callable[[HostHandle], Any]) -> Any:
        with session.lock:
            if session.state == "closed":
                raise ServiceError("NOT_FOUND", f"session_id: training session {session.id!r} was closed")
            if session.state == "released":
                self._restore(session)
            host = self._hosts.get(session.host_key)
            if host is None or host.dead:  # e.g. a job on the same host crashed its process
                session.state = "closed"
                raise ServiceError(
                    "UNAVAILABLE",
                    f"session_id: the model host of training session {session.id!r} died and the session's "
                    "state since its last SaveState is lost; create a new session and LoadState the last saved path",
                )
            try:
                return fn(host)
            finally:
                session.last_used = time.monotonic()

    def _restore(self, session: Session) -> None:
        logger.info("restoring idle session %s from %s", session.id, session.release_path)
        self._attach(session, None)
        host = self._hosts[session.host_key]
        host.call(session.id, "load_state", {"path": session.release_path, "with_optimizer": True})
        session.state = "active"

    def release(self, session: Session) -> bool:
        """Checkpoint an idle session and free its place on the host (if no request is running)."""
        if not session.lock.acquire(blocking=False):
            return False
        try:
            if session.state != "active":
                return False
            path = session.dir / "idle"
            host = self._hosts[session.host_key]
            host.call(session.id, "save_state", {"path": str(path)})
            self._detach(session)
            session.release_path = str(path)
            session.state = "released"
            logger.info("session %s idle: checkpointed to %s and released", session.id, path)
            return True
        finally:
            session.lock.release()

    def close_session(self, session: Session) -> None:
        with session.lock:
            if session.state == "active":
                self._detach(session)
            session.state = "closed"
        with self._lock:
            self._sessions.pop(session.id, None)

    def own_path(self, tenant: str, path: str, field_name: str) -> str:
        """``path`` if it lies under the tenant's sessions directory; NOT_FOUND otherwise."""
        root = (self.runs_dir / tenant / "sessions").resolve()
        try:
            resolved = Path(path).resolve()
        except (OSError, RuntimeError):
            resolved = None
        if not path or resolved is None or not resolved.is_relative_to(root) or not resolved.exists():
            raise ServiceError("NOT_FOUND", f"{field_name}: no saved state {path!r}; pass a path SaveState returned")
        return str(resolved)

    # ---- background -------------------------------------------------------------------------
    def _reap_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.reap()
            except Exception:  # noqa: BLE001 - keep reaping
                logger.exception("session reaper failed")

    def reap(self) -> None:
        now = time.monotonic()
        with self._lock:
            sessions = list(self._sessions.values())
        for s in sessions:
            if s.state == "active" and now - s.last_used > self.session_idle_timeout_s:
                try:
                    self.release(s)
                except ServiceError:
                    logger.exception("releasing idle session %s", s.id)
        with self._lock:
            idle = [
                k for k, h in self._hosts.items()
                if h.idle and h.idle_since is not None and now - h.idle_since > self.host_idle_timeout_s
            ]
            hosts = [self._hosts.pop(k) for k in idle]
        for h in hosts:
            logger.info("model host %s idle: shutting down", h.key)
            h.close()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            hosts = list(self._hosts.values())
            self._hosts.clear()
        for h in hosts:
            h.close()


def _options(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ServiceError("INVALID_ARGUMENT", f"options_json: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ServiceError("INVALID_ARGUMENT", "options_json: must be a JSON object")
    unknown = sorted(set(data) - set(OPTION_KEYS))
    if unknown:
        raise ServiceError("INVALID_ARGUMENT", f"options_json: unknown key(s) {unknown}; known: {list(OPTION_KEYS)}")
    return data


# ---------------------------------------------------------------------------------------------
# wire <-> python
# ---------------------------------------------------------------------------------------------
def datum_to_dict(d: training_pb2.Datum) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tokens": list(d.tokens), "target_tokens": list(d.target_tokens), "loss_weights": list(d.loss_weights),
        "advantages": list(d.advantages), "sampling_logprobs": list(d.sampling_logprobs),
    }
    if d.extra_inputs:
        raise ServiceError(
            "INVALID_ARGUMENT",
            f"data.extra_inputs: {sorted(d.extra_inputs)} not supported by the built-in trainer yet; "
            "the losses served take tokens, target_tokens, loss_weights, advantages and sampling_logprobs",
        )
    return out


def model_info(info: Mapping[str, Any]) -> training_pb2.ModelInfo:
    return training_pb2.ModelInfo(**{k: info[k] for k in training_pb2.ModelInfo.DESCRIPTOR.fields_by_name if k in info})


def _adam(a: training_pb2.AdamParams) -> dict[str, float]:
    return {f.name: float(getattr(a, f.name)) for f in training_pb2.AdamParams.DESCRIPTOR.fields}


def _sampling(p: training_pb2.SamplingParams) -> dict[str, Any]:
    out: dict[str, Any] = {"top_k": p.top_k, "max_tokens": p.max_tokens, "stop": list(p.stop),
                           "stop_token_ids": list(p.stop_token_ids)}
    for name in ("temperature", "top_p", "seed"):
        if p.HasField(name):
            out[name] = getattr(p, name)
    if p.max_tokens <= 0:
        raise ServiceError("INVALID_ARGUMENT", f"sampling_params.max_tokens: must be > 0 (got {p.max_tokens})")
    return out


# ---------------------------------------------------------------------------------------------
# the servicer
# ---------------------------------------------------------------------------------------------
class TrainingService(training_pb2_grpc.TrainingServiceServicer):
    """The TrainingService handlers of one scheduler (see the module docstring)."""

    def __init__(self, scheduler: Scheduler, manager: TrainingManager, *, free: Callable[[], Resources] | None = None) -> None:
        self.scheduler = scheduler
        self.manager = manager
        self._free = free

    def _tenant(self, context: grpc.ServicerContext) -> str:
        try:
            return authenticate(self.scheduler.store, self.scheduler.auth, context.invocation_metadata())
        except AuthError as e:
            _abort(context, grpc.StatusCode.UNAUTHENTICATED, str(e))

    def _guarded(self, context: grpc.ServicerContext, fn: Callable[[str], Any]) -> Any:
        tenant = self._tenant(context)
        try:
            return fn(tenant)
        except ServiceError as e:
            _abort(context, getattr(grpc.StatusCode, e.code, grpc.StatusCode.INTERNAL), str(e))

    def _session_call(self, context: grpc.ServicerContext, session_id: str, request_id: str,
                      fn: Callable[[Session, HostHandle], Any]) -> Any:
        def go(tenant: str) -> Any:
            session = self.manager.get(tenant, session_id)
            return self.manager.run(session, request_id, lambda host: fn(session, host))

        return self._guarded(context, go)

    # ---- RPCs -------------------------------------------------------------------------------
    def CreateSession(self, request: training_pb2.CreateTrainingSessionRequest, context: grpc.ServicerContext) -> training_pb2.TrainingSession:
        def go(tenant: str) -> training_pb2.TrainingSession:
            free = self._free() if self._free is not None else None
            session = self.manager.create(tenant, request, free)
            return training_pb2.TrainingSession(session_id=session.id, info=model_info(session.info))

        return self._guarded(context, go)

    def GetInfo(self, request: training_pb2.GetInfoRequest, context: grpc.ServicerContext) -> training_pb2.ModelInfo:
        info = self._session_call(context, request.session_id, "", lambda s, h: h.call(s.id, "info"))
        return model_info(info)

    def _data(self, request: Any) -> list[dict[str, Any]]:
        return [datum_to_dict(d) for d in request.data]

    @staticmethod
    def _outputs(result: Mapping[str, Any]) -> list[training_pb2.DatumOutput]:
        return [training_pb2.DatumOutput(logprobs=lp) for lp in result["logprobs"]]

    def ForwardBackward(self, request: training_pb2.ForwardBackwardRequest, context: grpc.ServicerContext) -> training_pb2.ForwardBackwardResponse:
        def fn(s: Session, h: HostHandle) -> training_pb2.ForwardBackwardResponse:
            if not request.loss_fn:
                raise ServiceError("INVALID_ARGUMENT", "loss_fn: is empty; name a loss such as 'cross_entropy'")
            r = h.call(s.id, "forward_backward", {"data": self._data(request), "loss_fn": request.loss_fn,
                                                  "loss_config": dict(request.loss_config)})
            return training_pb2.ForwardBackwardResponse(outputs=self._outputs(r), metrics=r["metrics"])

        return self._session_call(context, request.session_id, request.request_id, fn)

    def Forward(self, request: training_pb2.ForwardRequest, context: grpc.ServicerContext) -> training_pb2.ForwardResponse:
        def fn(s: Session, h: HostHandle) -> training_pb2.ForwardResponse:
            r = h.call(s.id, "forward", {"data": self._data(request), "loss_fn": request.loss_fn,
                                         "loss_config": dict(request.loss_config)})
            return training_pb2.ForwardResponse(outputs=self._outputs(r), metrics=r["metrics"])

        return self._session_call(context, request.session_id, request.request_id, fn)

    def OptimStep(self, request: training_pb2.OptimStepRequest, context: grpc.ServicerContext) -> training_pb2.OptimStepResponse:
        def fn(s: Session, h: HostHandle) -> training_pb2.OptimStepResponse:
            r = h.call(s.id, "optim_step", {"adam": _adam(request.adam)})
            return training_pb2.OptimStepResponse(step=r["step"], metrics=r["metrics"])

        return self._session_call(context, request.session_id, request.request_id, fn)

    def Sample(self, request: training_pb2.SampleRequest, context: grpc.ServicerContext) -> training_pb2.SampleResponse:
        def fn(s: Session, h: HostHandle) -> training_pb2.SampleResponse:
            path = self.manager.own_path(s.tenant, request.sampler_path, "sampler_path") if request.sampler_path else ""
            rows = h.call(s.id, "sample", {
                "prompts": [list(p.tokens) for p in request.prompts], "params": _sampling(request.sampling_params),
                "num_samples": request.num_samples or 1, "sampler_path": path,
            })
            return training_pb2.SampleResponse(results=[
                training_pb2.PromptSamples(samples=[
                    training_pb2.SampledSequence(tokens=x["tokens"], logprobs=x["logprobs"],
                                                 stop_reason=STOP_REASON[x["stop_reason"]])
                    for x in row
                ]) for row in rows
            ])

        return self._session_call(context, request.session_id, request.request_id, fn)

    def ComputeLogprobs(self, request: training_pb2.ComputeLogprobsRequest, context: grpc.ServicerContext) -> training_pb2.ComputeLogprobsResponse:
        def fn(s: Session, h: HostHandle) -> training_pb2.ComputeLogprobsResponse:
            rows = h.call(s.id, "compute_logprobs", {"sequences": [list(x.tokens) for x in request.sequences]})
            return training_pb2.ComputeLogprobsResponse(logprobs=[training_pb2.Logprobs(values=r) for r in rows])

        return self._session_call(context, request.session_id, "", fn)

    def _named_path(self, s: Session, kind: str, name: str) -> str:
        if not NAME_RE.match(name or ""):
            raise ServiceError("INVALID_ARGUMENT", f"name: {name!r} is not a valid name; use letters, digits, '.', '_' and '-' (e.g. 'step-000100')")
        return str(s.dir / kind / name)

    def SaveState(self, request: training_pb2.SaveStateRequest, context: grpc.ServicerContext) -> training_pb2.SaveStateResponse:
        def fn(s: Session, h: HostHandle) -> training_pb2.SaveStateResponse:
            r = h.call(s.id, "save_state", {"path": self._named_path(s, "states", request.name)})
            return training_pb2.SaveStateResponse(path=r["path"])

        return self._session_call(context, request.session_id, request.request_id, fn)

    def LoadState(self, request: training_pb2.LoadStateRequest, context: grpc.ServicerContext) -> training_pb2.LoadStateResponse:
        def fn(s: Session, h: HostHandle) -> training_pb2.LoadStateResponse:
            path = self.manager.own_path(s.tenant, request.path, "path")
            r = h.call(s.id, "load_state", {"path": path, "with_optimizer": request.with_optimizer})
            return training_pb2.LoadStateResponse(step=r["step"])

        return self._session_call(context, request.session_id, request.request_id, fn)

    def SaveWeightsForSampler(self, request: training_pb2.SaveWeightsForSamplerRequest, context: grpc.ServicerContext) -> training_pb2.SaveWeightsForSamplerResponse:
        def fn(s: Session, h: HostHandle) -> training_pb2.SaveWeightsForSamplerResponse:
            r = h.call(s.id, "save_weights_for_sampler", {"path": self._named_path(s, "sampler", request.name)})
            return training_pb2.SaveWeightsForSamplerResponse(path=r["path"])

        return self._session_call(context, request.session_id, request.request_id, fn)

    def GetWeights(self, request: training_pb2.GetWeightsRequest, context: grpc.ServicerContext) -> Iterator[common_pb2.TensorChunk]:
        def fn(s: Session, h: HostHandle) -> dict[str, Any]:
            path = request.path
            if path and path != "tokenizer":
                path = self.manager.own_path(s.tenant, path, "path")
            return cast(dict[str, Any], h.call(s.id, "get_weights", {"path": path, "trainable_only": request.trainable_only}))

        arrays = self._session_call(context, request.session_id, "", fn)
        chunk = int(request.chunk_bytes) or tensors.DEFAULT_CHUNK_BYTES
        for name in sorted(arrays):
            yield from tensors.iter_tensor_chunks(name, arrays[name], chunk)

    def CloseSession(self, request: training_pb2.CloseTrainingSessionRequest, context: grpc.ServicerContext) -> training_pb2.CloseTrainingSessionResponse:
        def go(tenant: str) -> training_pb2.CloseTrainingSessionResponse:
            try:
                session = self.manager.get(tenant, request.session_id)
            except ServiceError as e:
                if e.code == "NOT_FOUND":  # idempotent: closing a closed session is fine
                    return training_pb2.CloseTrainingSessionResponse()
                raise
            self.manager.close_session(session)
            return training_pb2.CloseTrainingSessionResponse()

        return self._guarded(context, go)


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("unreachable")
