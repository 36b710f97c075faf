"""The env server's session table: which sessions are open, who uses one now, why one is gone.

A :class:`Session` owns one env instance; its ``lock`` serialises the calls on it. The
:class:`SessionTable` caps how many are open, hands a session to one call at a time
(:meth:`SessionTable.use`), closes idle ones, remembers why a closed id is gone, and on
:meth:`SessionTable.stop` gives up on waiting calls and closes every env without hanging on a
busy one. Errors are :class:`RpcAbort` (a gRPC status code and a message).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

from tinker_core.remote.guard import POLL_S
from tinker_core.timeouts import CallTimeout, call_with_timeout

log = logging.getLogger(__name__)

REMEMBERED_GONE = 4096
"""How many closed or reaped session ids the table remembers, to say why one is gone."""

MAX_CALLS_PER_SESSION = 2
"""Calls one session may have on the server at once: the one running and one waiting (a retry).
More are ``RESOURCE_EXHAUSTED``, so a stuck session holds at most this many server threads."""


class RpcAbort(Exception):
    """Raised inside a handler: end the RPC with this status code and message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(eq=False)
class Session:
    """One client's env instance. ``lock`` serialises the calls on it; ``abandoned``: a call
    on it was given up on while it ran (that call closes the env when it ends)."""

    id: str
    env_id: str
    env: Any
    multi_agent: bool
    last_used: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0  # calls using the session now (guarded by the table's lock)
    reset_done: bool = False
    abandoned: bool = False
    last_request_id: str = ""
    last_request_key: str = ""  # hash of the method and the request of the last call
    last_response: Any = None


