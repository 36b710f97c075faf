"""Environments served over gRPC: :func:`serve_env` and the clients :class:`RemoteEnv`,
:class:`RemoteMultiAgentEnv`.

A server runs registered environments (anything :func:`tinker_core.make_env` builds) for many
clients at once. Each client session owns one env instance, isolated from every other; a
session is closed by its client, or by the server once it has been idle for ``idle_timeout_s``;
the server holds at most ``max_sessions`` at a time. The standard gRPC health service reports
``SERVING`` for ``""`` and ``"opentinker.v1.EnvService"``::

    server = serve_env("echo/echo-v0", port=50051)   # returns at once; serves in threads
    server.wait_for_termination()                    # a CLI blocks here (Ctrl-C: server.stop())

    with RemoteEnv("127.0.0.1:50051", "echo/echo-v0") as env:   # elsewhere
        obs, info = env.reset(seed=0)                # exactly what the local env returns
        obs, reward, terminated, truncated, info = env.step("apple")

What changes over the wire: ``info`` dicts and reset options travel as JSON (tuples come back as
lists, numpy scalars as Python numbers), rewards come back as ``float``, and ``Step`` before the
first ``Reset`` of a session fails (``FAILED_PRECONDITION``) as gymnasium's order checks do.

This module imports grpc; ``import tinker_core`` does not import it.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tinker_core.env import EnvSpec, MultiAgentTextEnv, Observation, TextEnv
from tinker_core.errors import OpenTinkerError, UnknownNameError, did_you_mean
from tinker_core.proto import env_pb2 as pb
from tinker_core.proto import env_pb2_grpc as pb_grpc

__all__ = [
    "SERVICE_NAME",
    "EnvServer",
    "RemoteEnv",
    "RemoteEnvError",
    "RemoteMultiAgentEnv",
    "serve_env",
]

log = logging.getLogger(__name__)

SERVICE_NAME = "opentinker.v1.EnvService"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_GRPC_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]
_REMEMBERED_GONE = 4096  # how many closed/reaped session ids the server remembers for errors

_Response = TypeVar("_Response")


# ---- wire conversions ---------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    """Make numpy values (and sets) JSON-serialisable; anything else is an error."""
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy scalar or array
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_json_default)


def _loads_object(text: str, field_name: str) -> dict[str, Any] | None:
    """Parse a ``*_json`` field that holds a JSON object ("" means None)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise _RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, f"{field_name} is not valid JSON: {e}") from e
    if not isinstance(value, dict):
        raise _RpcAbort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{field_name} must be a JSON object, got a JSON {type(value).__name__}",
        )
    return value


def observation_to_proto(observation: Observation) -> pb.Observation:
    """Encode a text or chat observation; TypeError for anything else."""
    if isinstance(observation, str):
        return pb.Observation(text=observation)
    if isinstance(observation, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in observation
    ):
        messages = [pb.ChatMessage(role=m["role"], content=m["content"]) for m in observation]
        return pb.Observation(chat=pb.ChatMessages(messages=messages))
    raise TypeError(
        f"an observation is a str or a list of {{'role': str, 'content': str}} messages, "
        f"got {type(observation).__name__}"
    )


def observation_from_proto(message: pb.Observation) -> Observation:
    if message.WhichOneof("value") == "chat":
        return [{"role": m.role, "content": m.content} for m in message.chat.messages]
    return message.text


# ---- server -------------------------------------------------------------------------------


class _RpcAbort(Exception):
    """Raised inside a handler: end the RPC with this status code and message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(eq=False)
class _Session:
    """One client's env instance. ``lock`` serialises the calls on it."""

    id: str
    env_id: str
    env: Any
    multi_agent: bool
    last_used: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0  # calls using the session now (guarded by the server's lock)
    reset_done: bool = False
    last_request_id: str = ""
    last_response: Any = None


