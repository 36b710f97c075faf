"""``opentinker env serve ENV_ID --protocol openenv``: one OpenTinker env served as an OpenEnv
server, so OpenEnv's own clients (``openenv.core.GenericEnvClient``, and through them TRL's
``environment_factory``) train on it. Needs ``pip install 'tinker-client[openenv]'``.

The server is openenv-core's own FastAPI app (``create_fastapi_app``) over
:class:`OpenTinkerEnvironment`, an OpenEnv ``Environment`` that wraps one OpenTinker env per
session. What maps how:

- ``reset(seed, episode_id, options)`` -> an :class:`OpenTinkerObservation` with the env's first
  observation (``text``; ``messages`` too when the env shows chat messages), the env's
  ``system_prompt``, ``reward`` None and ``done`` False.
- ``step({"text": ...})`` -> the next observation, with ``reward`` the env's reward and ``done``
  when the env terminated or truncated, or when the episode reached the env's ``max_turns`` (the
  cap OpenTinker's own rollouts apply); ``info`` carries the env's info dict, ``terminated`` and
  ``truncated``.
- ``state`` -> an :class:`OpenTinkerState`: ``episode_id``, ``step_count`` and ``env_id``.

Sessions: each WebSocket session (what ``EnvClient`` opens) has its own env; up to
``max_sessions`` at once, a session idle ``idle_timeout_s`` is closed. OpenEnv's HTTP ``/reset``
and ``/step`` routes are stateless (a fresh env each request), as in every OpenEnv server. Limits
as every OpenTinker server: request headers within the header deadline, an HTTP body or a
WebSocket message of at most ``max_action_bytes`` plus 64 KiB, an observation (with its info) of
at most ``max_observation_bytes``. Multi-agent envs are not served (OpenEnv's protocol has one
actor per session).
"""

from __future__ import annotations

import contextlib
import functools
import json
import uuid
from collections.abc import Iterator
from typing import Any

from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, ConcurrencyConfig, Observation, State
from pydantic import Field

from tinker_core.contracts import StepResult
from tinker_core.errors import OpenTinkerError
from tinker_core.http_limits import serve_in_thread
from tinker_core.registry import env_spec, make_env
from tinker_core.remote.codec import to_json

__all__ = [
    "OpenTinkerAction",
    "OpenTinkerEnvironment",
    "OpenTinkerObservation",
    "OpenTinkerState",
    "build_server",
    "create_openenv_app",
    "running",
]

#: Room for the JSON framing around an action, over ``max_action_bytes``.
FRAMING_BYTES = 64 * 1024


class OpenTinkerAction(Action):
    """The policy's reply: ``{"text": "..."}`` (OpenEnv's ``metadata`` is accepted and ignored)."""

    text: str = Field(..., description="The policy's reply to the last observation.")


class OpenTinkerObservation(Observation):
    """What the env shows the policy. ``text`` is the observation as text (for a chat observation,
    the content of its last message); ``messages`` the chat messages when the env shows them
    (else empty); ``system_prompt`` the env's system prompt (empty if none); ``info`` the env's
    info dict with ``terminated`` and ``truncated`` after a step."""

    text: str = Field(default="", description="The observation as text.")
    messages: list[dict[str, Any]] = Field(default_factory=list, description="Chat messages, for a chat env.")
    system_prompt: str = Field(default="", description="The env's system prompt.")
    info: dict[str, Any] = Field(default_factory=dict, description="The env's info dict.")


class OpenTinkerState(State):
    """``episode_id`` and ``step_count`` (OpenEnv's), and the served ``env_id``."""

    env_id: str = Field(default="", description="The OpenTinker env id served.")