class SessionTable:
    """The open sessions (at most ``max_sessions``); closes ones idle over ``idle_timeout_s``.

    ``close_timeout_s`` bounds each ``env.close()`` (None: unbounded).
    """

    def __init__(self, max_sessions: int, idle_timeout_s: float | None, close_timeout_s: float | None) -> None:
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self.close_timeout_s = close_timeout_s
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._sessions: dict[str, Session] = {}
        self._creating = 0  # sessions being built (they count against the cap)
        self._gone: collections.OrderedDict[str, str] = collections.OrderedDict()

    def ids(self) -> list[str]:
        with self.lock:
            return sorted(self._sessions)

    def get(self, session_id: str) -> Session | None:
        with self.lock:
            return self._sessions.get(session_id)

    # -- opening ----------------------------------------------------------------------------
    def reserve(self) -> None:
        """Count a session being created against the cap; RESOURCE_EXHAUSTED when full.
        Pair with :meth:`unreserve` (after :meth:`add`, or when creating failed)."""
        for attempt in range(2):
            with self.lock:
                if len(self._sessions) + self._creating < self.max_sessions:
                    self._creating += 1
                    return
            if attempt == 0:
                self.reap_idle()  # make room from idle sessions before refusing
        raise RpcAbort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"the env server holds its maximum of {self.max_sessions} sessions "
            f"(max_sessions={self.max_sessions}); close sessions you no longer need "
            "(RemoteEnv.close()) or start the server with a larger max_sessions",
        )

    def unreserve(self) -> None:
        with self.lock:
            self._creating -= 1

    def add(self, session: Session) -> None:
        """Open ``session``; UNAVAILABLE (its env closed) when the server is stopping."""
        with self.lock:
            if not self.stopping.is_set():
                self._sessions[session.id] = session
                return
        self.close_env(session, wait_s=0)
        raise RpcAbort(grpc.StatusCode.UNAVAILABLE, "the env server is stopping")

    # -- using ------------------------------------------------------------------------------
    def _gone_message(self, session_id: str) -> str:
        why = self._gone.get(session_id)
        if why is not None:
            return f"env session {session_id!r} no longer exists: {why}; create a new session"
        if not session_id:
            return "session_id is empty; call CreateSession first and pass its session_id"
        return f"unknown env session {session_id!r}; call CreateSession first"

    @contextmanager
    def use(self, session_id: str, context: grpc.ServicerContext) -> Iterator[Session]:
        """Hold a session for one call: NOT_FOUND when unknown or gone, serialised per session
        (a call waiting for the one in flight gives up when its client does or the server stops)."""
        with self.lock:
            session = self._sessions.get(session_id)
            if session is None:
                raise RpcAbort(grpc.StatusCode.NOT_FOUND, self._gone_message(session_id))
            if session.in_flight >= MAX_CALLS_PER_SESSION:
                raise RpcAbort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"env session {session_id!r} is busy: a call runs on it and another waits "
                    "(calls on one session run one at a time); wait for their answers",
                )
            session.in_flight += 1
            session.last_used = time.monotonic()
        try:
            while not session.lock.acquire(timeout=POLL_S):
                if self.stopping.is_set():
                    raise RpcAbort(grpc.StatusCode.UNAVAILABLE, "the env server is stopping")
                if not context.is_active():
                    raise RpcAbort(grpc.StatusCode.CANCELLED, "the client cancelled the call")
            try:
                with self.lock:
                    if self._sessions.get(session_id) is not session:  # closed while we waited
                        raise RpcAbort(grpc.StatusCode.NOT_FOUND, self._gone_message(session_id))
                yield session
            finally:
                session.lock.release()
        finally:
            with self.lock:
                session.in_flight -= 1
                session.last_used = time.monotonic()

    def abandon(self, session: Session, why: str) -> None:
        """A call on ``session`` was given up on while it ran: the session is gone (``why``)
        and that call closes its env when it ends (:meth:`close_late`)."""
        with self.lock:
            session.abandoned = True
            self._forget(session.id, why)
        log.warning("env session %s (%s): %s; the session is closed", session.id, session.env_id, why)

    # -- closing ----------------------------------------------------------------------------
    def forget(self, session_id: str, why: str) -> Session | None:
        """Remove a session from the table (the caller closes its env)."""
        with self.lock:
            return self._forget(session_id, why)

    def _forget(self, session_id: str, why: str) -> Session | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._gone[session_id] = why
            while len(self._gone) > REMEMBERED_GONE:
                self._gone.popitem(last=False)
        return session

    def close_env(self, session: Session, wait_s: float | None = None) -> None:
        """Close a forgotten session's env once no call runs on it (waiting at most ``wait_s``
        seconds; None: until the call in flight ends or is abandoned, which the call timeout
        bounds). ``env.close()`` itself runs under ``close_timeout_s``."""
        if not session.lock.acquire(timeout=-1 if wait_s is None else wait_s):
            log.warning("env session %s (%s) was busy; its env was left open", session.id, session.env_id)
            return
        try:
            with self.lock:
                if session.abandoned:
                    return  # the abandoned call closes it when it ends
            call_with_timeout(session.env.close, self.close_timeout_s, name=f"opentinker-env-close-{session.id}")
        except CallTimeout:
            log.warning("closing env %s of session %s took too long; left to finish alone", session.env_id, session.id)
        except Exception:
            log.exception("closing env %s of session %s failed", session.env_id, session.id)
        finally:
            session.lock.release()

    @staticmethod
    def close_late(session: Session) -> None:
        """Close the env of a session whose abandoned call has just ended (in that call's thread)."""
        try:
            session.env.close()
        except Exception:
            log.exception("closing env %s of abandoned session %s failed", session.env_id, session.id)

    def reap_idle(self, now: float | None = None) -> int:
        """Close the sessions idle for longer than the idle timeout; return how many."""
        if self.idle_timeout_s is None:
            return 0
        now = time.monotonic() if now is None else now
        reaped: list[Session] = []
        with self.lock:
            for sid, session in list(self._sessions.items()):
                if session.in_flight == 0 and now - session.last_used > self.idle_timeout_s:
                    why = f"it was closed after more than {self.idle_timeout_s:g} s without a call"
                    reaped.append(self._forget(sid, why))  # type: ignore[arg-type]
        for session in reaped:
            log.info("reaped idle env session %s (%s)", session.id, session.env_id)
            self.close_env(session)
        return len(reaped)

    def close_all(self, wait_s: float | None = None) -> None:
        """Close every session (waiting at most ``wait_s`` seconds for each busy one)."""
        with self.lock:
            sessions = [self._forget(sid, "the server stopped") for sid in list(self._sessions)]
        for session in sessions:
            if session is not None:
                self.close_env(session, wait_s)

    def stop(self, wait_s: float = 1.0) -> None:
        """Give up on every waiting call (``UNAVAILABLE``) and close every session's env,
        waiting at most ``wait_s`` seconds for each busy one."""
        self.stopping.set()
        self.close_all(wait_s)
