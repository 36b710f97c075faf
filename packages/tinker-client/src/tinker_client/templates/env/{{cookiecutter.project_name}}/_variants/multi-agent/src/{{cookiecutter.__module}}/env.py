"""``{{ cookiecutter.__env_id }}``: a turn-based game for two roles. THIS is the file to edit.

The game here is a placeholder that really plays, so the package works end to end from the
start: Nim. A pile holds 5 to 12 stones (seeded); the roles ``first`` and ``second`` take
turns removing 1, 2 or 3 stones; whoever takes the last stone wins.

Rewards, per role: ``+1`` to the winner and ``-1`` to the loser on the step that ends the game.
An illegal move (no number, or a number that is not a legal take) loses the game at once, so
every episode ends within ``max_stones`` steps.

Two envs are registered:

* ``{{ cookiecutter.__env_id }}`` -- :class:`{{ cookiecutter.__class }}Game`, the game itself, a
  :class:`~tinker_core.MultiAgentTextEnv` (PettingZoo's agent-environment cycle: ``observe(role)``,
  ``step(action)`` for the role in ``agent_selection``, per-role ``rewards``), for self-play
  and for two learners.
* ``{{ cookiecutter.__solo_env_id }}`` -- :class:`{{ cookiecutter.__class }}SoloEnv`, a
  single-agent :class:`~tinker_core.TextEnv` view: the policy plays ``first`` against a
  scripted opponent (random legal moves, seeded). Any single-agent algorithm trains on it.

To make it yours, change the rules in :class:`{{ cookiecutter.__class }}Game` (``reset``,
``observe``, ``step``) and the opponent in :meth:`{{ cookiecutter.__class }}SoloEnv.opponent_move`,
and describe both in ``SPEC`` and ``SOLO_SPEC``. Keep the rules that ``tests/test_env.py``
checks with ``tinker_core.testing``: the same seed gives the same game, no action raises,
every game ends within ``env_spec.max_turns`` steps and ``infos`` hold only JSON values.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace
from typing import Any

from tinker_core import EnvSpec, MultiAgentTextEnv, TextEnv

__all__ = ["ROLES", "SOLO_SPEC", "SPEC", "RandomTaker", "{{ cookiecutter.__class }}Game", "{{ cookiecutter.__class }}SoloEnv", "legal_takes"]

ROLES: tuple[str, str] = ("first", "second")
MAX_TAKE = 3
_INT_RE = re.compile(r"-?\d+")
_STONES_RE = re.compile(r"(\d+) stones left")

SPEC = EnvSpec(
    id="{{ cookiecutter.__env_id }}",
    description={{ cookiecutter.description | jsonify }},
    max_turns=12,
    reward_range=(-1.0, 1.0),
    action_format="how many stones to take: 1, 2 or 3",
    roles=ROLES,
    metadata={"kwargs": {"min_stones": "smallest pile (default 5)", "max_stones": "largest pile (default 12)"}},
)

SOLO_SPEC = replace(
    SPEC,
    id="{{ cookiecutter.__solo_env_id }}",
    description="Play 'first' in {{ cookiecutter.__env_id }} against a random scripted opponent.",
    roles=(),
)


def legal_takes(stones: int) -> list[int]:
    """The numbers of stones a player may take from a pile of ``stones``."""
    return list(range(1, min(MAX_TAKE, stones) + 1))


def _other(role: str) -> str:
    return ROLES[1] if role == ROLES[0] else ROLES[0]


class RandomTaker:
    """A scripted opponent: takes a random legal number of stones (seeded: the same seed gives
    the same moves for the same observations). Offered as ``random`` by the game, so GRPO can
    train against it (``algorithm.params.multi_agent: {mode: opponent, opponent: random}``)
    and evaluate against it."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def __call__(self, role: str, observation: str) -> str:
        found = _STONES_RE.search(observation)
        takes = legal_takes(int(found.group(1))) if found else [1]
        return str(self.rng.choice(takes))


