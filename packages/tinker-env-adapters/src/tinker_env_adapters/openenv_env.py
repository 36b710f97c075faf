"""OpenEnv environments as OpenTinker envs: ``openenv/env-v0`` (an ``Environment`` class run in
process) and ``openenv/remote-v0`` (a running OpenEnv server, over its WebSocket sessions).

OpenEnv (``pip install 'tinker-env-adapters[openenv]'``, the ``openenv-core`` package) envs take
a typed pydantic ``Action`` and return a typed ``Observation`` with ``reward`` and ``done``. The
mapping onto a :class:`~tinker_core.TextEnv` (``observation_type="text"``):

- the policy's reply becomes the action ``{action_field: text}``. ``action_field`` defaults to the
  action's one required string field (``metadata`` aside); an action with none or several is an
  error naming the candidates and the kwarg to pass;
- an observation becomes text: its ``observation_field`` (default ``text`` when the observation
  has one, else its only string field, else all its fields but ``done``, ``reward`` and
  ``metadata`` as JSON); its ``metadata`` goes to ``info`` where it is JSON;
- ``reward`` (None is 0) is clipped to ``reward_range``; ``done`` is ``terminated``; the episode is
  truncated after ``max_turns`` steps; ``reset(seed)`` passes the seed to OpenEnv's ``reset``;
- an env that raises on an action (or a server that drops the session) ends the episode with
  reward 0 and ``info["error"]``.

In process, ``environment="package.module:ClassName"`` names the ``Environment`` subclass
(``env_kwargs`` are its constructor's); its action class is read from the class's generic
parameters (``Environment[MyAction, MyObservation, MyState]``), or named with ``action=``.
Remotely, ``url`` is the server's base URL (``http://host:port``); the action's fields come from
its ``/schema`` route. Each OpenTinker env holds one session; many envs, many sessions (the
server's ``max_concurrent_envs`` bounds them).
"""

from __future__ import annotations

import importlib
import json
import math
import typing
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Any

from tinker_core import EnvSpec, Observation, TextEnv, check_import
from tinker_env_adapters._common import AdapterError, adapter_spec, json_dict, require

__all__ = ["DEFAULT_MAX_TURNS", "OpenEnvEnv", "OpenEnvRemoteEnv", "openenv_spec"]

DEFAULT_MAX_TURNS = 8
EXTRA = "openenv"
_RESERVED = ("done", "reward", "metadata")


def openenv_spec(kind: str) -> EnvSpec:
    """The registered spec of ``openenv/env-v0`` (``kind="env"``) or ``openenv/remote-v0``."""
    where = (
        {"environment": "the Environment class, 'package.module:ClassName'", "env_kwargs": "its constructor's kwargs",
         "action": "its Action class, when the generic parameters do not name it"}
        if kind == "env" else {"url": "the OpenEnv server's base URL, http://host:port"}
    )
    return adapter_spec(
        f"openenv/{kind}-v0", "openenv",
        "An OpenEnv environment " + ("class run in process" if kind == "env" else "served by a running OpenEnv server")
        + ": the reply is the action's text field, the observation's text field is shown; reward and end are OpenEnv's.",
        kwargs={
            **where,
            "action_field": "the action field the reply goes into (default: its one required str field)",
            "observation_field": "the observation field shown (default: text, else its one str field, else JSON)",
            "max_turns": f"steps before truncation (default {DEFAULT_MAX_TURNS})",
            "reward_range": "the step reward range (default [0, 1]; rewards are clipped to it)",
        },
        max_turns=DEFAULT_MAX_TURNS, reward_range=(0.0, 1.0), action_format="what the environment's observation asks for",
        import_kwargs=("environment", "action") if kind == "env" else (),
    )


def _import(target: str, env_id: str, what: str) -> Any:
    module, sep, name = target.partition(":")
    if not sep or not module or not name:
        raise AdapterError(f"env {env_id!r}: {what} must be 'package.module:Name', got {target!r}")
    check_import(target, f"env.kwargs.{what}")  # on a scheduler: only what its operator allowed
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise AdapterError(f"env {env_id!r}: cannot import {what} {target!r} ({type(e).__name__}: {e})") from e


def _text_fields(schema: dict[str, Any]) -> tuple[list[str], list[str]]:
    """A JSON schema's string fields (``metadata`` and the observation's own aside): required, all."""
    props = schema.get("properties") or {}
    strings = [k for k, v in props.items() if k not in _RESERVED and isinstance(v, dict) and v.get("type") == "string"]
    required = set(schema.get("required") or [])
    return [k for k in strings if k in required], strings