def _rpc(method: Callable[..., _Response]) -> Callable[..., _Response]:
    """Turn :class:`_RpcAbort` (and unexpected errors) into gRPC status codes."""

    @functools.wraps(method)
    def handler(self: _EnvServicer, request: Any, context: grpc.ServicerContext) -> _Response:
        try:
            return method(self, request, context)
        except _RpcAbort as e:
            context.abort(e.code, e.message)
        except Exception as e:  # a bug in the server or an env: say so, keep serving
            log.exception("EnvService.%s failed", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"{method.__name__} failed: {type(e).__name__}: {e}")
        raise AssertionError("unreachable: context.abort raises")  # pragma: no cover

    return handler


class _EnvServicer(pb_grpc.EnvServiceServicer):
    """The EnvService implementation: a table of sessions, each with its own env."""

    def __init__(
        self,
        env_ids: tuple[str, ...] | None,
        max_sessions: int,
        idle_timeout_s: float | None,
        make_env: Callable[..., Any],
    ) -> None:
        self.env_ids = env_ids
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self._make_env = make_env
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._creating = 0  # sessions being built (they count against the cap)
        self._gone: collections.OrderedDict[str, str] = collections.OrderedDict()

    # -- session table ----------------------------------------------------------------------
    def session_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._sessions)

    def _forget(self, session_id: str, why: str) -> _Session | None:
        """Remove a session from the table (the caller closes its env); lock held."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._gone[session_id] = why
            while len(self._gone) > _REMEMBERED_GONE:
                self._gone.popitem(last=False)
        return session

    @staticmethod
    def _close_env(session: _Session) -> None:
        with session.lock:  # waits for a call in flight on it to finish
            try:
                session.env.close()
            except Exception:
                log.exception("closing env %s of session %s failed", session.env_id, session.id)

    def reap_idle(self, now: float | None = None) -> int:
        """Close the sessions idle for longer than the idle timeout; return how many."""
        if self.idle_timeout_s is None:
            return 0
        now = time.monotonic() if now is None else now
        reaped: list[_Session] = []
        with self._lock:
            for sid, session in list(self._sessions.items()):
                if session.in_flight == 0 and now - session.last_used > self.idle_timeout_s:
                    why = f"it was closed after more than {self.idle_timeout_s:g} s without a call"
                    reaped.append(self._forget(sid, why))  # type: ignore[arg-type]
        for session in reaped:
            log.info("reaped idle env session %s (%s)", session.id, session.env_id)
            self._close_env(session)
        return len(reaped)

    def close_all(self) -> None:
        with self._lock:
            sessions = [self._forget(sid, "the server stopped") for sid in list(self._sessions)]
        for session in sessions:
            if session is not None:
                self._close_env(session)

    @contextmanager
    def _use(self, session_id: str) -> Iterator[_Session]:
        """Hold a session for one call: NOT_FOUND when unknown, serialised per session."""
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                why = self._gone.get(session_id)
                if why is not None:
                    msg = f"env session {session_id!r} no longer exists: {why}; create a new session"
                elif not session_id:
                    msg = "session_id is empty; call CreateSession first and pass its session_id"
                else:
                    msg = f"unknown env session {session_id!r}; call CreateSession first"
                raise _RpcAbort(grpc.StatusCode.NOT_FOUND, msg)
            session.in_flight += 1
            session.last_used = time.monotonic()
        try:
            with session.lock:
                yield session
        finally:
            with self._lock:
                session.in_flight -= 1
                session.last_used = time.monotonic()

    # -- helpers ----------------------------------------------------------------------------
    @staticmethod
    def _env_call(session: _Session, what: str, fn: Callable[[], _Response]) -> _Response:
        """Run env code; its ValueError/TypeError become INVALID_ARGUMENT, others INTERNAL."""
        try:
            return fn()
        except (ValueError, TypeError) as e:
            code = grpc.StatusCode.INVALID_ARGUMENT
            raise _RpcAbort(code, f"env {session.env_id!r} {what} raised {type(e).__name__}: {e}") from e
        except Exception as e:
            code = grpc.StatusCode.INTERNAL
            raise _RpcAbort(code, f"env {session.env_id!r} {what} raised {type(e).__name__}: {e}") from e

    @staticmethod
    def _info_json(session: _Session, info: Any, what: str) -> str:
        try:
            return _dumps(info if info is not None else {})
        except (TypeError, ValueError) as e:
            raise _RpcAbort(
                grpc.StatusCode.INTERNAL,
                f"env {session.env_id!r} returned a {what} that is not JSON-serialisable ({e}); "
                "the env must use JSON types (str, numbers, bools, None, lists, dicts) in it",
            ) from e

    @staticmethod
    def _observation(session: _Session, observation: Any) -> pb.Observation:
        try:
            return observation_to_proto(observation)
        except TypeError as e:
            raise _RpcAbort(grpc.StatusCode.INTERNAL, f"env {session.env_id!r}: {e}") from e

    def _agent_state(self, session: _Session) -> pb.AgentCycleState:
        env: MultiAgentTextEnv = session.env
        state = pb.AgentCycleState(
            agent_selection=env.agent_selection or "",
            agents=list(env.agents),
            done=bool(env.done),
        )
        for role in env.possible_agents:
            role_state = state.roles[role]
            role_state.reward = float(env.rewards.get(role, 0.0))
            role_state.cumulative_reward = float(env._cumulative_rewards.get(role, 0.0))
            role_state.terminated = bool(env.terminations.get(role, False))
            role_state.truncated = bool(env.truncations.get(role, False))
            role_state.info_json = self._info_json(session, env.infos.get(role, {}), f"info of role {role!r}")
        return state

    @staticmethod
    def _require(session: _Session, *, multi_agent: bool | None, reset: bool, rpc: str) -> None:
        if multi_agent is not None and session.multi_agent != multi_agent:
            kind = "a multi-agent" if session.multi_agent else "a single-agent"
            hint = "Observe/Last/AgentSelection" if multi_agent else "the observation fields"
            raise _RpcAbort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{rpc}: session {session.id!r} runs {kind} env ({session.env_id!r}); "
                f"{hint} are only for {'multi' if multi_agent else 'single'}-agent envs",
            )
        if reset and not session.reset_done:
            raise _RpcAbort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{rpc}: session {session.id!r} has no episode yet; call Reset first",
            )

    @staticmethod
    def _replay(session: _Session, request_id: str, response_type: type) -> Any:
        if request_id and request_id == session.last_request_id:
            if not isinstance(session.last_response, response_type):
                raise _RpcAbort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"request_id {request_id!r} was already used for another call; use a new one",
                )
            return session.last_response
        return None

    @staticmethod
    def _remember(session: _Session, request_id: str, response: _Response) -> _Response:
        session.last_request_id, session.last_response = request_id, response
        return response

    # -- RPCs -------------------------------------------------------------------------------
    @_rpc
    def CreateSession(self, request: pb.CreateEnvSessionRequest, context: grpc.ServicerContext) -> pb.CreateEnvSessionResponse:
        env_id = request.env_id
        if not env_id:
            raise _RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, "env_id is empty; pass a registered env id such as 'echo/echo-v0'")
        if self.env_ids is not None and env_id not in self.env_ids:
            close = did_you_mean(env_id, self.env_ids)
            msg = f"env {env_id!r} is not served here (this server serves {', '.join(self.env_ids)})"
            raise _RpcAbort(grpc.StatusCode.NOT_FOUND, msg + (f"; did you mean {close!r}?" if close else ""))
        kwargs = _loads_object(request.kwargs_json, "kwargs_json") or {}
        self._reserve_slot()
        try:
            env = self._build_env(env_id, kwargs)
            session = _Session(
                id=uuid.uuid4().hex,
                env_id=env_id,
                env=env,
                multi_agent=isinstance(env, MultiAgentTextEnv),
                last_used=time.monotonic(),
            )
            spec: EnvSpec | None = getattr(env, "env_spec", None)
            if not isinstance(spec, EnvSpec):
                self._close_env(session)
                raise _RpcAbort(grpc.StatusCode.INTERNAL, f"env {env_id!r} has no EnvSpec (env_spec attribute)")
            with self._lock:
                self._sessions[session.id] = session
        finally:
            with self._lock:
                self._creating -= 1
        log.debug("created env session %s (%s)", session.id, env_id)
        return pb.CreateEnvSessionResponse(
            session_id=session.id,
            env_spec_json=spec.to_json(),
            multi_agent=session.multi_agent,
            possible_agents=list(env.possible_agents) if session.multi_agent else [],
            idle_timeout_s=self.idle_timeout_s or 0.0,
        )

    def _reserve_slot(self) -> None:
        """Count a session being created against the cap; RESOURCE_EXHAUSTED when full."""
        for attempt in range(2):
            with self._lock:
                if len(self._sessions) + self._creating < self.max_sessions:
                    self._creating += 1
                    return
            if attempt == 0:
                self.reap_idle()  # make room from idle sessions before refusing
        raise _RpcAbort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"the env server holds its maximum of {self.max_sessions} sessions "
            f"(max_sessions={self.max_sessions}); close sessions you no longer need "
            "(RemoteEnv.close()) or start the server with a larger max_sessions",
        )

    def _build_env(self, env_id: str, kwargs: dict[str, Any]) -> Any:
        try:
            return self._make_env(env_id, **kwargs)
        except UnknownNameError as e:
            raise _RpcAbort(grpc.StatusCode.NOT_FOUND, str(e)) from e
        except (TypeError, ValueError) as e:
            raise _RpcAbort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"env {env_id!r} rejected kwargs {kwargs!r}: {type(e).__name__}: {e}",
            ) from e
        except Exception as e:
            raise _RpcAbort(
                grpc.StatusCode.INTERNAL,
                f"building env {env_id!r} with kwargs {kwargs!r} failed: {type(e).__name__}: {e}",
            ) from e

    @_rpc
    def Reset(self, request: pb.ResetRequest, context: grpc.ServicerContext) -> pb.ResetResponse:
        with self._use(request.session_id) as s:
            replay: pb.ResetResponse | None = self._replay(s, request.request_id, pb.ResetResponse)
            if replay is not None:
                return replay
            seed = request.seed if request.HasField("seed") else None
            options = _loads_object(request.options_json, "options_json")
            if s.multi_agent:
                self._env_call(s, "reset()", lambda: s.env.reset(seed=seed, options=options))
                s.reset_done = True
                response = pb.ResetResponse(agent_state=self._agent_state(s))
            else:
                observation, info = self._env_call(s, "reset()", lambda: s.env.reset(seed=seed, options=options))
                s.reset_done = True
                response = pb.ResetResponse(
                    observation=self._observation(s, observation),
                    info_json=self._info_json(s, info, "reset info"),
                )
            return self._remember(s, request.request_id, response)

    @_rpc
    def Step(self, request: pb.StepRequest, context: grpc.ServicerContext) -> pb.StepResponse:
        with self._use(request.session_id) as s:
            replay_step: pb.StepResponse | None = self._replay(s, request.request_id, pb.StepResponse)
            if replay_step is not None:
                return replay_step
            self._require(s, multi_agent=None, reset=True, rpc="Step")
            if s.multi_agent:
                self._env_call(s, "step()", lambda: s.env.step(request.action))
                response = pb.StepResponse(agent_state=self._agent_state(s))
            else:
                observation, reward, terminated, truncated, info = self._env_call(
                    s, "step()", lambda: s.env.step(request.action)
                )
                response = pb.StepResponse(
                    observation=self._observation(s, observation),
                    reward=float(reward),
                    terminated=bool(terminated),
                    truncated=bool(truncated),
                    info_json=self._info_json(s, info, "step info"),
                )
            return self._remember(s, request.request_id, response)

    @_rpc
    def Observe(self, request: pb.ObserveRequest, context: grpc.ServicerContext) -> pb.ObserveResponse:
        with self._use(request.session_id) as s:
            self._require(s, multi_agent=True, reset=True, rpc="Observe")
            if request.role not in s.env.possible_agents:
                raise _RpcAbort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Observe: env {s.env_id!r} has no role {request.role!r}; roles are "
                    f"{', '.join(s.env.possible_agents)}",
                )
            observation = self._env_call(s, "observe()", lambda: s.env.observe(request.role))
            return pb.ObserveResponse(observation=self._observation(s, observation))

    @_rpc
    def Last(self, request: pb.LastRequest, context: grpc.ServicerContext) -> pb.LastResponse:
        with self._use(request.session_id) as s:
            self._require(s, multi_agent=True, reset=True, rpc="Last")
            observation, cumulative, terminated, truncated, info = self._env_call(s, "last()", s.env.last)
            return pb.LastResponse(
                role=s.env.agent_selection or "",
                observation=self._observation(s, observation),
                cumulative_reward=float(cumulative),
                terminated=bool(terminated),
                truncated=bool(truncated),
                info_json=self._info_json(s, info, "info"),
            )

    @_rpc
    def AgentSelection(self, request: pb.AgentSelectionRequest, context: grpc.ServicerContext) -> pb.AgentCycleState:
        with self._use(request.session_id) as s:
            self._require(s, multi_agent=True, reset=True, rpc="AgentSelection")
            return self._agent_state(s)

    @_rpc
    def CloseSession(self, request: pb.CloseEnvSessionRequest, context: grpc.ServicerContext) -> pb.CloseEnvSessionResponse:
        with self._lock:
            session = self._forget(request.session_id, "it was closed by its client")
        if session is None:
            return pb.CloseEnvSessionResponse(closed=False)
        self._close_env(session)
        log.debug("closed env session %s (%s)", session.id, session.env_id)
        return pb.CloseEnvSessionResponse(closed=True)


class EnvServer:
    """A running env server (returned by :func:`serve_env`); serves until :meth:`stop`.

    Attributes:
        host: the interface it listens on.
        port: the port it listens on (the real one when it was started with port 0).
        address: ``host:port``, what clients connect to.
        env_ids: the env ids it serves, or None for every registered env.
    """

    def __init__(
        self,
        server: grpc.Server,
        servicer: _EnvServicer,
        health_servicer: health.HealthServicer,
        host: str,
        port: int,
    ) -> None:
        self._server = server
        self._servicer = servicer
        self._health = health_servicer
        self.host = host
        self.port = port
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.env_ids = servicer.env_ids
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._reaper: threading.Thread | None = None
        if servicer.idle_timeout_s is not None:
            self._reaper = threading.Thread(target=self._reap_loop, name="opentinker-env-reaper", daemon=True)
            self._reaper.start()

    def _reap_loop(self) -> None:
        timeout = self._servicer.idle_timeout_s
        assert timeout is not None
        interval = min(max(timeout / 4, 0.01), 5.0)
        while not self._stopped.wait(interval):
            try:
                self._servicer.reap_idle()
            except Exception:  # pragma: no cover - keep reaping whatever happens
                log.exception("reaping idle env sessions failed")

    @property
    def max_sessions(self) -> int:
        return self._servicer.max_sessions

    @property
    def idle_timeout_s(self) -> float | None:
        return self._servicer.idle_timeout_s

    @property
    def num_sessions(self) -> int:
        """How many sessions are open now."""
        return len(self._servicer.session_ids())

    def session_ids(self) -> list[str]:
        return self._servicer.session_ids()

    def reap_idle(self, now: float | None = None) -> int:
        """Close sessions idle for longer than ``idle_timeout_s`` as of ``now``
        (``time.monotonic()`` by default); return how many. A background thread calls this."""
        return self._servicer.reap_idle(now)

    def stop(self, grace: float | None = 1.0) -> None:
        """Stop serving (calls in flight get ``grace`` seconds) and close every session's env.

        Idempotent; safe to call from another thread or a signal handler's caller.
        """
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self._stopped.set()
            self._health.enter_graceful_shutdown()
            self._server.stop(grace).wait()
            self._servicer.close_all()
            if self._reaper is not None and self._reaper is not threading.current_thread():
                self._reaper.join()
            log.info("env server on %s stopped", self.address)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        """Block until the server stops (or ``timeout`` seconds pass); True once it stopped.

        A CLI serves with ``server.wait_for_termination()`` and calls ``server.stop()`` on
        KeyboardInterrupt.
        """
        timed_out = self._server.wait_for_termination(timeout)
        return not timed_out

    def __enter__(self) -> EnvServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        served = "every registered env" if self.env_ids is None else ", ".join(self.env_ids)
        state = "stopped" if self.stopped else "serving"
        return f"<EnvServer {self.address} {state} {served}>"


def serve_env(
    env_id: str | Sequence[str] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    max_sessions: int = 64,
    idle_timeout_s: float | None = 300.0,
    max_workers: int = 8,
) -> EnvServer:
    """Serve registered environments over gRPC (``EnvService`` plus gRPC health); return at once.

    Args:
        env_id: the env id to serve, several ids, or None for every registered env. Unknown ids
            raise :class:`~tinker_core.errors.UnknownNameError` (with a did-you-mean) here,
            before anything listens.
        host: the interface to listen on; the default serves this machine only.
        port: the port; 0 picks a free one (read it from the returned ``.port``).
        max_sessions: the most sessions open at once; one more is refused with
            ``RESOURCE_EXHAUSTED`` (after closing idle ones).
        idle_timeout_s: a session with no call for this long is closed; None never closes one.
        max_workers: threads serving calls; calls on different sessions run concurrently,
            calls on one session run one at a time.

    Returns:
        An :class:`EnvServer`: ``.port``, ``.address``, ``.stop()``, ``.wait_for_termination()``;
        also a context manager that stops it.
    """
    from tinker_core.registry import env_spec, make_env

    if max_sessions < 1:
        raise ValueError(f"serve_env: max_sessions must be >= 1, got {max_sessions}")
    if max_workers < 1:
        raise ValueError(f"serve_env: max_workers must be >= 1, got {max_workers}")
    if idle_timeout_s is not None and not (idle_timeout_s > 0 and math.isfinite(idle_timeout_s)):
        raise ValueError(
            f"serve_env: idle_timeout_s must be a positive number of seconds (or None to keep "
            f"idle sessions forever), got {idle_timeout_s}"
        )
    env_ids: tuple[str, ...] | None
    if env_id is None:
        env_ids = None
    else:
        env_ids = (env_id,) if isinstance(env_id, str) else tuple(env_id)
        if not env_ids:
            raise ValueError("serve_env: env_id is an empty list; pass an env id, or None for every registered env")
        for one in env_ids:
            env_spec(one)  # UnknownNameError with a did-you-mean

    servicer = _EnvServicer(env_ids, max_sessions, idle_timeout_s, make_env)
    health_servicer = health.HealthServicer()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="opentinker-env"),
        options=[*_GRPC_OPTIONS, ("grpc.so_reuseport", 0)],
    )
    pb_grpc.add_EnvServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(bind)
    except RuntimeError as e:
        raise OSError(f"serve_env: could not listen on {bind}: {e}; pick another port or host") from e
    if bound == 0:
        raise OSError(f"serve_env: could not listen on {bind}; pick another port or host")
    server.start()
    for service in ("", SERVICE_NAME):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    handle = EnvServer(server, servicer, health_servicer, host, bound)
    log.info("serving %r on %s", "every registered env" if env_ids is None else env_ids, handle.address)
    return handle


# ---- clients ------------------------------------------------------------------------------


class RemoteEnvError(OpenTinkerError):
    """A call to an env server failed; ``code`` is the gRPC status code.

    ``INVALID_ARGUMENT`` raises :class:`RemoteEnvInvalidArgument` (also a ValueError) and
    ``NOT_FOUND`` raises :class:`RemoteEnvNotFound` (also a LookupError).
    """

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        super().__init__(message)
        self.code = code


class RemoteEnvInvalidArgument(RemoteEnvError, ValueError):
    """The server rejected an argument (env kwargs, an action the env refused, a role...)."""


class RemoteEnvNotFound(RemoteEnvError, LookupError):
    """An unknown env id, or a session that was closed or reaped."""


def _remote_error(error: grpc.RpcError, where: str) -> RemoteEnvError:
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    message = f"{where}: {code.name}: {details}"
    if code == grpc.StatusCode.UNAVAILABLE:
        message += " (is the env server running at that address?)"
    cls = {
        grpc.StatusCode.INVALID_ARGUMENT: RemoteEnvInvalidArgument,
        grpc.StatusCode.NOT_FOUND: RemoteEnvNotFound,
    }.get(code, RemoteEnvError)
    return cls(message, code)


class _SessionClient:
    """The connection and session under a remote env."""

    def __init__(
        self, target: str | grpc.Channel, env_id: str, kwargs: dict[str, Any], timeout_s: float | None
    ) -> None:
        try:
            kwargs_json = json.dumps(kwargs) if kwargs else ""
        except TypeError as e:
            raise TypeError(f"remote env {env_id!r}: kwargs travel as JSON and must be JSON-serialisable: {e}") from e
        if isinstance(target, str):
            self.address = target
            self._channel = grpc.insecure_channel(target, options=_GRPC_OPTIONS)
            self._owns_channel = True
        else:
            self.address = "<channel>"
            self._channel = target
            self._owns_channel = False
        self.env_id = env_id
        self._stub = pb_grpc.EnvServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self.session_id = ""
        self._closed = False
        try:
            created: pb.CreateEnvSessionResponse = self.call(
                "CreateSession", pb.CreateEnvSessionRequest(env_id=env_id, kwargs_json=kwargs_json), timeout_s
            )
        except BaseException:
            self._close_channel()
            raise
        self.session_id = created.session_id
        self.spec = EnvSpec.from_json(created.env_spec_json)
        self.multi_agent = created.multi_agent
        self.possible_agents = list(created.possible_agents)
        self.idle_timeout_s = created.idle_timeout_s or None

    def call(self, rpc: str, request: Any, timeout_s: float | None = None) -> Any:
        if self._closed:
            raise RemoteEnvError(
                f"remote env {self.env_id!r} ({self.address}): {rpc} after close(); create a new env",
                grpc.StatusCode.FAILED_PRECONDITION,
            )
        try:
            return getattr(self._stub, rpc)(request, timeout=timeout_s)
        except grpc.RpcError as e:
            raise _remote_error(e, f"remote env {self.env_id!r} at {self.address}, {rpc}") from None

    def new_request_id(self) -> str:
        return uuid.uuid4().hex

    def _close_channel(self) -> None:
        if self._owns_channel:
            self._channel.close()

    def close(self) -> None:
        """End the session on the server (best effort) and close the channel; idempotent."""
        if self._closed:
            return
        try:
            if self.session_id:
                self._stub.CloseSession(pb.CloseEnvSessionRequest(session_id=self.session_id), timeout=10.0)
        except grpc.RpcError as e:  # the server is gone: nothing to end
            log.debug("closing remote env session %s: %s", self.session_id, e)
        finally:
            self._closed = True
            self._close_channel()

    @property
    def closed(self) -> bool:
        return self._closed


def _info(text: str) -> dict[str, Any]:
    return json.loads(text) if text else {}


class RemoteEnv(TextEnv):
    """A :class:`~tinker_core.env.TextEnv` whose env runs on an env server.

    ``RemoteEnv(address, env_id, **kwargs)`` opens a session of ``env_id`` built with
    ``kwargs`` (which travel as JSON) on the server at ``address`` (``"host:port"`` or a
    ``grpc.Channel``, e.g. one with TLS). It then behaves like ``make_env(env_id, **kwargs)``:
    the same seed gives the same observations, rewards and infos. :meth:`close` ends the
    session; it is also a context manager. ``call_timeout_s`` bounds each call (None: no bound).
    """

    call_timeout_s: float | None = 300.0

    def __init__(self, address: str | grpc.Channel, env_id: str, /, **kwargs: Any) -> None:
        self._client = _SessionClient(address, env_id, kwargs, self.call_timeout_s)
        if self._client.multi_agent:
            self._client.close()
            raise TypeError(
                f"{env_id!r} is a multi-agent env (roles {', '.join(self._client.possible_agents)}); "
                "use RemoteMultiAgentEnv for it"
            )
        self.env_spec = self._client.spec

    @property
    def session_id(self) -> str:
        return self._client.session_id

    @property
    def address(self) -> str:
        return self._client.address

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        request = pb.ResetRequest(
            session_id=self.session_id,
            options_json=_dumps(options) if options is not None else "",
            request_id=self._client.new_request_id(),
        )
        if seed is not None:
            request.seed = seed
        response: pb.ResetResponse = self._client.call("Reset", request, self.call_timeout_s)
        return observation_from_proto(response.observation), _info(response.info_json)

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):
            raise TypeError(f"RemoteEnv.step: action must be a str, got {type(action).__name__}")
        request = pb.StepRequest(session_id=self.session_id, action=action, request_id=self._client.new_request_id())
        response: pb.StepResponse = self._client.call("Step", request, self.call_timeout_s)
        return (
            observation_from_proto(response.observation),
            response.reward,
            response.terminated,
            response.truncated,
            _info(response.info_json),
        )

    def close(self) -> None:
        """End the server-side session and close the connection; idempotent."""
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()

    def __repr__(self) -> str:
        return f"<RemoteEnv {self._client.env_id} at {self.address} session={self.session_id}>"


class RemoteMultiAgentEnv(MultiAgentTextEnv):
    """A :class:`~tinker_core.env.MultiAgentTextEnv` whose env runs on an env server.

    Arguments as for :class:`RemoteEnv`. ``agent_selection``, ``agents``, ``rewards``,
    ``terminations``, ``truncations``, ``infos`` and the cumulative rewards mirror the server's
    env after every :meth:`reset` and :meth:`step` (no extra round trip); :meth:`observe` and
    :meth:`last` ask the server.
    """

    call_timeout_s: float | None = 300.0

    def __init__(self, address: str | grpc.Channel, env_id: str, /, **kwargs: Any) -> None:
        self._client = _SessionClient(address, env_id, kwargs, self.call_timeout_s)
        if not self._client.multi_agent:
            self._client.close()
            raise TypeError(f"{env_id!r} is a single-agent env; use RemoteEnv for it")
        self.env_spec = self._client.spec
        self.possible_agents = list(self._client.possible_agents)

    @property
    def session_id(self) -> str:
        return self._client.session_id

    @property
    def address(self) -> str:
        return self._client.address

    def _call(self, rpc: str, request: Any) -> Any:
        return self._client.call(rpc, request, self.call_timeout_s)

    def _apply(self, state: pb.AgentCycleState) -> None:
        self.agent_selection = state.agent_selection
        self.agents = list(state.agents)
        roles = state.roles
        self.rewards = {a: roles[a].reward for a in self.possible_agents}
        self._cumulative_rewards = {a: roles[a].cumulative_reward for a in self.possible_agents}
        self.terminations = {a: roles[a].terminated for a in self.possible_agents}
        self.truncations = {a: roles[a].truncated for a in self.possible_agents}
        self.infos = {a: _info(roles[a].info_json) for a in self.possible_agents}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        super().reset(seed=seed, options=options)
        request = pb.ResetRequest(
            session_id=self.session_id,
            options_json=_dumps(options) if options is not None else "",
            request_id=self._client.new_request_id(),
        )
        if seed is not None:
            request.seed = seed
        self._apply(self._call("Reset", request).agent_state)

    def observe(self, agent: str) -> Observation:
        response: pb.ObserveResponse = self._call("Observe", pb.ObserveRequest(session_id=self.session_id, role=agent))
        return observation_from_proto(response.observation)

    def step(self, action: str) -> None:
        if not isinstance(action, str):
            raise TypeError(f"RemoteMultiAgentEnv.step: action must be a str, got {type(action).__name__}")
        request = pb.StepRequest(session_id=self.session_id, action=action, request_id=self._client.new_request_id())
        self._apply(self._call("Step", request).agent_state)

    def last(self) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        r: pb.LastResponse = self._call("Last", pb.LastRequest(session_id=self.session_id))
        return observation_from_proto(r.observation), r.cumulative_reward, r.terminated, r.truncated, _info(r.info_json)

    def refresh(self) -> None:
        """Re-read the episode state from the server (``AgentSelection``)."""
        self._apply(self._call("AgentSelection", pb.AgentSelectionRequest(session_id=self.session_id)))

    def close(self) -> None:
        """End the server-side session and close the connection; idempotent."""
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()

    def __enter__(self) -> RemoteMultiAgentEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<RemoteMultiAgentEnv {self._client.env_id} at {self.address} session={self.session_id}>"
