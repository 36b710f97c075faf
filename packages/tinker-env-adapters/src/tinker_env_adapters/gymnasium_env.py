"""Gymnasium envs as text envs: ``gym/<id>`` for the envs in gymnasium's registry.

tinker-core already goes the other way (:mod:`tinker_core.gymnasium_envs` puts every OpenTinker
env in gymnasium's registry); this module wraps gymnasium's own envs. ``gym/FrozenLake-v1``
builds ``gymnasium.make("FrozenLake-v1", **kwargs)`` and maps its spaces onto text:

- observations: a ``Text`` space passes through; a ``Discrete`` one (or a ``Tuple`` /
  ``MultiDiscrete`` of integers) becomes the env's ``ansi`` rendering when it has one (the
  board of FrozenLake, Taxi, CliffWalking; colour codes removed, a highlighted cell such as
  the agent's shown as ``[X]``), followed by ``Observation: <value>`` (JSON);
- actions: a ``Text`` space passes through; for a ``Discrete(n, start)`` space the first integer
  in the action is the action; an action without one in range ends the episode (truncated,
  reward ``invalid_action_reward``, ``info["invalid_action"]``);
- reward, terminated, truncated are gymnasium's; info is kept where it is JSON (numpy values
  become Python numbers, the rest is dropped); the episode is also truncated after
  ``max_turns`` steps (default: gymnasium's ``max_episode_steps``, else 100).

Any other space (``Box`` images or vectors: CartPole, MuJoCo...) has no text form: building such
an env raises :class:`~tinker_env_adapters.AdapterError` naming the env and the space.
Namespaced gymnasium ids map to ``gym/<namespace>.<name>-vN``; unversioned ids are not
registered (an OpenTinker id needs ``-vN``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from functools import partial
from typing import Any

from tinker_core import EnvSpec, TextEnv
from tinker_env_adapters._common import AdapterError, adapter_spec

__all__ = ["DEFAULT_MAX_TURNS", "UNKNOWN_REWARD_RANGE", "GymTextEnv", "gymnasium_envs", "gymnasium_spec", "unavailable_reason"]

DEFAULT_MAX_TURNS = 100
UNKNOWN_REWARD_RANGE = (-1e6, 1e6)
_INT_RE = re.compile(r"-?\d+")
_HIGHLIGHT_RE = re.compile(r"\x1b\[[0-9;]*m(.*?)\x1b\[0m", re.DOTALL)
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def _opentinker_id(gym_id: str, namespace: str | None, name: str, version: int | None) -> str | None:
    if version is None:
        return None
    return f"gym/{namespace + '.' if namespace else ''}{name}-v{version}"


NO_TEXT_FORM = {
    "gymnasium.envs.classic_control": "Box observations",
    "gymnasium.envs.box2d": "Box observations",
    "gymnasium.envs.mujoco": "Box observations and actions",
    "gymnasium.envs.phys2d": "Box observations",
}
"""Gymnasium's own env families that cannot become text envs, and why (checked by building
those that import here: tests/test_gymnasium.py)."""

RETIRED = {
    "_raise_mujoco_py_error": "needs mujoco-py, which gymnasium 1.x no longer supports",
    "_raise_shimmy_error": "needs shimmy and the old gym package (pip install 'shimmy[gym-v26]')",
}
"""What gymnasium's placeholder entry points (they raise when built) stand for."""


def unavailable_reason(gym_id: str) -> str | None:
    """Why ``gym/<gym_id>`` cannot be built here, from its registry entry without importing it
    (None: it maps to text, or it is another package's env, checked only when built)."""
    import gymnasium

    from tinker_env_adapters._common import installed

    entry = gymnasium.registry[gym_id].entry_point
    name = getattr(entry, "__name__", "")
    if callable(entry) and name in RETIRED:
        return RETIRED[name]
    module = entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")
    for family, why in NO_TEXT_FORM.items():
        if module.startswith(family + "."):
            return f"no text form ({why}); Discrete ones such as gym/FrozenLake-v1 have one"
    if module.startswith("gymnasium.envs.tabular.") and not installed("jax"):
        return "needs the Python package 'jax': pip install jax"
    return None


def gymnasium_envs() -> list[tuple[str, str, int | None, str | None]]:
    """``(opentinker_id, gymnasium_id, max_episode_steps, unavailable_reason)`` for every env in
    gymnasium's registry that is not an OpenTinker env and has a version (built without
    importing any env; the reason is :func:`unavailable_reason`'s)."""
    import gymnasium

    from tinker_core.gymnasium_envs import build_env

    found = []
    for gym_id, spec in gymnasium.registry.items():
        entry = spec.entry_point
        if isinstance(entry, partial) and entry.func is build_env:
            continue  # an OpenTinker env that tinker-core put there
        ot_id = _opentinker_id(gym_id, spec.namespace, spec.name, spec.version)
        if ot_id is not None:
            found.append((ot_id, gym_id, spec.max_episode_steps, unavailable_reason(gym_id)))
    return found


def gymnasium_spec(ot_id: str, gym_id: str, max_episode_steps: int | None) -> EnvSpec:
    """The registered spec of ``gym/<id>`` (the reward range is gymnasium's once built)."""
    return adapter_spec(
        ot_id, "gymnasium",
        f"Gymnasium env {gym_id!r} over text: Discrete/Text spaces map to text (an ansi "
        "board where the env has one; actions are integers); other spaces cannot.",
        about={"gymnasium_id": gym_id},
        max_turns=max_episode_steps or DEFAULT_MAX_TURNS, reward_range=UNKNOWN_REWARD_RANGE,
        action_format="the action's integer, e.g. 2",
    )


