"""SkyRL-gym envs as chat envs: ``skyrl/<name>-v0``.

SkyRL-gym (``pip install 'tinker-env-adapters[skyrl-gym]'``) builds an env per dataset row:
``skyrl_gym.make(name, env_config=..., extras=row)``, then ``init(prompt) -> (messages,
metadata)`` and ``step(action) -> {observations, reward, done, metadata}``, the observations
being the new OpenAI-format messages. It ships no problems: the rows come from the user. The
mapping onto a :class:`~tinker_core.TextEnv` with ``observation_type="chat"``:

- ``reset(seed)`` draws a row from ``rows`` (or the JSONL file ``data_path``) with the env's
  ``np_random`` (``options={"index": i}`` picks one), builds the SkyRL env with the row as its
  ``extras`` and returns ``init(row["prompt"])``'s messages (a string prompt becomes one user
  message);
- ``step(action)`` returns SkyRL's new messages as the observation (OpenTinker's next user
  turn: chat rendering appends them), its reward (clipped to ``reward_range``), ``done`` as
  ``terminated``, and truncates after ``max_turns`` steps; SkyRL's metadata goes to ``info``
  where it is JSON. An env that raises on an action ends the episode with reward 0
  (``info["error"]``).

Rows are SkyRL's dataset rows: ``{"prompt": [...messages], "reward_spec": {"ground_truth":
...}, "extra_info": {...}}`` for ``gsm8k``, ``gsm8k_multi_turn`` and ``aime``. ``text2sql``,
``search``, ``lcb`` and ``searchcode`` need what their SkyRL env needs besides (database files,
a search server, code-execution tests): see SkyRL-gym's docs.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from tinker_core import EnvSpec, Message, Observation, TextEnv
from tinker_env_adapters._common import AdapterError, adapter_spec, json_dict, require

__all__ = ["DEFAULT_MAX_TURNS", "SKYRL_ENVS", "SkyRLGymEnv", "skyrl_spec"]

SKYRL_ENVS = ("aime", "gsm8k", "gsm8k_multi_turn", "lcb", "search", "searchcode", "text2sql")
"""SkyRL-gym 0.4.0's registered env names (listed so discovery does not import it)."""

DEFAULT_MAX_TURNS = 8
EXTRA = "skyrl-gym"


def skyrl_spec(name: str) -> EnvSpec:
    """The registered spec of ``skyrl/<name>-v0``."""
    return adapter_spec(
        f"skyrl/{name}-v0", "skyrl-gym",
        f"SkyRL-gym env {name!r} over chat messages, one env per dataset row (rows= or "
        "data_path=); reward and end of episode are SkyRL's.",
        about={"env": name},
        kwargs={
            "rows": "SkyRL dataset rows (prompt, reward_spec, extra_info...)",
            "data_path": "a JSONL file of such rows",
            "env_config": "SkyRL's env_config (a dict)",
            "max_turns": f"steps before truncation (default {DEFAULT_MAX_TURNS})",
            "reward_range": "the step reward range (default [0, 1])",
        },
        max_turns=DEFAULT_MAX_TURNS, reward_range=(0.0, 1.0), observation_type="chat",
        action_format="what the row's prompt asks for (e.g. '#### 42' for gsm8k)",
    )


def _load_rows(env_id: str, rows: list[dict[str, Any]] | None, data_path: str | None) -> list[dict[str, Any]]:
    if rows is not None and data_path is not None:
        raise AdapterError(f"env {env_id!r}: pass rows or data_path, not both")
    if data_path is not None:
        path = Path(data_path)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise AdapterError(f"env {env_id!r}: cannot read data_path {str(path)!r} ({e})") from e
        try:
            rows = [json.loads(line) for line in lines if line.strip()]
        except json.JSONDecodeError as e:
            raise AdapterError(f"env {env_id!r}: data_path {str(path)!r} is not JSONL ({e})") from e
    if not rows:
        raise AdapterError(
            f"env {env_id!r} needs its problems: SkyRL-gym ships none. Pass rows=[...] or "
            "data_path='rows.jsonl', each row a SkyRL dataset row such as "
            "{'prompt': [{'role': 'user', 'content': '...'}], 'reward_spec': {'ground_truth': '42'}}"
        )
    bad = [i for i, row in enumerate(rows) if not isinstance(row, dict) or "prompt" not in row]
    if bad:
        raise AdapterError(f"env {env_id!r}: row(s) {bad[:5]} have no 'prompt' field")
    return [dict(row) for row in rows]