class {{ cookiecutter.__class }}Game(MultiAgentTextEnv):
    """Nim for two roles (see the module docstring).

    Args:
        min_stones, max_stones: the pile size is drawn from ``[min_stones, max_stones]``
            (with ``self.np_random``); ``max_turns`` is ``max_stones``.
    """

    env_spec = SPEC
    scripted_opponents = {"random": RandomTaker}  # opponents by name (see tinker_core.opponents)

    def __init__(self, min_stones: int = 5, max_stones: int = 12) -> None:
        if not 1 <= min_stones <= max_stones:
            raise ValueError(
                f"need 1 <= min_stones <= max_stones, got min_stones={min_stones}, max_stones={max_stones}"
            )
        self.min_stones, self.max_stones = int(min_stones), int(max_stones)
        if self.max_stones != SPEC.max_turns:
            self.env_spec = replace(SPEC, max_turns=self.max_stones)
        self.possible_agents = list(ROLES)
        self.reset()

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        super().reset(seed=seed, options=options)  # seeds self.np_random, clears the role dicts
        self.stones = int(self.np_random.integers(self.min_stones, self.max_stones + 1))
        self.agent_selection = ROLES[0]
        self.winner: str | None = None
        self.reason: str | None = None
        self.history: list[tuple[str, str]] = []  # (role, action) of every step
        self._update_infos()

    def observe(self, agent: str) -> str:
        if agent not in ROLES:
            raise KeyError(f"unknown role {agent!r}; roles are {', '.join(ROLES)}")
        if self.done:
            result = "You won." if agent == self.winner else "You lost."
            return f"Nim: game over ({self.reason}). {result}\n"
        lines = [f"Nim: {self.stones} stones left. Players take 1, 2 or 3 stones; whoever takes "
                 f"the last stone wins. You play {agent}."]
        if self.history:
            role, action = self.history[-1]
            lines.append(f"{role} took {action}.")
        if agent == self.agent_selection:
            lines.append("How many stones do you take?")
        else:
            lines.append(f"Waiting for {self.agent_selection}.")
        return "\n".join(lines) + "\n"

    def step(self, action: str) -> None:
        if self.done:
            raise RuntimeError(f"{type(self).__name__}.step: the game is over; call reset()")
        role = self.agent_selection
        self.rewards = {r: 0.0 for r in ROLES}
        match = _INT_RE.search(action) if isinstance(action, str) else None
        take = int(match.group(0)) if match else None
        if take not in legal_takes(self.stones):
            self.history.append((role, "an illegal move"))
            self._finish(winner=_other(role), reason=f"illegal move by {role}")
        else:
            self.stones -= take
            self.history.append((role, str(take)))
            if self.stones == 0:
                self._finish(winner=role, reason=f"{role} took the last stone")
            else:
                self.agent_selection = _other(role)
        self._accumulate_rewards()
        self._update_infos()

    def _finish(self, winner: str, reason: str) -> None:
        self.winner, self.reason = winner, reason
        for r in ROLES:
            self.rewards[r] = 1.0 if r == winner else -1.0
            self.terminations[r] = True

    def _update_infos(self) -> None:
        for r in ROLES:
            info: dict[str, Any] = {"stones": self.stones}
            if self.done:
                info.update(winner=self.winner, reason=self.reason)
            elif r == self.agent_selection:
                info["legal_moves"] = legal_takes(self.stones)
            self.infos[r] = info

    def render(self) -> str | None:
        return f"stones={self.stones} turn={self.agent_selection} history={self.history}"


class {{ cookiecutter.__class }}SoloEnv(TextEnv):
    """The game as a single-agent env: the policy plays ``first``, a scripted opponent ``second``.

    The reward of a step is what ``first`` earned from its move and the opponent's reply.
    Takes the same arguments as :class:`{{ cookiecutter.__class }}Game`.
    """

    env_spec = SOLO_SPEC

    def __init__(self, min_stones: int = 5, max_stones: int = 12) -> None:
        self.game = {{ cookiecutter.__class }}Game(min_stones, max_stones)
        self.env_spec = replace(SOLO_SPEC, max_turns=self.game.env_spec.max_turns)
        self.me, self.bot = ROLES

    def opponent_move(self) -> str:
        """The scripted opponent: a random legal take (seeded by ``reset``). Make it smarter here."""
        takes = legal_takes(self.game.stones)
        return str(takes[int(self.np_random.integers(len(takes)))])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)  # seeds self.np_random, which seeds the game and the opponent
        self.game.reset(seed=int(self.np_random.integers(2**31)))
        return self.game.observe(self.me), dict(self.game.infos[self.me])

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.game.done:
            raise RuntimeError(f"{type(self).__name__}.step: the game is over; call reset()")
        self.game.step(action)
        reward = self.game.rewards[self.me]
        if not self.game.done:
            self.game.step(self.opponent_move())
            reward += self.game.rewards[self.me]
        info = dict(self.game.infos[self.me])
        return self.game.observe(self.me), reward, self.game.done, False, info

    def render(self) -> str | None:
        return self.game.render()
