"""The ``EnvService`` implementation: a table of sessions, each owning one env instance.

Calls on one session run one at a time (its lock); calls on different sessions run
concurrently. Sizes are checked before any work and env code runs in abandonable daemon threads
under the server's call timeout and the client's deadline (:mod:`tinker_core.remote.guard`); a
session whose call was abandoned is closed. A request repeating the ``request_id`` of the
session's last call with the same method and arguments gets that call's response again (a
client retry does not step the env twice; one that arrives while the first attempt runs waits for
it); the same id with other arguments is ``INVALID_ARGUMENT``. Errors become gRPC status codes:
what the caller got wrong is ``INVALID_ARGUMENT``/``NOT_FOUND``/``FAILED_PRECONDITION``, a bug
in the env or the server ``INTERNAL``.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from tinker_core.contracts import TURN_ENDS, Action, Observation
from tinker_core.env import EnvSpec, MultiAgentTextEnv
from tinker_core.errors import UnknownNameError, did_you_mean
from tinker_core.proto import env_pb2 as pb
from tinker_core.proto import env_pb2_grpc as pb_grpc
from tinker_core.proto import request_key
from tinker_core.remote.codec import json_object, observation_to_proto, to_json
from tinker_core.remote.guard import EnvCall, ServerLimits, wait_for
from tinker_core.remote.sessions import RpcAbort, Session, SessionTable

log = logging.getLogger(__name__)

_Response = TypeVar("_Response")
_Message = TypeVar("_Message", bound=Message)


def _rpc(method: Callable[..., _Message]) -> Callable[..., _Message]:
    """Turn :class:`RpcAbort` (and unexpected errors) into gRPC status codes; refuse a
    response over ``max_observation_bytes`` with ``RESOURCE_EXHAUSTED``."""

    @functools.wraps(method)
    def handler(self: EnvServicer, request: Message, context: grpc.ServicerContext) -> _Message:
        try:
            response = method(self, request, context)
            size, limit = response.ByteSize(), self.limits.max_observation_bytes
            if size > limit:
                raise RpcAbort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{method.__name__}: the env's response (observation and info) is {size} bytes, over "
                    f"this server's limit of {limit} (max_observation_bytes; opentinker env serve "
                    "--max-observation-bytes)",
                )
            return response
        except RpcAbort as e:
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
        raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from e


class EnvServicer(pb_grpc.EnvServiceServicer):
    """The EnvService implementation: a table of sessions, each with its own env."""

    def __init__(
        self,
        env_ids: tuple[str, ...] | None,
        max_sessions: int,
        idle_timeout_s: float | None,
        make_env: Callable[..., Any],
        limits: ServerLimits | None = None,
    ) -> None:
        self.env_ids = env_ids
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self.limits = limits or ServerLimits()
        self.table = SessionTable(max_sessions, idle_timeout_s, self.limits.call_timeout_s)
        self._make_env = make_env

    # -- the session table (what EnvServer uses) --------------------------------------------
    def session_ids(self) -> list[str]:
        return self.table.ids()

    def reap_idle(self, now: float | None = None) -> int:
        return self.table.reap_idle(now)

    def stop(self, wait_s: float = 1.0) -> None:
        """Give up on every call in flight (``UNAVAILABLE``) and close every session's env,
        waiting at most ``wait_s`` seconds for each busy session."""
        self.table.stop(wait_s)

    # -- helpers ----------------------------------------------------------------------------
    def _check_size(self, rpc: str, field_name: str, text: str, size_hint: int) -> None:
        """INVALID_ARGUMENT when ``text`` is over ``max_action_bytes`` (measured only when the
        request's serialised size ``size_hint`` says it might be)."""
        limit = self.limits.max_action_bytes
        if size_hint <= limit:
            return
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise RpcAbort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{rpc}: {field_name} is {size} bytes, over this server's limit of {limit} "
                "(max_action_bytes; opentinker env serve --max-action-bytes)",
            )

    def _run(
        self,
        what: str,
        env_id: str,
        fn: Callable[[], _Response],
        context: grpc.ServicerContext,
        on_late: Callable[[_Response | None], None],
        on_abandon: Callable[[str], str],
    ) -> _Response:
        """``fn()`` (env code) in an abandonable daemon thread (:mod:`~tinker_core.remote.guard`);
        what it raises is re-raised here. When it is given up on, ``on_abandon(why)`` returns
        what to add to the error, and ``on_late(value)`` cleans up once it ends."""
        call: EnvCall[_Response] = EnvCall(fn, name=f"opentinker-env {env_id} {what}", on_late=on_late)
        gave_up = wait_for(call, timeout_s=self.limits.call_timeout_s, context=context, stopping=self.table.stopping)
        if gave_up is not None and call.abandon():
            extra = on_abandon(f"its {what} call {gave_up.why}")
            raise RpcAbort(gave_up.code, f"env {env_id!r} {what} {gave_up.why}{extra}")
        return call.result()

    def _env_call(
        self, session: Session, what: str, fn: Callable[[], _Response], context: grpc.ServicerContext
    ) -> _Response:
        """Run env code on a session; its ValueError/TypeError become INVALID_ARGUMENT, others
        INTERNAL; a call given up on closes the session."""

        def abandon(why: str) -> str:
            self.table.abandon(session, why)
            return f"; session {session.id!r} is closed, create a new session"

        try:
            return self._run(what, session.env_id, fn, context, lambda _: self.table.close_late(session), abandon)
        except RpcAbort:
            raise
        except (ValueError, TypeError) as e:
            code = grpc.StatusCode.INVALID_ARGUMENT
            raise RpcAbort(code, f"env {session.env_id!r} {what} raised {type(e).__name__}: {e}") from e
        except BaseException as e:  # SystemExit too: it came from env code, not the server
            code = grpc.StatusCode.INTERNAL
            raise RpcAbort(code, f"env {session.env_id!r} {what} raised {type(e).__name__}: {e}") from e

    @staticmethod
    def _info_json(session: Session, info: object, what: str) -> str:
        try:
            return to_json(info if info is not None else {})
        except (TypeError, ValueError) as e:
            raise RpcAbort(
                grpc.StatusCode.INTERNAL,
                f"env {session.env_id!r} returned a {what} that is not JSON-serialisable ({e}); "
                "the env must use JSON types (str, numbers, bools, None, lists, dicts) in it",
            ) from e

    @staticmethod
    def _observation(session: Session, observation: Observation) -> pb.Observation:
        try:
            return observation_to_proto(observation)
        except TypeError as e:
            raise RpcAbort(grpc.StatusCode.INTERNAL, f"env {session.env_id!r}: {e}") from e

    def _agent_state(self, session: Session) -> pb.AgentCycleState:
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
    def _require(session: Session, *, multi_agent: bool | None, reset: bool, rpc: str) -> None:
        if multi_agent is not None and session.multi_agent != multi_agent:
            kind = "a multi-agent" if session.multi_agent else "a single-agent"
            hint = "Observe/Last/AgentSelection" if multi_agent else "the observation fields"
            raise RpcAbort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{rpc}: session {session.id!r} runs {kind} env ({session.env_id!r}); "
                f"{hint} are only for {'multi' if multi_agent else 'single'}-agent envs",
            )
        if reset and not session.reset_done:
            raise RpcAbort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{rpc}: session {session.id!r} has no episode yet; call Reset first",
            )

    def _once(
        self,
        rpc: str,
        request: Message,
        context: grpc.ServicerContext,
        call: Callable[[Session], _Response],
    ) -> _Response:
        """Run ``call`` on the request's session, once per ``request_id``.

        A request that repeats the session's last ``request_id``, method and arguments gets the
        remembered response (a retry does not step the env twice; it waits for a first attempt
        still running); the same id with another method or other arguments is
        INVALID_ARGUMENT; an empty ``request_id`` always runs.
        """
        request_id: str = request.request_id
        key = request_key(rpc, request) if request_id else ""
        with self.table.use(request.session_id, context) as session:
            if request_id and request_id == session.last_request_id:
                if key != session.last_request_key:
                    raise RpcAbort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"{rpc}: request_id {request_id!r} was already used for another call (another "
                        "method or other arguments); use a new request_id for a new call",
                    )
                return session.last_response  # type: ignore[no-any-return]
            response = call(session)
            session.last_request_id, session.last_request_key, session.last_response = request_id, key, response
            return response

    # -- RPCs -------------------------------------------------------------------------------
    @_rpc
    def CreateSession(self, request: pb.CreateEnvSessionRequest, context: grpc.ServicerContext) -> pb.CreateEnvSessionResponse:
        env_id = request.env_id
        if not env_id:
            raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, "env_id is empty; pass a registered env id such as 'echo/echo-v0'")
        if self.env_ids is not None and env_id not in self.env_ids:
            close = did_you_mean(env_id, self.env_ids)
            msg = f"env {env_id!r} is not served here (this server serves {', '.join(self.env_ids)})"
            raise RpcAbort(grpc.StatusCode.NOT_FOUND, msg + (f"; did you mean {close!r}?" if close else ""))
        self._check_size("CreateSession", "kwargs_json", request.kwargs_json, request.ByteSize())
        kwargs = _json_arg(request.kwargs_json, "kwargs_json") or {}
        self.table.reserve()
        try:
            env = self._build_env(env_id, kwargs, context)
            session = Session(
                id=uuid.uuid4().hex,
                env_id=env_id,
                env=env,
                multi_agent=isinstance(env, MultiAgentTextEnv),
                last_used=time.monotonic(),
            )
            spec: EnvSpec | None = getattr(env, "env_spec", None)
            if not isinstance(spec, EnvSpec):
                self.table.close_env(session, wait_s=0)
                raise RpcAbort(grpc.StatusCode.INTERNAL, f"env {env_id!r} has no EnvSpec (env_spec attribute)")
            self.table.add(session)
        finally:
            self.table.unreserve()
        log.debug("created env session %s (%s)", session.id, env_id)
        return pb.CreateEnvSessionResponse(
            session_id=session.id,
            env_spec_json=spec.to_json(),
            multi_agent=session.multi_agent,
            possible_agents=list(env.possible_agents) if session.multi_agent else [],
            idle_timeout_s=self.idle_timeout_s or 0.0,
        )

    def _build_env(self, env_id: str, kwargs: dict[str, Any], context: grpc.ServicerContext) -> Any:
        def close_late(env: Any) -> None:
            if env is not None:
                env.close()

        try:
            build = functools.partial(self._make_env, env_id, **kwargs)
            return self._run("construction", env_id, build, context, close_late, lambda why: "")
        except RpcAbort:
            raise
        except UnknownNameError as e:
            raise RpcAbort(grpc.StatusCode.NOT_FOUND, str(e)) from e
        except (TypeError, ValueError) as e:
            raise RpcAbort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"env {env_id!r} rejected kwargs {kwargs!r}: {type(e).__name__}: {e}",
            ) from e
        except BaseException as e:
            raise RpcAbort(
                grpc.StatusCode.INTERNAL,
                f"building env {env_id!r} with kwargs {kwargs!r} failed: {type(e).__name__}: {e}",
            ) from e

    @_rpc
    def Reset(self, request: pb.ResetRequest, context: grpc.ServicerContext) -> pb.ResetResponse:
        seed = request.seed if request.HasField("seed") else None
        self._check_size("Reset", "options_json", request.options_json, request.ByteSize())

        def reset(s: Session) -> pb.ResetResponse:
            options = _json_arg(request.options_json, "options_json")
            result = self._env_call(s, "reset()", lambda: s.env.reset(seed=seed, options=options), context)
            s.reset_done = True
            if s.multi_agent:
                return pb.ResetResponse(agent_state=self._agent_state(s))
            observation, info = result
            return pb.ResetResponse(
                observation=self._observation(s, observation),
                info_json=self._info_json(s, info, "reset info"),
            )

        return self._once("Reset", request, context, reset)

    @_rpc
    def Step(self, request: pb.StepRequest, context: grpc.ServicerContext) -> pb.StepResponse:
        self._check_size("Step", "the action", request.action, request.ByteSize())
        if request.stop_reason and request.stop_reason not in TURN_ENDS:
            raise RpcAbort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Step: stop_reason {request.stop_reason[:40]!r} is not one of {', '.join(TURN_ENDS)} (or empty)",
            )
        action = Action(request.action, request.stop_reason) if request.stop_reason else request.action  # type: ignore[arg-type]

        def step(s: Session) -> pb.StepResponse:
            self._require(s, multi_agent=None, reset=True, rpc="Step")
            result = self._env_call(s, "step()", lambda: s.env.step(action), context)
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

        return self._once("Step", request, context, step)

    @_rpc
    def Observe(self, request: pb.ObserveRequest, context: grpc.ServicerContext) -> pb.ObserveResponse:
        with self.table.use(request.session_id, context) as s:
            self._require(s, multi_agent=True, reset=True, rpc="Observe")
            if request.role not in s.env.possible_agents:
                raise RpcAbort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Observe: env {s.env_id!r} has no role {request.role!r}; roles are "
                    f"{', '.join(s.env.possible_agents)}",
                )
            observation = self._env_call(s, "observe()", lambda: s.env.observe(request.role), context)
            return pb.ObserveResponse(observation=self._observation(s, observation))

    @_rpc
    def Last(self, request: pb.LastRequest, context: grpc.ServicerContext) -> pb.LastResponse:
        with self.table.use(request.session_id, context) as s:
            self._require(s, multi_agent=True, reset=True, rpc="Last")
            observation, cumulative, terminated, truncated, info = self._env_call(s, "last()", s.env.last, context)
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
        with self.table.use(request.session_id, context) as s:
            self._require(s, multi_agent=True, reset=True, rpc="AgentSelection")
            return self._agent_state(s)

    @_rpc
    def CloseSession(self, request: pb.CloseEnvSessionRequest, context: grpc.ServicerContext) -> pb.CloseEnvSessionResponse:
        session = self.table.forget(request.session_id, "it was closed by its client")
        if session is None:
            return pb.CloseEnvSessionResponse(closed=False)
        self.table.close_env(session)
        log.debug("closed env session %s (%s)", session.id, session.env_id)
        return pb.CloseEnvSessionResponse(closed=True)