class OpenTinkerEnvironment(Environment[OpenTinkerAction, OpenTinkerObservation, OpenTinkerState]):
    """An OpenEnv ``Environment`` over one OpenTinker single-agent env (one per session)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session makes its own env instance

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, max_observation_bytes: int = 4 * 1024 * 1024) -> None:
        super().__init__()
        self._spec = env_spec(env_id)
        self._env = make_env(env_id, **(env_kwargs or {}))
        self._max_observation_bytes = max_observation_bytes
        self._state = OpenTinkerState(env_id=env_id)
        self._done = True  # until the first reset

    def reset(self, seed: int | None = None, episode_id: str | None = None, options: dict[str, Any] | None = None,
              **kwargs: Any) -> OpenTinkerObservation:
        """Start an episode: the env's ``reset(seed=seed, options=options)``."""
        observation, info = self._env.reset(seed=seed, options=options)
        self._state = OpenTinkerState(env_id=self._spec.id, episode_id=episode_id or uuid.uuid4().hex, step_count=0)
        self._done = False
        return self._observation(observation, dict(info or {}), reward=None, done=False)

    def step(self, action: OpenTinkerAction, timeout_s: float | None = None, **kwargs: Any) -> OpenTinkerObservation:
        """Send the policy's reply; ``done`` when the env ends the episode or it reaches ``max_turns``."""
        if self._done:
            raise RuntimeError(f"{self._spec.id}: step() before reset() or after the episode ended; call reset() first")
        result = StepResult.of(self._env.step(action.text))
        self._state.step_count += 1
        truncated = result.truncated or (not result.terminated and self._state.step_count >= self._spec.max_turns)
        self._done = result.terminated or truncated
        info = {**dict(result.info or {}), "terminated": result.terminated, "truncated": truncated}
        return self._observation(result.observation, info, reward=result.reward, done=self._done)

    @property
    def state(self) -> OpenTinkerState:
        """The current episode's id and step count, and the env id."""
        return self._state

    def close(self) -> None:
        """Close the wrapped env."""
        self._env.close()

    def _observation(self, observation: Any, info: dict[str, Any], *, reward: float | None, done: bool) -> OpenTinkerObservation:
        messages = [dict(m) for m in observation] if isinstance(observation, list) else []
        text = observation if isinstance(observation, str) else (str(messages[-1].get("content", "")) if messages else "")
        info = json.loads(to_json(info))  # numpy values and sets become JSON; anything else is an error
        size = len(text.encode()) + len(to_json(messages).encode()) + len(to_json(info).encode())
        if size > self._max_observation_bytes:
            raise RuntimeError(
                f"{self._spec.id}: the observation and its info take {size} bytes, over the server's "
                f"--max-observation-bytes {self._max_observation_bytes}; restart it with a larger limit"
            )
        return OpenTinkerObservation(text=text, messages=messages, system_prompt=self._spec.system_prompt,
                                     info=info, reward=reward, done=done)


def create_openenv_app(env_id: str, *, max_sessions: int = 64, idle_timeout_s: float | None = 300.0,
                       max_action_bytes: int = 64 * 1024, max_observation_bytes: int = 4 * 1024 * 1024,
                       env_kwargs: dict[str, Any] | None = None) -> Any:
    """openenv-core's FastAPI app serving ``env_id`` behind the body guard of every OpenTinker
    server. :class:`~tinker_core.errors.OpenTinkerError` names an unknown id (with the nearest
    registered one) or a multi-agent env."""
    from fastapi.responses import JSONResponse

    from tinker_core.http_limits import BodyGuard, HttpLimits

    spec = env_spec(env_id)
    if spec.is_multi_agent:
        raise OpenTinkerError(
            f"{env_id} is a multi-agent env (roles {', '.join(spec.roles)}); OpenEnv's protocol has one actor "
            "per session, so serve it over gRPC ('opentinker env serve' without --protocol openenv)"
        )
    factory = functools.partial(OpenTinkerEnvironment, env_id, env_kwargs, max_observation_bytes)
    app = create_fastapi_app(factory, OpenTinkerAction, OpenTinkerObservation,
                             concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout_s))

    def respond(status: int, message: str) -> Any:
        return JSONResponse({"detail": message}, status_code=status)

    return BodyGuard(_quiet_disconnects(app), HttpLimits(max_action_bytes + FRAMING_BYTES), respond, what="--max-action-bytes")


def _quiet_disconnects(app: Any) -> Any:
    """``app`` without the traceback openenv-core 0.3 logs when a client ends its WebSocket
    session: it closes the socket the client already closed, and starlette raises
    ``WebSocketDisconnect`` (openenv-core only catches ``RuntimeError`` there)."""
    from starlette.websockets import WebSocketDisconnect

    async def quiet(scope: Any, receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        except WebSocketDisconnect:
            if scope["type"] != "websocket":
                raise

    return quiet


def build_server(env_id: str, host: str = "127.0.0.1", port: int = 8000, *, max_action_bytes: int = 64 * 1024,
                 header_timeout_s: float | None = None, **options: Any) -> Any:
    """A ``uvicorn.Server`` of :func:`create_openenv_app` (``options`` are its keyword arguments):
    the header deadline of every OpenTinker server, WebSocket messages of at most
    ``max_action_bytes`` plus 64 KiB."""
    import uvicorn

    from tinker_core.http_limits import HEADER_TIMEOUT_S, HttpLimits, uvicorn_config

    app = create_openenv_app(env_id, max_action_bytes=max_action_bytes, **options)
    limits = HttpLimits(max_action_bytes + FRAMING_BYTES, header_timeout_s=header_timeout_s or HEADER_TIMEOUT_S)
    return uvicorn.Server(uvicorn_config(app, limits, host=host, port=port, ws_max_size=max_action_bytes + FRAMING_BYTES,
                                         log_level="warning", access_log=False))


@contextlib.contextmanager
def running(env_id: str, host: str = "127.0.0.1", port: int = 0, **options: Any) -> Iterator[str]:
    """Serve ``env_id`` in a daemon thread (``port`` 0: a free one); yields the base URL for
    OpenEnv's clients and stops the server on exit. ``options`` as for :func:`build_server`.
    For tests, notebooks and scripts."""
    server = build_server(env_id, host, port, **options)
    with serve_in_thread(server, "opentinker-openenv", f"the OpenEnv server of {env_id} on {host}:{port}") as bound:
        yield f"http://{host}:{bound}"
