"""TextArena two-player games as multi-agent OpenTinker envs: ``textarena/<game>-v0``.

TextArena (``pip install 'tinker-env-adapters[textarena]'``) plays a game as ``env.reset(
num_players, seed)``, then ``env.get_observation() -> (player_id, messages)`` and
``env.step(action) -> (done, info)`` for whoever's turn it is, and ``env.close() -> (rewards,
game_info)`` at the end. The mapping onto :class:`~tinker_core.MultiAgentTextEnv`:

- roles ``player_0`` and ``player_1`` (TextArena's player ids 0 and 1); ``agent_selection`` is
  the role of TextArena's ``state.current_player_id``;
- ``observe(role)`` is the text of every message TextArena sent that player this episode, one
  per line, tagged ``[GAME]`` or ``[Player i]`` (TextArena's own LLM observation format);
  ``observation="recent"`` shows the game's prompt and only what came since the role's last move;
- an illegal move is TextArena's business: its games answer the first one with a message and
  make the player lose on the next (``error_allowance``); an action that makes TextArena raise
  loses the game for the acting role (reason ``error: ...``);
- when the game is done, each role's reward is TextArena's (win 1, loss -1, draw 0, clipped to
  ``[-1, 1]``), given on the last step; ``infos[role]`` then holds ``outcome`` (win/loss/draw),
  ``reason`` and ``invalid_move``. After ``max_turns`` steps (both roles counted) every role is
  truncated with reward 0 and outcome ``draw``;
- ``forfeit(role, reason)`` (the coordinator's timeouts) makes ``role`` lose;
- scripted opponent ``random``: :class:`RandomMoveAgent`.

Seeding: ``reset(seed)`` seeds the episode; TextArena seeds Python's global ``random`` module with
it (its games draw from there), so two games must not be stepped concurrently in one process.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import random
import re
from dataclasses import replace
from typing import Any

from tinker_core import EnvSpec, MultiAgentTextEnv
from tinker_env_adapters._common import AdapterError, adapter_spec, ecosystem_name, require

__all__ = ["DEFAULT_MAX_TURNS", "ROLES", "RandomMoveAgent", "TextArenaEnv", "TextArenaGame", "textarena_spec"]

ROLES = ("player_0", "player_1")
DEFAULT_MAX_TURNS = 60
EXTRA = "textarena"
_MOVE_RE = re.compile(r"\[[^\[\]\n]{1,24}\]")


def textarena_spec(game: str) -> EnvSpec:
    """The registered spec of the TextArena game ``game`` (a TextArena id such as ``TicTacToe-v0``)."""
    return adapter_spec(
        f"textarena/{ecosystem_name(game)}-v0", "textarena",
        f"TextArena two-player game {game!r}: each role sees TextArena's messages to its "
        "player and answers with a move; win 1, loss -1, draw 0 at the end.",
        about={"game": game},
        kwargs={
            "max_turns": f"steps of both roles before truncation (default {DEFAULT_MAX_TURNS})",
            "observation": "'full' (default) or 'recent'",
            "game_kwargs": "keyword arguments of the TextArena game class",
        },
        max_turns=DEFAULT_MAX_TURNS, reward_range=(-1.0, 1.0), roles=ROLES,
        action_format="a move as the game's prompt asks, e.g. [4]",
    )


class RandomMoveAgent:
    """A scripted opponent for any TextArena game: a uniformly random move among the bracketed
    moves (``[4]``, ``[Bet]``...) in the latest message of its observation that lists any, or
    ``[0]`` when none does. Its choices depend only on ``seed`` and what it is shown."""

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)

    def __call__(self, role: str, observation: Any) -> str:
        text = observation if isinstance(observation, str) else str(observation)
        for line in reversed(text.split("\n[")):
            moves = sorted(set(_MOVE_RE.findall(line)))
            if moves:
                return self._rng.choice(moves)
        return "[0]"


def _entry_point(env_id: str, game: str) -> tuple[Any, dict[str, Any]]:
    require("textarena", env_id, EXTRA)
    from textarena.envs.registration import ENV_REGISTRY

    if game not in ENV_REGISTRY:
        raise AdapterError(f"env {env_id!r}: the installed TextArena has no game {game!r}; upgrade textarena")
    spec = ENV_REGISTRY[game]
    entry = spec.entry_point
    if isinstance(entry, str):
        module, _, name = entry.partition(":")
        try:
            entry = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, SyntaxError) as e:
            raise AdapterError(
                f"env {env_id!r}: TextArena's game class {spec.entry_point!r} cannot be imported "
                f"on this Python ({type(e).__name__}: {e})"
            ) from e
    return entry, dict(spec.kwargs)


class TextArenaEnv(MultiAgentTextEnv):
    """A TextArena two-player game (see the module docstring).

    Args:
        game: the TextArena registry id (``TicTacToe-v0``, ``Othello-v0-small``...).
        max_turns: steps (both roles together) before every role is truncated.
        observation: ``"full"``: every message of the episode; ``"recent"``: the game's prompt
            and the messages since the role's last move.
        game_kwargs: keyword arguments for the game class, over TextArena's registered ones.
    """

    scripted_opponents = {"random": RandomMoveAgent}  # noqa: RUF012 - read by tinker_core.opponents

    def __init__(
        self,
        game: str,
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        observation: str = "full",
        game_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.env_spec = textarena_spec(game)
        env_id = self.env_spec.id
        if not isinstance(max_turns, int) or max_turns < 1:
            raise AdapterError(f"env {env_id!r}: max_turns must be an int >= 1, got {max_turns!r}")
        if observation not in ("full", "recent"):
            raise AdapterError(f"env {env_id!r}: observation must be 'full' or 'recent', got {observation!r}")
        self._cls, self._kwargs = _entry_point(env_id, game)
        self._kwargs.update(game_kwargs or {})
        if max_turns != DEFAULT_MAX_TURNS:
            self.env_spec = replace(self.env_spec, max_turns=max_turns)
        self.game, self.max_turns, self.observation_mode = game, max_turns, observation
        self.possible_agents = list(ROLES)
        self.agents = list(ROLES)
        self._game: Any = None
        self._history: dict[str, list[str]] = {r: [] for r in ROLES}
        self._since: dict[str, int] = dict.fromkeys(ROLES, 0)
        self._steps = 0

    # ---- the TextArena game ------------------------------------------------------------------

    def _quiet(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.redirect_stdout(io.StringIO())  # some games print their board

    def _drain(self) -> None:
        """Move the messages TextArena queued for each player into that role's history."""
        queued = self._game.state.observations
        for pid, role in enumerate(ROLES):
            for from_id, message, *_ in queued.get(pid, []):
                tag = "GAME" if from_id < 0 else f"Player {from_id}"
                self._history[role].append(f"[{tag}] {message}")
            queued[pid] = []

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        super().reset(seed=seed)
        game_seed = seed if seed is not None else int(self.np_random.integers(2**31))
        self._history = {r: [] for r in ROLES}
        self._since = dict.fromkeys(ROLES, 0)
        self._steps = 0
        try:
            with self._quiet():
                self._game = self._cls(**self._kwargs)
                self._game.reset(num_players=2, seed=game_seed)
        except Exception as e:
            raise AdapterError(
                f"env {self.env_spec.id!r}: TextArena's {self.game} could not start a two-player "
                f"game offline ({type(e).__name__}: {e})"
            ) from e
        self._drain()
        self.agent_selection = ROLES[self._game.state.current_player_id]

    def observe(self, agent: str) -> str:
        lines = self._history[agent]
        if self.observation_mode == "recent" and lines:
            lines = lines[:1] + lines[max(1, self._since[agent]):]
        return "\n".join(lines)

    # ---- turns --------------------------------------------------------------------------------

    def step(self, action: str) -> None:
        if self.done:
            return  # the episode is over; reset() starts the next
        role = self.agent_selection
        self.rewards = dict.fromkeys(ROLES, 0.0)
        self._steps += 1
        try:
            with self._quiet():
                done, _ = self._game.step(action)
        except Exception as e:  # TextArena choked on the action: the actor loses
            self._end(loser=role, reason=f"error: {type(e).__name__}: {e}")
        else:
            self._drain()
            if done:
                self._finish()
            elif self._steps >= self.max_turns:
                for r in ROLES:
                    self.truncations[r] = True
                    self.infos[r] = {"outcome": "draw", "reason": "truncated", "invalid_move": False}
            else:
                self.agent_selection = ROLES[self._game.state.current_player_id]
        self._since[role] = len(self._history[role])
        self._accumulate_rewards()

    def _finish(self) -> None:
        with self._quiet():
            closed = self._game.close()
        rewards, game_info = (closed if isinstance(closed, tuple) else (closed, {})) or ({}, {})
        rewards, game_info = rewards or {}, game_info or {}
        for pid, r in enumerate(ROLES):
            reward = max(-1.0, min(1.0, float(rewards.get(pid, 0.0))))
            info = game_info.get(pid, {}) if isinstance(game_info, dict) else {}
            self.rewards[r] = reward
            self.terminations[r] = True
            self.infos[r] = {
                "outcome": "win" if reward > 0 else "loss" if reward < 0 else "draw",
                "reason": str(info.get("reason", "")),
                "invalid_move": bool(info.get("invalid_move", False)),
            }

    def _end(self, loser: str, reason: str) -> None:
        for r in ROLES:
            lost = r == loser
            self.rewards[r] = -1.0 if lost else 1.0
            self.terminations[r] = True
            self.infos[r] = {"outcome": "loss" if lost else "win", "reason": reason, "invalid_move": lost}

    def forfeit(self, role: str, reason: str) -> None:
        """End the game now: ``role`` loses (-1), the other role wins (+1)."""
        if self.done:
            return
        self.rewards = dict.fromkeys(ROLES, 0.0)
        self._end(loser=role, reason=reason)
        self._accumulate_rewards()

    def close(self) -> None:
        self._game = None

    def render(self) -> str:
        return self.observe(self.agent_selection) if self._game is not None else ""


class TextArenaGame:
    """The registered factory of one TextArena game: ``TextArenaGame(game)(**kwargs)`` builds a
    :class:`TextArenaEnv`. It carries the env's ``scripted_opponents``, so a job config that names
    one is checked before any env is built (:func:`tinker_core.scripted_opponents`)."""

    scripted_opponents = TextArenaEnv.scripted_opponents

    def __init__(self, game: str) -> None:
        self.game = game

    def __call__(self, **kwargs: Any) -> TextArenaEnv:
        return TextArenaEnv(self.game, **kwargs)
