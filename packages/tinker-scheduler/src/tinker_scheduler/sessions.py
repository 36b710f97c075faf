"""TrainingService sessions: who owns them, where they run, idempotent requests, idle release.

A *session* is one trainable model of one tenant: a LoRA adapter on a shared base model, or
(``lora_rank == 0``) a full copy, on a host of the :class:`~tinker_scheduler.host_pool.HostPool`.
:class:`SessionManager` keeps the guarantees the service documents (see
:mod:`tinker_scheduler.training_service`): tenants see only their own sessions, a session's
requests run one at a time, a repeated ``request_id`` gets the first answer, and an idle session
is checkpointed and released from its host, then restored on its next request.

Sessions are held in memory: they end with the scheduler process (their saved states remain).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_scheduler.errors import StatusError
from tinker_scheduler.host_pool import HostHandle, HostKey, HostPool
from tinker_scheduler.model_host import SessionSpec
from tinker_scheduler.paths import PathPolicy
from tinker_scheduler.policy import Resources

logger = logging.getLogger("tinker_scheduler.training")

#: Answers kept per session for requests retried with the same ``request_id``.
REQUEST_CACHE_SIZE = 1024


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
class Session:
    id: str
    tenant: str
    spec: SessionSpec
    host_key: HostKey
    host_kwargs: dict[str, Any]
    dir: Path
    info: dict[str, Any] = field(default_factory=dict)
    state: str = "active"  # active | released | closed
    release_path: str = ""
    last_used: float = field(default_factory=time.monotonic)
    lock: threading.RLock = field(default_factory=threading.RLock)
    responses: OrderedDict[str, Future[Any]] = field(default_factory=OrderedDict)
    responses_lock: threading.Lock = field(default_factory=threading.Lock)


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
        self._sessions: dict[str, Session] = {}
        self._created: dict[tuple[str, str], str] = {}  # (tenant, request id) -> session id
        self._lock = threading.RLock()
        self._stop = threading.Event()
        interval = reap_interval_s or max(0.05, min(5.0, min(idle_timeout_s, hosts.idle_timeout_s) / 4))
        self._reaper = threading.Thread(target=self._reap_loop, args=(interval,), name="opentinker-sessions", daemon=True)
        self._reaper.start()

    def create(self, tenant: str, request: SessionRequest, free: Resources | None) -> Session:
        """A new session on the host of its base model (the existing one for a repeated ``request_id``)."""
        if request.request_id:
            with self._lock:
                existing = self._created.get((tenant, request.request_id))
                if existing and existing in self._sessions:
                    return self._sessions[existing]
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
            seed=int(request.seed),
        )
        host_kwargs = {"base_model": base, "device": request.device, "precision": request.precision,
                       "full": spec.lora_rank == 0}
        key = HostKey.of(base, request.precision, request.device, own=session_id if spec.lora_rank == 0 else None)
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

    def _attach(self, session: Session, free: Resources | None) -> dict[str, Any]:
        host = self.hosts.attach_session(session.host_key, session.host_kwargs, session.id, free)
        try:
            return host.add_session(session.spec)
        except BaseException:
            self._detach(session)
            raise

    def _detach(self, session: Session) -> None:
        host = self.hosts.detach_session(session.host_key, session.id)
        if host is None:
            return
        try:
            host.remove_session(session.id)
        except StatusError:
            logger.debug("removing session %s", session.id, exc_info=True)

    def get(self, tenant: str, session_id: str) -> Session:
        """The tenant's session ``session_id``; NOT_FOUND for another tenant's, as for none."""
        if not session_id:
            raise StatusError("INVALID_ARGUMENT", "session_id: is empty; pass the id CreateSession returned")
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None or session.tenant != tenant or session.state == "closed":
            raise StatusError("NOT_FOUND", f"session_id: no training session {session_id!r}; create one with CreateSession")
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
                if not isinstance(e, StatusError) or e.code in ("UNAVAILABLE", "INTERNAL"):
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
            try:
                return fn(host)
            finally:
                session.last_used = time.monotonic()

    def _host_of(self, session: Session) -> HostHandle:
        host = self.hosts.get(session.host_key)
        if host is None:
            raise StatusError("UNAVAILABLE", f"the model host of training session {session.id!r} is gone")
        return host

    def _restore(self, session: Session) -> None:
        logger.info("restoring idle session %s from %s", session.id, session.release_path)
        self._attach(session, None)
        self._host_of(session).call(session.id, "load_state", {"path": session.release_path, "with_optimizer": True})
        session.state = "active"

    def release(self, session: Session) -> bool:
        """Checkpoint an idle session and free its place on the host (if no request is running)."""
        if not session.lock.acquire(blocking=False):
            return False
        try:
            if session.state != "active":
                return False
            path = session.dir / "idle"
            self._host_of(session).call(session.id, "save_state", {"path": str(path)})
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