def _action_field(env_id: str, schema: dict[str, Any], chosen: str | None) -> str:
    props = schema.get("properties") or {}
    required, strings = _text_fields(schema)
    if chosen is not None:
        if chosen not in props:
            raise AdapterError(f"env {env_id!r}: action_field {chosen!r} is not a field of the action (it has: {', '.join(props)})")
    else:
        candidates = required or strings
        if len(candidates) != 1:
            raise AdapterError(
                f"env {env_id!r}: cannot tell which action field the reply goes into "
                f"(string fields: {', '.join(strings) or 'none'}); pass action_field='<name>' in env.kwargs"
            )
        chosen = candidates[0]
    others = [k for k in schema.get("required") or [] if k != chosen]
    if others:
        raise AdapterError(
            f"env {env_id!r}: the action also requires {', '.join(others)}, which a text reply cannot fill; "
            "OpenTinker maps the reply onto one field (give the others defaults, or wrap the env)"
        )
    return chosen


def _observation_field(schema: dict[str, Any], chosen: str | None) -> str | None:
    if chosen is not None:
        return chosen
    props = schema.get("properties") or {}
    if "text" in props:
        return "text"
    _, strings = _text_fields(schema)
    return strings[0] if len(strings) == 1 else None


class _OpenEnvBase(TextEnv):
    """What both kinds share: the spec's overrides, the observation's text, reward and end."""

    def __init__(self, kind: str, *, observation_field: str | None, max_turns: int, reward_range: tuple[float, float]) -> None:
        self.env_spec = openenv_spec(kind)
        if not isinstance(max_turns, int) or max_turns < 1:
            raise AdapterError(f"env {self.env_spec.id!r}: max_turns must be an int >= 1, got {max_turns!r}")
        low, high = (float(x) for x in reward_range)
        if not low < high:
            raise AdapterError(f"env {self.env_spec.id!r}: reward_range must be [low, high] with low < high, got {reward_range!r}")
        self.env_spec = replace(self.env_spec, max_turns=max_turns, reward_range=(low, high))
        self._observation_field = observation_field
        self._turns = 0
        self._over = True

    def _text(self, obs: dict[str, Any]) -> str:
        if self._observation_field is not None:
            if self._observation_field not in obs:
                raise AdapterError(f"env {self.env_spec.id!r}: observation_field {self._observation_field!r} is not in the observation (it has: {', '.join(obs)})")
            value = obs[self._observation_field]
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        rest = {k: v for k, v in obs.items() if k not in _RESERVED}
        return json.dumps(rest, ensure_ascii=False, default=str)

    def _result(self, obs: dict[str, Any]) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        low, high = self.env_spec.reward_range
        raw = obs.get("reward")
        reward = float(raw) if raw is not None else 0.0
        reward = min(high, max(low, reward if math.isfinite(reward) else 0.0))
        terminated = bool(obs.get("done"))
        truncated = not terminated and self._turns >= self.env_spec.max_turns
        self._over = terminated or truncated
        return ("" if self._over else self._text(obs)), reward, terminated, truncated, json_dict(obs.get("metadata"))

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self._over:
            return "", 0.0, True, False, {"error": "the episode is over; call reset()"}
        self._turns += 1
        try:
            obs = self._step(str(action))
        except Exception as e:  # an env that chokes on the action ends the episode with 0
            self._over = True
            return "", 0.0, True, False, {"error": f"{type(e).__name__}: {e}"}
        return self._result(obs)

    def _begin(self, obs: dict[str, Any]) -> tuple[Observation, dict[str, Any]]:
        self._turns, self._over = 0, bool(obs.get("done"))
        return self._text(obs), json_dict(obs.get("metadata"))

    def _step(self, text: str) -> dict[str, Any]:  # pragma: no cover - each kind has its own
        raise NotImplementedError


