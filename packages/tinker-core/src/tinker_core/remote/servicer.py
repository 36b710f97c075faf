"""The ``EnvService`` implementation: a table of sessions, each owning one env instance.

Calls on one session run one at a time (its lock); calls on different sessions run
concurrently. A request carrying the ``request_id`` of the session's last call gets that call's
response again (a client retry does not step the env twice). Errors become gRPC status codes:
what the caller got wrong is ``INVALID_ARGUMENT``/``NOT_FOUND``/``FAILED_PRECONDITION``, a bug
in the env or the server ``INTERNAL``.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from tinker_core.env import EnvSpec, MultiAgentTextEnv
from tinker_core.errors import UnknownNameError, did_you_mean
from tinker_core.proto import env_pb2 as pb
from tinker_core.proto import env_pb2_grpc as pb_grpc
from tinker_core.remote.codec import json_object, observation_to_proto, to_json

log = logging.getLogger(__name__)

REMEMBERED_GONE = 4096
"""How many closed or reaped session ids the servicer remembers, to say why one is gone."""

_Response = TypeVar("_Response")


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
    def handler(self: EnvServicer, request: Any, context: grpc.ServicerContext) -> _Response:
        try:
            return method(self, request, context)
        except _RpcAbort as e:
            context.abort(e.code, e.message)
        except Exception as e:  # a bug in the server or an env: say so, keep serving
            log.exception("EnvService.%s failed", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"{method.__name__} failed: {type(e).__name__}: {e}")
        raise AssertionError("unreachable: context.abort raises")  # pragma: no cover

    return handler


def _json_arg(text: str, field_name: str) -> dict[str, Any] | None:
    """A ``*_json`` request field as a dict (None when empty); bad JSON is INVALID_ARGUMENT."""
    try:
        return json_object(text, field_name)
    except ValueError as e:
        raise _RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from e


class EnvServicer(pb_grpc.EnvServiceServicer):
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
            while len(self._gone) > REMEMBERED_GONE:
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
            return to_json(info if info is not None else {})
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

    def _once(
        self, request: Any, response_type: type[_Response], call: Callable[[_Session], _Response]
    ) -> _Response:
        """Run ``call`` on the request's session, once per ``request_id``.

        A request that repeats the session's last ``request_id`` gets the remembered response
        (a retry does not step the env twice); an empty ``request_id`` always runs.
        """
        request_id: str = request.request_id
        with self._use(request.session_id) as session:
            if request_id and request_id == session.last_request_id:
                if not isinstance(session.last_response, response_type):
                    raise _RpcAbort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"request_id {request_id!r} was already used for another call; use a new one",
                    )
                return session.last_response
            response = call(session)
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
        kwargs = _json_arg(request.kwargs_json, "kwargs_json") or {}
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
        seed = request.seed if request.HasField("seed") else None

        def reset(s: _Session) -> pb.ResetResponse:
            options = _json_arg(request.options_json, "options_json")
            result = self._env_call(s, "reset()", lambda: s.env.reset(seed=seed, options=options))
            s.reset_done = True
            if s.multi_agent:
                return pb.ResetResponse(agent_state=self._agent_state(s))
            observation, info = result
            return pb.ResetResponse(
                observation=self._observation(s, observation),
                info_json=self._info_json(s, info, "reset info"),
            )

        return self._once(request, pb.ResetResponse, reset)

    @_rpc
    def Step(self, request: pb.StepRequest, context: grpc.ServicerContext) -> pb.StepResponse:
        def step(s: _Session) -> pb.StepResponse:
            self._require(s, multi_agent=None, reset=True, rpc="Step")
            result = self._env_call(s, "step()", lambda: s.env.step(request.action))
            if s.multi_agent:
                return pb.StepResponse(agent_state=self._agent_state(s))
            observation, reward, terminated, truncated, info = result
            return pb.StepResponse(
                observation=self._observation(s, observation),
                reward=float(reward),
                terminated=bool(terminated),
                truncated=bool(truncated),
                info_json=self._info_json(s, info, "step info"),
            )

        return self._once(request, pb.StepResponse, step)

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

