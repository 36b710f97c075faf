"""TrainingService sessions: who owns them, where they run, idempotent requests, idle release.

A *session* is one trainable model of one tenant: a LoRA adapter on a shared base model, or
(``lora_rank == 0``) a full copy, on a host of the :class:`~tinker_scheduler.host_pool.HostPool`.
:class:`SessionManager` keeps the guarantees the service documents (see
:mod:`tinker_scheduler.training_service`): tenants see only their own sessions, a session's
requests run one at a time, a repeated ``request_id`` gets the first answer, and an idle session
is checkpointed and released from its host, then restored on its next request.

**Idempotence.** The response cache of a session maps ``request_id`` to the request's *key* (a
hash of its method and arguments) and a future of its answer. The same id with another key is
``INVALID_ARGUMENT``; with the same key it returns the first answer, or waits for it while the
first attempt runs (the in-flight table is the same futures). An attempt that ends without an
answer (``UNAVAILABLE``, ``INTERNAL``, ``DEADLINE_EXCEEDED``, ``CANCELLED``: it did not run or the
host died) is forgotten, so a retry runs the request.

**Deadlines.** A :class:`Caller` carries the client's deadline and cancellation to the model host:
a request whose client is gone before its turn is dropped unrun.

Sessions are held in memory: they end with the scheduler process (their saved states remain).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as WaitTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from tinker_scheduler import host_ops as ops
from tinker_scheduler.errors import StatusError
from tinker_scheduler.host_executor import cancelled, expired
from tinker_scheduler.host_pool import HostArgs, HostHandle, HostKey, HostPool
from tinker_scheduler.model_host import SessionSpec
from tinker_scheduler.paths import PathPolicy
from tinker_scheduler.policy import Resources

logger = logging.getLogger("tinker_scheduler.training")

R = TypeVar("R")

#: Answers kept per session for requests retried with the same ``request_id``.
REQUEST_CACHE_SIZE = 1024
#: Error codes that are not an answer to a request (it did not run, or its host died): such an
#: attempt is forgotten and a retry with the same ``request_id`` runs the request.
NOT_ANSWERS = frozenset({"UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED", "CANCELLED"})


@dataclass
class Caller:
    """The client of one request: its deadline (seconds since the epoch; None: none) and whether it
    went away (:meth:`cancel`). A request whose client is gone is dropped before it runs."""

    deadline: float | None = None
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    host: HostHandle | None = None  # where the request waits or runs
    gone: bool = False

    def remaining(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.time())

    def check(self) -> None:
        """Raise CANCELLED or DEADLINE_EXCEEDED if the client is gone."""
        if self.gone:
            raise cancelled()
        if self.deadline is not None and time.time() >= self.deadline:
            raise expired()

    def cancel(self) -> None:
        """The client went away: drop the request if it has not started (it may be queued on a host)."""
        self.gone = True
        host = self.host
        if host is not None:
            with contextlib.suppress(Exception):  # a dead host has nothing to drop
                host.cancel(self.token)


class HostCall(Protocol):
    """Runs a request of the session on its host (:mod:`~tinker_scheduler.host_ops`), with the
    caller's deadline and token; answers the request's response type."""

    def __call__(self, request: ops.HostRequest[R]) -> R: ...


@dataclass(frozen=True)
class SessionRequest:
    """What CreateSession asks for (see ``CreateTrainingSessionRequest``)."""

    base_model: str
    lora_rank: int = 8
    lora_alpha: float = 0.0
    lora_dropout: float = 0.0
    lora_target_modules: tuple[str, ...] = ()
    seed: int = 0
    precision: str | None = None
    device: str | None = None
    request_id: str = ""


@dataclass
class TrainingSession:
    """A training session: one tenant's trainable model (an adapter on a shared base model, or a
    full copy) on a model host, where its :class:`SessionSpec` has a slot; its saved states live in
    ``dir``. ``state``: ``active`` (on its host), ``released`` (checkpointed to ``release_path``
    while idle) or ``closed``."""

    id: str
    tenant: str
    spec: SessionSpec
    host_key: HostKey
    host_kwargs: HostArgs
    dir: Path
    info: ops.ModelInfo = field(init=False)  # set when the session is put on its host
    state: str = "active"  # active | released | closed
    release_path: str = ""
    last_used: float = field(default_factory=time.monotonic)
    lock: threading.RLock = field(default_factory=threading.RLock)
    responses: OrderedDict[str, tuple[str, Future[Any]]] = field(default_factory=OrderedDict)  # id -> (key, answer)
    responses_lock: threading.Lock = field(default_factory=threading.Lock)
    joined: int = 0  # retries that found their first attempt still running and waited for it


class SessionManager:
    """The sessions of one scheduler, on the hosts of ``hosts``; saved states live under
    ``runs_dir/<tenant>/sessions/<session id>/``. A background thread releases sessions idle for
    ``idle_timeout_s`` and shuts down idle hosts (:meth:`HostPool.reap`)."""

    def __init__(
        self, runs_dir: Path, hosts: HostPool, *, idle_timeout_s: float = 600.0, reap_interval_s: float | None = None,
        paths: PathPolicy | None = None,
    ) -> None:
        self.runs_dir = runs_dir
        self.paths = paths or PathPolicy(runs_dir)  # which base models a tenant may load
        self.hosts = hosts
        self.idle_timeout_s = idle_timeout_s
        self._sessions: dict[str, TrainingSession] = {}
        self._created: dict[tuple[str, str], tuple[str, str]] = {}  # (tenant, request id) -> (session id, key)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        interval = reap_interval_s or max(0.05, min(5.0, min(idle_timeout_s, hosts.idle_timeout_s) / 4))
        self._reaper = threading.Thread(target=self._reap_loop, args=(interval,), name="opentinker-sessions", daemon=True)
        self._reaper.start()

    def create(self, tenant: str, request: SessionRequest, free: Resources | None) -> TrainingSession:
        """A new session on the host of its base model (the existing one for a repeated ``request_id``)."""
        if request.request_id:
            with self._lock:
                existing = self._created_by(tenant, request)
                if existing is not None:
                    return existing
        base = request.base_model.strip()
        if not base:
            raise StatusError("INVALID_ARGUMENT", "base_model: is empty; pass a hub id, a local path or 'tiny'")
        self.paths.check_model(base, tenant, "base_model")
        if request.lora_rank < 0:
            raise StatusError("INVALID_ARGUMENT", f"lora_rank: must be >= 0 (0 = full fine-tuning), got {request.lora_rank}")
        if not 0.0 <= request.lora_dropout < 1.0:
            raise StatusError("INVALID_ARGUMENT", f"lora_dropout: must be in [0, 1), got {request.lora_dropout}")
        session_id = f"ts-{uuid.uuid4().hex[:12]}"
        spec = SessionSpec(
            session_id=session_id, lora_rank=int(request.lora_rank), lora_alpha=float(request.lora_alpha),
            lora_dropout=float(request.lora_dropout), lora_target_modules=list(request.lora_target_modules),
            seed=int(request.seed), tenant=tenant,
        )
        host_kwargs: HostArgs = {"base_model": base, "device": request.device, "precision": request.precision,
                       "full": spec.lora_rank == 0}
        key = HostKey.of(base, request.precision, request.device, own=session_id if spec.lora_rank == 0 else None)
        session = TrainingSession(session_id, tenant, spec, key, host_kwargs, self.runs_dir / tenant / "sessions" / session_id)
        session.info = self._attach(session, free)
        session.dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if request.request_id:
                raced = self._created_by(tenant, request)
                if raced is not None:  # a concurrent retry won: undo ours
                    self._detach(session)
                    return raced
                self._created[(tenant, request.request_id)] = (session_id, _create_key(request))
            self._sessions[session_id] = session
        logger.info("training session %s (tenant %s) on %s, lora_rank=%d", session_id, tenant, base, spec.lora_rank)
        return session

    def _created_by(self, tenant: str, request: SessionRequest) -> TrainingSession | None:
        """The live session an earlier CreateSession with ``request.request_id`` made; INVALID_ARGUMENT
        if that request asked for something else."""
        entry = self._created.get((tenant, request.request_id))
        if entry is None or entry[0] not in self._sessions:
            return None
        if entry[1] != _create_key(request):
            raise StatusError(
                "INVALID_ARGUMENT",
                f"request_id: {request.request_id!r} already created a session with other arguments; "
                "send a new request_id for a new session",
            )
        return self._sessions[entry[0]]

    def _attach(self, session: TrainingSession, free: Resources | None) -> ops.ModelInfo:
        host = self.hosts.attach_session(session.host_key, session.host_kwargs, session.id, free)
        try:
            return host.add_session(session.spec)
        except BaseException:
            self._detach(session)
            raise

    def _detach(self, session: TrainingSession) -> None:
        host = self.hosts.detach_session(session.host_key, session.id)
        if host is None:
            return
        try:
            host.remove_session(session.id)
        except StatusError:
            logger.debug("removing session %s", session.id, exc_info=True)

    def get(self, tenant: str, session_id: str) -> TrainingSession:
        """The tenant's session ``session_id``; NOT_FOUND for another tenant's, as for none."""
        if not session_id:
            raise StatusError("INVALID_ARGUMENT", "session_id: is empty; pass the id CreateSession returned")
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None or session.tenant != tenant or session.state == "closed":
            raise StatusError("NOT_FOUND", f"session_id: no training session {session_id!r}; create one with CreateSession")
        return session

    def run(
        self, session: TrainingSession, request_id: str, fn: Callable[[HostCall], R], *, key: str = "",
        caller: Caller | None = None,
    ) -> R:
        """Run ``fn(call)`` for the session once per ``request_id`` (in arrival order).

        ``call(op, kwargs)`` runs ``op`` on the session's host for ``caller``. ``key`` identifies the
        request's method and arguments (``tinker_core.proto.request_key``); see the module docstring.
        """
        caller = caller or Caller()
        if not request_id:
            return self._execute(session, fn, caller)
        while True:
            with session.responses_lock:
                entry = session.responses.get(request_id)
                if entry is None:
                    fut: Future[R] = Future()
                    session.responses[request_id] = (key, fut)
                    while len(session.responses) > REQUEST_CACHE_SIZE:
                        session.responses.popitem(last=False)
                    break
                if entry[0] != key:
                    raise StatusError(
                        "INVALID_ARGUMENT",
                        f"request_id: {request_id!r} was already used for another request (other method or "
                        "arguments) in this session; send a new request_id for a new request",
                    )
                if not entry[1].done():
                    session.joined += 1
            try:  # the answer of an earlier attempt (waiting while it runs)
                return cast(R, entry[1].result(caller.remaining()))
            except WaitTimeout:
                raise expired(f"request_id {request_id!r} (its first attempt still runs)") from None
            except Exception as e:
                if _is_answer(e):
                    raise
                # that attempt ended without an answer and was forgotten: run the request here
        try:
            result = self._execute(session, fn, caller)
        except BaseException as e:
            if not _is_answer(e):  # a retry may try again
                with session.responses_lock:
                    if session.responses.get(request_id, (key, None))[1] is fut:
                        session.responses.pop(request_id)
            fut.set_exception(e)
            raise
        fut.set_result(result)
        return result

    def _execute(self, session: TrainingSession, fn: Callable[[HostCall], R], caller: Caller) -> R:
        remaining = caller.remaining()
        if not session.lock.acquire(timeout=-1 if remaining is None else remaining):
            raise expired()  # the session's earlier requests took longer than the client waits
        try:
            caller.check()
            if session.state == "closed":
                raise StatusError("NOT_FOUND", f"session_id: training session {session.id!r} was closed")
            if session.state == "released":
                self._restore(session)
            host = self.hosts.get(session.host_key)
            if host is None:  # e.g. a job on the same host crashed its process
                session.state = "closed"
                raise StatusError(
                    "UNAVAILABLE",
                    f"session_id: the model host of training session {session.id!r} died and the session's "
                    "state since its last SaveState is lost; create a new session and LoadState the last saved path",
                )
            caller.host = host

            def call(request: ops.HostRequest[R]) -> R:
                return host.call(session.id, request, deadline=caller.deadline, token=caller.token)

            try:
                return fn(call)
            finally:
                session.last_used = time.monotonic()
        finally:
            session.lock.release()

    def _host_of(self, session: TrainingSession) -> HostHandle:
        host = self.hosts.get(session.host_key)
        if host is None:
            raise StatusError("UNAVAILABLE", f"the model host of training session {session.id!r} is gone")
        return host

    def _restore(self, session: TrainingSession) -> None:
        logger.info("restoring idle session %s from %s", session.id, session.release_path)
        self._attach(session, None)
        self._host_of(session).call(session.id, ops.LoadState(session.release_path, with_optimizer=True))
        session.state = "active"

    def release(self, session: TrainingSession) -> bool:
        """Checkpoint an idle session and free its place on the host (if no request is running)."""
        if not session.lock.acquire(blocking=False):
            return False
        try:
            if session.state != "active":
                return False
            path = session.dir / "idle"
            self._host_of(session).call(session.id, ops.SaveState(str(path)))
            self._detach(session)
            session.release_path = str(path)
            session.state = "released"
            logger.info("session %s idle: checkpointed to %s and released", session.id, path)
            return True
        finally:
            session.lock.release()

    def close_session(self, session: TrainingSession) -> None:
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
            raise StatusError("NOT_FOUND", f"{field_name}: no saved state {path!r}; pass a path SaveState returned")
        return str(resolved)

    # ---- background -------------------------------------------------------------------------
    def _reap_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.reap()
            except Exception:  # noqa: BLE001 - keep reaping
                logger.exception("session reaper failed")

    def reap(self) -> None:
        """Release sessions idle longer than ``idle_timeout_s``, then shut down idle hosts."""
        now = time.monotonic()
        with self._lock:
            sessions = list(self._sessions.values())
        for s in sessions:
            if s.state == "active" and now - s.last_used > self.idle_timeout_s:
                try:
                    self.release(s)
                except StatusError:
                    logger.exception("releasing idle session %s", s.id)
        self.hosts.reap()

    def close(self) -> None:
        """Stop the reaper (the scheduler closes the host pool)."""
        self._stop.set()


def _is_answer(error: BaseException) -> bool:
    """Whether a failed attempt answered its request (bad input, ...); see :data:`NOT_ANSWERS`."""
    return isinstance(error, StatusError) and error.code not in NOT_ANSWERS


def _create_key(request: SessionRequest) -> str:
    """What a CreateSession asked for, without its request id."""
    return repr(dataclasses.replace(request, request_id=""))