class OpenEnvEnv(_OpenEnvBase):
    """An OpenEnv ``Environment`` class run in process (see the module docstring).

    Args:
        environment: the class, ``"package.module:ClassName"`` (or the class itself).
        env_kwargs: its constructor's keyword arguments.
        action: its ``Action`` class (``"package.module:Name"``), when its generic parameters
            do not name it.
        action_field, observation_field, max_turns, reward_range: see the module docstring.
    """

    def __init__(
        self,
        environment: str | type,
        *,
        env_kwargs: dict[str, Any] | None = None,
        action: str | type | None = None,
        action_field: str | None = None,
        observation_field: str | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        reward_range: tuple[float, float] = (0.0, 1.0),
    ) -> None:
        openenv = require("openenv.core", "openenv/env-v0", EXTRA)
        super().__init__("env", observation_field=None, max_turns=max_turns, reward_range=reward_range)
        env_id = self.env_spec.id
        cls = _import(environment, env_id, "environment") if isinstance(environment, str) else environment
        if not (isinstance(cls, type) and issubclass(cls, openenv.Environment)):
            raise AdapterError(f"env {env_id!r}: environment {environment!r} is not an OpenEnv Environment subclass")
        self._action_cls, obs_cls = self._types(cls, action, openenv)
        self._field = _action_field(env_id, self._action_cls.model_json_schema(), action_field)
        self._observation_field = _observation_field(obs_cls.model_json_schema(), observation_field) if obs_cls else observation_field
        self._env = cls(**dict(env_kwargs or {}))

    def _types(self, cls: type, action: str | type | None, openenv: Any) -> tuple[type, type | None]:
        args: tuple[Any, ...] = ()
        for base in getattr(cls, "__orig_bases__", ()):
            if typing.get_origin(base) is openenv.Environment:
                args = typing.get_args(base)
        act = _import(action, self.env_spec.id, "action") if isinstance(action, str) else action
        if act is None and args and isinstance(args[0], type):
            act = args[0]
        if not (isinstance(act, type) and issubclass(act, openenv.Action)):
            raise AdapterError(
                f"env {self.env_spec.id!r}: cannot tell {cls.__name__}'s Action class from its generic parameters; "
                "pass action='package.module:MyAction' in env.kwargs"
            )
        obs = args[1] if len(args) > 1 and isinstance(args[1], type) and issubclass(args[1], openenv.Observation) else None
        return act, obs

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        obs = self._env.reset(seed=seed, **dict(options or {}))
        return self._begin(obs.model_dump())

    def _step(self, text: str) -> dict[str, Any]:
        return self._env.step(self._action_cls(**{self._field: text})).model_dump()

    def close(self) -> None:
        closer = getattr(self._env, "close", None)
        if callable(closer):
            closer()


class OpenEnvRemoteEnv(_OpenEnvBase):
    """A running OpenEnv server, one WebSocket session per env (see the module docstring).

    Args:
        url: the server's base URL, ``http://host:port``.
        action_field, observation_field, max_turns, reward_range: see the module docstring.
        timeout_s: how long to wait for the server's ``/schema`` and each message.
    """

    def __init__(
        self,
        url: str,
        *,
        action_field: str | None = None,
        observation_field: str | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        reward_range: tuple[float, float] = (0.0, 1.0),
        timeout_s: float = 30.0,
    ) -> None:
        openenv = require("openenv.core", "openenv/remote-v0", EXTRA)
        super().__init__("remote", observation_field=None, max_turns=max_turns, reward_range=reward_range)
        env_id = self.env_spec.id
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise AdapterError(f"env {env_id!r}: url must be the server's http(s):// base URL, got {url!r}")
        self.url = url.rstrip("/")
        schemas = self._schemas(timeout_s)
        self._field = _action_field(env_id, schemas.get("action") or {}, action_field)
        self._observation_field = _observation_field(schemas.get("observation") or {}, observation_field)
        self._client = openenv.GenericEnvClient(base_url=self.url, message_timeout_s=timeout_s).sync()
        self._connected = False

    def _schemas(self, timeout_s: float) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(f"{self.url}/schema", timeout=timeout_s) as resp:  # noqa: S310 - http(s) checked
                return json.loads(resp.read().decode("utf-8"))
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise AdapterError(f"env {self.env_spec.id!r}: cannot read {self.url}/schema ({e}); is the OpenEnv server running there?") from e

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        if not self._connected:
            self._client.connect()
            self._connected = True
        result = self._client.reset(seed=seed, **dict(options or {}))
        return self._begin(self._payload(result))

    def _step(self, text: str) -> dict[str, Any]:
        return self._payload(self._client.step({self._field: text}))

    @staticmethod
    def _payload(result: Any) -> dict[str, Any]:
        return {**dict(result.observation or {}), "reward": result.reward, "done": result.done}

    def close(self) -> None:
        if self._connected:
            self._client.close()
            self._connected = False