def _json_value(value: Any) -> Any:
    """``value`` as standard JSON (numpy scalars and arrays become Python), or None when it has none."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return value


class GymTextEnv(TextEnv):
    """A gymnasium env with its observations and actions as text (see the module docstring).

    Args:
        gym_id: the gymnasium id (``FrozenLake-v1``).
        spec: the registered :class:`EnvSpec` of ``gym/<gym_id>``; None builds it from
            gymnasium's registry entry.
        max_turns: steps before truncation (default: the spec's).
        reward_range: the smallest and largest step reward, when gymnasium's env does not say.
        invalid_action_reward: the reward of an action that does not parse (must lie in range).
        **make_kwargs: passed to ``gymnasium.make`` (``map_name="8x8"``, ``is_slippery=False``...).
    """

    def __init__(
        self,
        gym_id: str,
        spec: EnvSpec | None = None,
        *,
        max_turns: int | None = None,
        reward_range: tuple[float, float] | None = None,
        invalid_action_reward: float = 0.0,
        **make_kwargs: Any,
    ) -> None:
        import gymnasium
        from gymnasium import spaces

        if spec is None:
            entry = gymnasium.spec(gym_id)
            ot_id = _opentinker_id(gym_id, entry.namespace, entry.name, entry.version)
            if ot_id is None:
                raise AdapterError(f"gymnasium id {gym_id!r} has no version; an OpenTinker id needs '-vN'")
            spec = gymnasium_spec(ot_id, gym_id, entry.max_episode_steps)
        env = gymnasium.make(gym_id, **make_kwargs)
        if "ansi" in (env.metadata.get("render_modes") or []) and "render_mode" not in make_kwargs:
            env.close()
            env = gymnasium.make(gym_id, render_mode="ansi", **make_kwargs)
        self._env = env
        for what, space in (("observation", env.observation_space), ("action", env.action_space)):
            ok = isinstance(space, spaces.Text | spaces.Discrete) or (
                what == "observation" and isinstance(space, spaces.MultiDiscrete)
            ) or (what == "observation" and isinstance(space, spaces.Tuple)
                  and all(isinstance(s, spaces.Discrete) for s in space.spaces))
            if not ok:
                env.close()
                raise AdapterError(
                    f"env {spec.id!r}: gymnasium's {gym_id} has {what} space {space}, which has no "
                    "text form; the gym adapter maps Text and Discrete spaces (and Tuple/"
                    "MultiDiscrete observations) only: wrap the env in a gymnasium wrapper whose "
                    f"{what}s are text, and register that"
                )
        low, high = reward_range or getattr(env.unwrapped, "reward_range", None) or UNKNOWN_REWARD_RANGE
        if not (math.isfinite(low) and math.isfinite(high)):
            low, high = UNKNOWN_REWARD_RANGE
        if not low <= invalid_action_reward <= high:
            raise AdapterError(
                f"env {spec.id!r}: invalid_action_reward {invalid_action_reward} is outside the "
                f"reward range [{low}, {high}]; pick a reward in it"
            )
        turns = spec.max_turns if max_turns is None else max_turns  # 0 is a value, refused below, not "the default"
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            raise AdapterError(f"env {spec.id!r}: max_turns must be an int >= 1 (steps before truncation), got {max_turns!r}")
        self.env_spec = replace(spec, reward_range=(low, high), max_turns=turns)
        self.invalid_action_reward = float(invalid_action_reward)
        self._steps = 0
        self._over = True

    def _text(self, observation: Any) -> str:
        from gymnasium import spaces

        if isinstance(self._env.observation_space, spaces.Text):
            return str(observation)
        value = _json_value(observation)
        if isinstance(value, list | tuple):
            value = [_json_value(v) for v in value]
        board = self.render()
        return (f"{board}\n" if board else "") + f"Observation: {json.dumps(value)}"

    def _info(self, info: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, value in info.items():
            value = _json_value(value)
            if value is not None:
                out[str(key)] = value
        return out

    def _action(self, action: str) -> Any:
        from gymnasium import spaces

        space = self._env.action_space
        if isinstance(space, spaces.Text):
            return action if space.contains(action) else None
        match = _INT_RE.search(action)
        if match is None or not isinstance(space, spaces.Discrete):
            return None
        value = int(match.group())
        return value if space.start <= value < space.start + space.n else None

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        env_seed = seed if seed is not None else int(self.np_random.integers(2**31))
        observation, info = self._env.reset(seed=env_seed, options=options)
        self._env.action_space.seed(env_seed)
        self._steps, self._over = 0, False
        return self._text(observation), self._info(info)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._over:
            return "", 0.0, True, False, {"error": "the episode is over; call reset()"}
        self._steps += 1
        parsed = self._action(action)
        if parsed is None:
            self._over = True
            return "", self.invalid_action_reward, False, True, {"invalid_action": action[:200]}
        observation, reward, terminated, truncated, info = self._env.step(parsed)
        low, high = self.env_spec.reward_range
        reward = min(high, max(low, float(reward)))
        truncated = bool(truncated) or self._steps >= self.env_spec.max_turns
        self._over = bool(terminated) or truncated
        return self._text(observation), reward, bool(terminated), truncated, self._info(info)

    def render(self) -> str | None:
        """The env's ``ansi`` board as plain text: a highlighted cell (the agent) shows as ``[X]``."""
        if self._env.render_mode != "ansi":
            return None
        board = str(self._env.render() or "")
        return _ANSI_RE.sub("", _HIGHLIGHT_RE.sub(r"[\1]", board)).strip("\n")

    def close(self) -> None:
        self._env.close()