def _messages(prompt: Any) -> list[Message]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]


class SkyRLGymEnv(TextEnv):
    """A SkyRL-gym env over chat messages (see the module docstring).

    Args:
        name: the SkyRL-gym env name (``gsm8k``, ``gsm8k_multi_turn``...).
        rows: SkyRL dataset rows; each episode builds the env from one.
        data_path: a JSONL file of rows (instead of ``rows``).
        env_config: SkyRL's ``env_config`` for the env class.
        max_turns: steps before truncation.
        reward_range: the smallest and largest step reward (SkyRL's are clipped to it).
    """

    def __init__(
        self,
        name: str,
        *,
        rows: list[dict[str, Any]] | None = None,
        data_path: str | None = None,
        env_config: dict[str, Any] | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        reward_range: tuple[float, float] = (0.0, 1.0),
    ) -> None:
        self.env_spec = skyrl_spec(name)
        env_id = self.env_spec.id
        if not isinstance(max_turns, int) or max_turns < 1:
            raise AdapterError(f"env {env_id!r}: max_turns must be an int >= 1, got {max_turns!r}")
        self.rows = _load_rows(env_id, rows, data_path)
        skyrl_gym = require("skyrl_gym", env_id, EXTRA)
        if name not in skyrl_gym.registry:
            raise AdapterError(f"env {env_id!r}: the installed SkyRL-gym has no env {name!r} (it has: {', '.join(sorted(skyrl_gym.registry))})")
        self._make = skyrl_gym.make
        self.name, self.env_config = name, dict(env_config or {})
        if max_turns != DEFAULT_MAX_TURNS or tuple(reward_range) != (0.0, 1.0):
            low, high = reward_range
            self.env_spec = replace(self.env_spec, max_turns=max_turns, reward_range=(float(low), float(high)))
        self._env: Any = None
        self._turns = 0

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        index = (options or {}).get("index")
        if index is None:
            index = int(self.np_random.integers(len(self.rows)))
        elif not isinstance(index, int) or not 0 <= index < len(self.rows):
            raise AdapterError(f"env {self.env_spec.id!r}: options['index'] must be an int in [0, {len(self.rows)}), got {index!r}")
        row = self.rows[index]
        if self._env is not None:
            self._env.close()
        try:
            self._env = self._make(self.name, env_config=self.env_config, extras=row)
        except (AssertionError, KeyError, TypeError, ValueError) as e:
            raise AdapterError(
                f"env {self.env_spec.id!r}: SkyRL-gym's {self.name} rejected row {index} "
                f"({type(e).__name__}: {e}); the row needs the fields that env reads (e.g. reward_spec.ground_truth)"
            ) from e
        messages, metadata = self._env.init(_messages(row["prompt"]))
        self._turns = 0
        return _messages(messages), {"index": index, **json_dict(metadata)}

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self._env is None:
            return [], 0.0, True, False, {"error": "the episode is over; call reset()"}
        self._turns += 1
        try:
            out = self._env.step(action)
        except Exception as e:  # an env that chokes on the action ends the episode with 0
            self._close()
            return [], 0.0, True, False, {"error": f"{type(e).__name__}: {e}"}
        low, high = self.env_spec.reward_range
        reward = float(out.get("reward") or 0.0)
        reward = min(high, max(low, reward if math.isfinite(reward) else 0.0))
        terminated = bool(out.get("done"))
        truncated = not terminated and self._turns >= self.env_spec.max_turns
        info = json_dict(out.get("metadata"))
        observation = [] if terminated or truncated else _messages(out.get("observations") or [])
        if terminated or truncated:
            self._close()
        return observation, reward, terminated, truncated, info

    def _close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def close(self) -> None:
        self._close()
