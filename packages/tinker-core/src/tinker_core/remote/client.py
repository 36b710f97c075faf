"""The clients of an env server: :class:`RemoteEnv`, :class:`RemoteMultiAgentEnv`, and the
errors a failed call raises (:class:`RemoteEnvError` and its subclasses).

Each client owns one session on the server; both kinds share the session handling
(:class:`_RemoteSession`): opening it, building ``Reset``/``Step`` requests, ``close()``.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import TYPE_CHECKING, Any, Literal, Self

import grpc

from tinker_core.contracts import Observation, turn_end_of
from tinker_core.env import EnvSpec, MultiAgentTextEnv, TextEnv
from tinker_core.errors import OpenTinkerError
from tinker_core.handshake import handshake_channel
from tinker_core.proto import env_pb2 as pb
from tinker_core.proto import env_pb2_grpc as pb_grpc
from tinker_core.proto import message_size_options
from tinker_core.remote.codec import info_from_json, observation_from_proto, optional_json

if TYPE_CHECKING:
    from google.protobuf.message import Message

log = logging.getLogger(__name__)


# ---- errors -------------------------------------------------------------------------------


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
    elif code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
        message += (
            " (the env server reads requests of at most its max_action_bytes plus 64 KiB; send a "
            "shorter action, or start it with a larger opentinker env serve --max-action-bytes)"
        )
    cls = {
        grpc.StatusCode.INVALID_ARGUMENT: RemoteEnvInvalidArgument,
        grpc.StatusCode.NOT_FOUND: RemoteEnvNotFound,
    }.get(code, RemoteEnvError)
    return cls(message, code)


# ---- the session --------------------------------------------------------------------------


class SessionClient:
    """The connection and session under a remote env.

    Opening it creates the session; a TypeError (after closing it again) when the env is not
    of the kind the caller serves (``multi_agent``).
    """

    def __init__(
        self,
        target: str | grpc.Channel,
        env_id: str,
        kwargs: dict[str, Any],
        timeout_s: float | None,
        *,
        multi_agent: bool,
    ) -> None:
        try:
            kwargs_json = json.dumps(kwargs) if kwargs else ""
        except TypeError as e:
            raise TypeError(f"remote env {env_id!r}: kwargs travel as JSON and must be JSON-serialisable: {e}") from e
        if isinstance(target, str):
            self.address = target
            self._channel = handshake_channel(grpc.insecure_channel(target, options=message_size_options()),
                                              "tinker-core", "env server")
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
        if self.multi_agent != multi_agent:
            self.close()
            if self.multi_agent:
                raise TypeError(
                    f"{env_id!r} is a multi-agent env (roles {', '.join(self.possible_agents)}); "
                    "use RemoteMultiAgentEnv for it"
                )
            raise TypeError(f"{env_id!r} is a single-agent env; use RemoteEnv for it")

    def call(self, rpc: str, request: Message, timeout_s: float | None = None) -> Any:
        if self._closed:
            raise RemoteEnvError(
                f"remote env {self.env_id!r} ({self.address}): {rpc} after close(); create a new env",
                grpc.StatusCode.FAILED_PRECONDITION,
            )
        try:
            return getattr(self._stub, rpc)(request, timeout=timeout_s)
        except grpc.RpcError as e:
            raise _remote_error(e, f"remote env {self.env_id!r} at {self.address}, {rpc}") from None

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


class _RemoteSession:
    """What both remote envs share: their session, its Reset/Step requests, ``close()``."""

    call_timeout_s: float | None = 300.0
    """The bound on each call, in seconds (None: no bound)."""

    _client: SessionClient

    def _open(self, address: str | grpc.Channel, env_id: str, kwargs: dict[str, Any], *, multi_agent: bool) -> None:
        self._client = SessionClient(address, env_id, kwargs, self.call_timeout_s, multi_agent=multi_agent)

    @property
    def session_id(self) -> str:
        return self._client.session_id

    @property
    def address(self) -> str:
        return self._client.address

    def _call(self, rpc: str, request: Message) -> Any:
        return self._client.call(rpc, request, self.call_timeout_s)

    def _reset(self, seed: int | None, options: dict[str, Any] | None) -> Any:
        request = pb.ResetRequest(
            session_id=self.session_id, options_json=optional_json(options), request_id=uuid.uuid4().hex
        )
        if seed is not None:
            request.seed = seed
        return self._call("Reset", request)

    def _step(self, action: str) -> Any:
        if not isinstance(action, str):
            raise TypeError(f"{type(self).__name__}.step: action must be a str, got {type(action).__name__}")
        reason = turn_end_of(action) or ""  # an Action's stop_reason travels with it
        return self._call(
            "Step",
            pb.StepRequest(session_id=self.session_id, action=action, request_id=uuid.uuid4().hex, stop_reason=reason),
        )

    def close(self) -> None:
        """End the server-side session and close the connection; idempotent."""
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._client.env_id} at {self.address} session={self.session_id}>"


# ---- the envs -----------------------------------------------------------------------------


class RemoteEnv(_RemoteSession, TextEnv):
    """A :class:`~tinker_core.env.TextEnv` whose env runs on an env server.

    ``RemoteEnv(address, env_id, **kwargs)`` opens a session of ``env_id`` built with
    ``kwargs`` (which travel as JSON) on the server at ``address`` (``"host:port"`` or a
    ``grpc.Channel``, e.g. one with TLS). It then behaves like ``make_env(env_id, **kwargs)``:
    the same seed gives the same observations, rewards and infos. :meth:`close` ends the
    session; it is also a context manager. ``call_timeout_s`` bounds each call (None: no bound).
    """

    def __init__(self, address: str | grpc.Channel, env_id: str, /, **kwargs: Any) -> None:
        self._open(address, env_id, kwargs, multi_agent=False)
        self.env_spec = self._client.spec

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        response: pb.ResetResponse = self._reset(seed, options)
        return observation_from_proto(response.observation), info_from_json(response.info_json)

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        response: pb.StepResponse = self._step(action)
        return (
            observation_from_proto(response.observation),
            response.reward,
            response.terminated,
            response.truncated,
            info_from_json(response.info_json),
        )


class RemoteMultiAgentEnv(_RemoteSession, MultiAgentTextEnv):
    """A :class:`~tinker_core.env.MultiAgentTextEnv` whose env runs on an env server.

    Arguments as for :class:`RemoteEnv`. ``agent_selection``, ``agents``, ``rewards``,
    ``terminations``, ``truncations``, ``infos`` and the cumulative rewards mirror the server's
    env after every :meth:`reset` and :meth:`step` (no extra round trip); :meth:`observe` and
    :meth:`last` ask the server.
    """

    def __init__(self, address: str | grpc.Channel, env_id: str, /, **kwargs: Any) -> None:
        self._open(address, env_id, kwargs, multi_agent=True)
        self.env_spec = self._client.spec
        self.possible_agents = list(self._client.possible_agents)

    def _apply(self, state: pb.AgentCycleState) -> None:
        self.agent_selection = state.agent_selection
        self.agents = list(state.agents)
        roles = state.roles
        self.rewards = {a: roles[a].reward for a in self.possible_agents}
        self._cumulative_rewards = {a: roles[a].cumulative_reward for a in self.possible_agents}
        self.terminations = {a: roles[a].terminated for a in self.possible_agents}
        self.truncations = {a: roles[a].truncated for a in self.possible_agents}
        self.infos = {a: info_from_json(roles[a].info_json) for a in self.possible_agents}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        super().reset(seed=seed, options=options)
        self._apply(self._reset(seed, options).agent_state)

    def observe(self, agent: str) -> Observation:
        response: pb.ObserveResponse = self._call("Observe", pb.ObserveRequest(session_id=self.session_id, role=agent))
        return observation_from_proto(response.observation)

    def step(self, action: str) -> None:
        self._apply(self._step(action).agent_state)

    def last(self) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        r: pb.LastResponse = self._call("Last", pb.LastRequest(session_id=self.session_id))
        return (
            observation_from_proto(r.observation),
            r.cumulative_reward,
            r.terminated,
            r.truncated,
            info_from_json(r.info_json),
        )

    def refresh(self) -> None:
        """Re-read the episode state from the server (``AgentSelection``)."""
        self._apply(self._call("AgentSelection", pb.AgentSelectionRequest(session_id=self.session_id)))
